"""One parser for every process-queue body: each kind, each envelope, one model each."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dependency_tracker.cirrus.models import WorkflowEvent
from dependency_tracker.core.enums import DependencyError
from dependency_tracker.core.envelopes import is_s3_url, open_body, peek
from dependency_tracker.core.errors import InvalidMessageError
from dependency_tracker.intake.parse import read_message
from dependency_tracker.joins.messages import JoinChunkMessage, JoinMessage
from dependency_tracker.payloads.kinds import MessageKind, kind_of
from dependency_tracker.waits.messages import ProcessMessage, WaitMessage
from tests.conftest import payload, payload_id

WAIT = {"wait_for": "p"}
CALLBACK = {"task_token": "tok"}
CHUNK = {"join_id": "j-1", "index": 1, "offset": 0, "payloads_url": "s3://b/members.json"}


def sns(document: Any) -> str:
    """``document`` as an SNS notification delivers it (raw delivery off)."""
    return json.dumps({"Type": "Notification", "Message": json.dumps(document)})


def s3_loader(stored: dict[str, Any]) -> Any:
    return lambda url: json.dumps(stored[url])


@pytest.mark.parametrize(
    ("document", "model", "kind"),
    [
        (payload(callback={"task_token": "tok"}), ProcessMessage, MessageKind.PAYLOAD),
        ({"payload": payload(), "callback": CALLBACK}, ProcessMessage, MessageKind.PAYLOAD),
        ({"wait_for": "p", "callback": {"task_token": "tok"}}, WaitMessage, MessageKind.WAIT),
        (
            {"payload": {"wait_for": "p"}, "callback": {"task_token": "tok"}},
            WaitMessage,
            "wait_for",
        ),
        ({"join": {"task_token": "tok"}, "payloads": [payload()]}, JoinMessage, MessageKind.JOIN),
        ({"join_chunk": CHUNK}, JoinChunkMessage, MessageKind.JOIN_CHUNK),
    ],
)
@pytest.mark.parametrize("wrap", [json.dumps, sns], ids=["raw", "sns"])
def test_each_kind_is_read_into_its_own_model(
    document: dict[str, Any], model: type[Any], kind: str, wrap: Any
) -> None:
    # GIVEN a body of one kind, raw or SNS-wrapped
    body = wrap(document)
    # WHEN it is classified and parsed
    message = read_message(body, message_id="m-1")
    # THEN its kind names the model the parser built, and the message id is kept
    assert kind_of(open_body(body)) == kind
    assert isinstance(message, model)
    assert message.message_id == "m-1"


def test_a_url_pointer_is_read_raw_or_sns_wrapped_keeping_the_envelope_callback() -> None:
    # GIVEN a payload stored in S3 and pointers to it, raw and inside an SNS notification
    load = s3_loader({"s3://b/k.json": payload("item-s3")})
    pointer = {"url": "s3://b/k.json", "callback": {"task_token": "tok"}}
    for body in (json.dumps(pointer), sns(pointer)):
        # WHEN each is parsed
        message = read_message(body, load_url=load)
        # THEN the payload behind the url is read, with the envelope's callback
        assert isinstance(message, ProcessMessage)
        assert message.payload_id == payload_id("item-s3")
        assert message.callback is not None
        assert message.callback.task_token == "tok"


def test_an_sns_wrapped_object_behind_a_url_is_unwrapped_too() -> None:
    # GIVEN an S3 object that holds an SNS notification of a payload
    load = lambda url: sns(payload("item-in-sns"))  # noqa: E731
    # WHEN a pointer to it is parsed
    message = read_message(json.dumps({"url": "s3://b/k"}), load_url=load)
    # THEN the payload inside is read
    assert isinstance(message, ProcessMessage)
    assert message.payload_id == payload_id("item-in-sns")


@pytest.mark.parametrize(
    ("value", "expected"),
    [("s3://b/k", True), ("https://b/k", False), ("S3://b/k", False), (None, False), (3, False)],
)
def test_an_s3_url_is_a_string_with_the_s3_scheme(value: object, expected: bool) -> None:
    assert is_s3_url(value) is expected


def test_a_url_that_is_not_s3_is_refused_with_the_parents_token() -> None:
    # GIVEN a pointer to an https url, sent with a callback
    body = json.dumps({"url": "https://b/k", "callback": {"task_token": "tok"}})
    # WHEN it is parsed THEN it is refused naming the url, and the parent can be told
    with pytest.raises(InvalidMessageError, match="url must be an s3:// url") as caught:
        read_message(body, load_url=lambda url: "{}")
    assert caught.value.task_token == "tok"


def test_a_message_of_two_kinds_is_refused_as_a_join_when_a_join_is_one() -> None:
    # GIVEN a join that also carries a wait_for
    body = json.dumps({"join": {"task_token": "tok-j"}, "payloads": [], "wait_for": "p"})
    # WHEN it is classified THEN both kinds are named and the join's parent hears InvalidJoin
    with pytest.raises(InvalidMessageError) as caught:
        read_message(body)
    assert caught.value.reason == (
        "a message carries one of payload, join, wait_for, join_chunk, join_cancel; this one has "
        "'join' and 'wait_for'"
    )
    assert caught.value.task_token == "tok-j"
    assert caught.value.error_name == DependencyError.INVALID_JOIN


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ('{"id": ', "message body is not valid JSON"),
        (json.dumps({"Type": "Notification", "Message": "{broken"}), "SNS Message is not valid"),
        ("[" * 100_000 + "]" * 100_000, "message body nests too deeply to be read as JSON"),
    ],
    ids=["truncated", "sns-wrapped-broken", "deeply-nested"],
)
def test_a_body_that_is_not_json_is_refused_naming_where(body: str, reason: str) -> None:
    # WHEN a broken body is parsed THEN it is refused, saying which layer was broken
    with pytest.raises(InvalidMessageError, match=reason) as caught:
        read_message(body)
    assert not caught.value.retryable
    # AND the lenient read of the same body finds nothing
    assert peek(body) is None


def test_a_cirrus_event_is_unwrapped_by_the_same_envelope_code() -> None:
    # GIVEN a cirrus workflow event inside an SNS notification
    event = {"event_type": "SUCCEEDED", "payload_id": "c/workflow-w/i"}
    # WHEN it is read THEN it is the same event as when it comes raw
    assert WorkflowEvent.from_body(sns(event)) == WorkflowEvent.from_body(json.dumps(event))
    # AND a broken SNS message is not a workflow event
    with pytest.raises(ValueError, match="not a cirrus workflow event"):
        WorkflowEvent.from_body(json.dumps({"Type": "Notification", "Message": "{"}))
