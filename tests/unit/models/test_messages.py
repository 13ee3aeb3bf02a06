"""Process-queue envelopes: raw, SNS-wrapped, S3 url, with and without a callback."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest

from dependency_tracker.core.errors import InvalidMessageError
from dependency_tracker.intake.parse import read_message
from dependency_tracker.payloads.model import MAX_PAYLOAD_DEPTH
from dependency_tracker.waits.messages import ProcessMessage, WaitMessage
from tests.conftest import load_event, payload, payload_id

if TYPE_CHECKING:
    from dependency_tracker.payloads.documents import PayloadLoader


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


LONE = "\ud800"  # half a surrogate pair: JSON can escape it, UTF-8 cannot encode it
TOKEN = {"task_token": "tok"}


def refused(body: object, *, load_url: PayloadLoader | None = None) -> InvalidMessageError:
    """What reading ``body`` raised; the reason must be storable as it is."""
    with pytest.raises(InvalidMessageError) as caught:
        read_message(json.dumps(body), load_url=load_url)
    caught.value.reason.encode("utf-8")
    assert caught.value.retryable is False
    return caught.value


@pytest.mark.parametrize(
    ("body", "where"),
    [
        pytest.param(payload(id=f"sx/{LONE}", callback=TOKEN), "id", id="payload-id"),
        pytest.param(payload(f"a{LONE}", callback=TOKEN), "features[0].id", id="derived-id"),
        pytest.param(
            payload(properties={"title": LONE}, callback=TOKEN),
            "properties.title",
            id="property-value",
        ),
        pytest.param(
            {"payload": payload(id=f"sx/{LONE}"), "callback": TOKEN},
            "payload.id",
            id="in-a-payload-envelope",
        ),
        pytest.param({"wait_for": f"sx/{LONE}", "callback": TOKEN}, "wait_for", id="wait-for"),
        pytest.param(
            payload(callback={**TOKEN, "parent_execution": LONE}),
            "callback.parent_execution",
            id="parent-execution",
        ),
        pytest.param({"url": f"s3://b/{LONE}.json", "callback": TOKEN}, "url", id="url-never-read"),
    ],
)
def test_a_lone_surrogate_is_refused_at_once_and_the_parent_told(
    body: dict[str, object], where: str
) -> None:
    def load(url: str) -> str:
        raise AssertionError(f"read {url!a}")

    error = refused(body, load_url=load)
    assert error.reason.startswith(f"{where} is not encodable as UTF-8 (lone surrogate '\\ud800'")
    assert (error.error_name, error.task_token, error.payload_id) == (
        "DependencyInvalid",
        "tok",
        None,
    )


def test_a_lone_surrogate_in_the_token_leaves_no_token_to_answer() -> None:
    error = refused(payload(callback={"task_token": f"tok{LONE}"}))
    assert "callback.task_token is not encodable as UTF-8" in error.reason
    assert error.task_token is None


def test_a_lone_surrogate_in_a_payload_read_from_s3_is_refused_with_the_token() -> None:
    stored = json.dumps(payload(properties={"title": LONE}))
    error = refused({"url": "s3://b/k.json", "callback": TOKEN}, load_url=lambda _: stored)
    assert "properties.title is not encodable as UTF-8" in error.reason
    assert error.task_token == "tok"


def deep(levels: int) -> object:
    value: object = "leaf"
    for _ in range(levels - 1):
        value = {"a": value}
    return value


def test_a_payload_nested_400_levels_is_invalid_with_the_token() -> None:
    error = refused({"payload": payload(properties=deep(400)), "callback": TOKEN})
    assert (
        f"properties nests objects and arrays deeper than the {MAX_PAYLOAD_DEPTH} levels"
        in error.reason
    )
    assert (error.error_name, error.task_token) == ("DependencyInvalid", "tok")


def test_a_body_nested_past_what_json_reads_is_invalid_not_retried() -> None:
    body = '{"a": ' * 5000 + "1" + "}" * 5000
    with pytest.raises(InvalidMessageError, match="nests too deeply to be read as JSON") as caught:
        read_message(body)
    assert caught.value.retryable is False


@pytest.mark.parametrize(
    ("body", "kinds", "error_name"),
    [
        pytest.param(
            {"payload": payload(), "wait_for": "x/y", "callback": TOKEN},
            "'wait_for' and 'payload'",
            "DependencyInvalid",
            id="payload-envelope-and-wait-for",
        ),
        pytest.param(
            payload(wait_for="x/y", callback=TOKEN),
            "'wait_for' and 'payload'",
            "DependencyInvalid",
            id="bare-payload-and-wait-for",
        ),
        pytest.param(
            {"payload": {**payload(), "wait_for": "x/y"}, "callback": TOKEN},
            "'wait_for' and 'payload'",
            "DependencyInvalid",
            id="wait-for-inside-the-envelope",
        ),
        pytest.param(
            {"url": "s3://b/k", "wait_for": "x/y", "callback": TOKEN},
            "'wait_for' and 'payload'",
            "DependencyInvalid",
            id="url-and-wait-for",
        ),
        pytest.param(
            {"join": TOKEN, "payloads": [payload()], "payload": payload()},
            "'join' and 'payload'",
            "InvalidJoin",
            id="join-and-payload",
        ),
        pytest.param(
            {"join": TOKEN, "payloads": [payload()], "wait_for": "x/y"},
            "'join' and 'wait_for'",
            "InvalidJoin",
            id="join-and-wait-for",
        ),
        pytest.param(
            {
                "join_chunk": {"join_id": "j", "index": 1, "offset": 0, "payloads_url": "s3://b/k"},
                "wait_for": "x/y",
                "callback": TOKEN,
            },
            "'wait_for' and 'join_chunk'",
            "DependencyInvalid",
            id="join-chunk-and-wait-for",
        ),
    ],
)
def test_a_message_about_two_things_is_refused_not_half_read(
    body: dict[str, object], kinds: str, error_name: str
) -> None:
    error = refused(body, load_url=lambda _: json.dumps(payload()))
    assert error.reason == (
        "a message carries one of payload, join, wait_for, join_chunk, join_cancel; "
        f"this one has {kinds}"
    )
    assert (error.error_name, error.task_token) == (error_name, "tok")


def test_a_wait_in_a_payload_envelope_is_one_thing_and_a_payload_beside_it_a_second() -> None:
    # GIVEN what the parent's Map sends for a {"wait_for"} dependency: it is a wait
    body: dict[str, Any] = {"payload": {"wait_for": "x/y"}, "callback": TOKEN}
    message = read_message(json.dumps(body))
    assert isinstance(message, WaitMessage)
    assert message.wait_for == "x/y"
    # WHEN the dependency also carries a payload THEN it is refused, not dropped
    body["payload"].update(payload())
    assert "this one has 'wait_for' and 'payload'" in refused(body).reason
