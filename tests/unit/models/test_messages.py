"""Process-queue envelopes: raw, SNS-wrapped, S3 url, with and without a callback."""

from __future__ import annotations

import json

import pytest

from dependency_tracker.errors import InvalidMessageError
from dependency_tracker.models import ProcessMessage
from tests.conftest import load_event, payload, payload_id


def test_bare_payload_has_no_callback() -> None:
    message = ProcessMessage.from_body(json.dumps(payload()), message_id="m1")
    assert message.payload_id == payload_id()
    assert message.callback is None
    assert message.message_id == "m1"


def test_callback_is_split_from_the_payload() -> None:
    body = payload(callback={"task_token": "tok", "parent_execution": "arn:p"})
    message = ProcessMessage.from_body(json.dumps(body))
    assert message.callback is not None
    assert message.callback.task_token == "tok"
    assert message.callback.parent_execution == "arn:p"
    assert message.callback.waiter_payload_id is None
    # the token never reaches the child workflow
    assert "callback" not in message.payload.execution_input()
    assert "tok" not in message.payload.execution_input()


def test_sns_notification_is_unwrapped() -> None:
    body = load_event("sqs_sns_wrapped.json")["Records"][0]["body"]
    message = ProcessMessage.from_body(body)
    assert message.payload_id == payload_id("item-sns")


def test_url_pointer_is_loaded_and_keeps_the_envelope_callback() -> None:
    stored = json.dumps(payload("item-s3"))
    seen: list[str] = []

    def load(url: str) -> str:
        seen.append(url)
        return stored

    body = json.dumps({"url": "s3://b/k.json", "callback": {"task_token": "tok"}})
    message = ProcessMessage.from_body(body, load_url=load)
    assert seen == ["s3://b/k.json"]
    assert message.payload_id == payload_id("item-s3")
    assert message.callback is not None
    assert message.callback.task_token == "tok"


@pytest.mark.parametrize(
    ("body", "match", "token"),
    [
        pytest.param("{not json", "not valid JSON", None, id="bad-json"),
        pytest.param("[1, 2]", "expected a JSON object", None, id="array"),
        pytest.param('"text"', "expected a JSON object", None, id="string"),
        pytest.param(json.dumps({"hello": "world"}), "process", None, id="not-a-payload"),
        pytest.param(
            json.dumps({"process": [{"workflow": "w"}], "callback": {"task_token": "t"}}),
            "needs an 'id'",
            "t",
            id="no-features-no-id-token-kept",
        ),
        pytest.param(
            json.dumps(payload(callback={"task_token": ""})),
            "task_token",
            None,
            id="empty-token",
        ),
        pytest.param(
            json.dumps(payload(callback="nope")), "callback", None, id="callback-not-an-object"
        ),
        pytest.param(
            json.dumps({"Type": "Notification", "Message": "{oops"}),
            "SNS Message is not valid JSON",
            None,
            id="bad-sns",
        ),
    ],
)
def test_invalid_bodies(body: str, match: str, token: str | None) -> None:
    with pytest.raises(InvalidMessageError, match=match) as caught:
        ProcessMessage.from_body(body, load_url=lambda url: "{}")
    assert caught.value.retryable is False
    assert caught.value.task_token == token


def test_non_s3_url_is_invalid() -> None:
    with pytest.raises(InvalidMessageError, match="s3:// url"):
        ProcessMessage.from_body(json.dumps({"url": "https://x/y"}), load_url=lambda url: "{}")


def test_payload_envelope_from_a_state_machine() -> None:
    # GIVEN the body a sendMessage.waitForTaskToken task builds around the token
    body = {
        "payload": payload(),
        "callback": {"task_token": "tok", "parent_execution": "arn:p", "waiter_payload_id": None},
    }
    message = ProcessMessage.from_body(json.dumps(body))
    assert message.payload_id == payload_id()
    assert message.callback is not None
    assert message.callback.task_token == "tok"
    assert message.callback.waiter_payload_id is None


def test_payload_envelope_around_a_url() -> None:
    body = {"payload": {"url": "s3://b/k"}, "callback": {"task_token": "tok"}}
    message = ProcessMessage.from_body(
        json.dumps(body), load_url=lambda url: json.dumps(payload("item-u"))
    )
    assert message.payload_id == payload_id("item-u")
    assert message.callback is not None


def test_unreadable_url_keeps_the_token() -> None:
    def load(url: str) -> str:
        return "{not json"

    body = json.dumps({"url": "s3://b/k", "callback": {"task_token": "tok"}})
    with pytest.raises(InvalidMessageError, match="not valid JSON") as caught:
        ProcessMessage.from_body(body, load_url=load)
    assert caught.value.task_token == "tok"
