"""The last receive: no message with a readable token reaches the DLQ before its parent is told.

A failure retrying could fix fails the record (SQS retries it); on the receive the
queue's ``maxReceiveCount`` makes the last, the parent is answered first, then the
record fails all the same, so the whole message reaches the DLQ.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest

from dependency_tracker.core import settings
from dependency_tracker.core.enums import DependencyError, PayloadState
from dependency_tracker.handlers import process as process_handler
from dependency_tracker.handlers.process import lambda_handler
from dependency_tracker.intake.invalid import token_to_answer
from dependency_tracker.table.items import waiter_id_for
from tests.conftest import WORKFLOW_ARN_PREFIX, fresh_app, payload
from tests.unit.handlers.conftest import sqs_event

if TYPE_CHECKING:
    from dependency_tracker.table.items import WaiterItem
    from dependency_tracker_local.context import LocalContext
    from tests.conftest import Aws

MAX_RECEIVES = 3
BUCKET = "deptrack-payloads"
MISSING_KEY = f"s3://{BUCKET}/payloads/not-written-yet.json"
MISSING_BUCKET = "s3://no-such-bucket-anywhere/payloads/p.json"


@pytest.fixture
def last_receive(aws: Aws, monkeypatch: pytest.MonkeyPatch) -> Aws:
    """The process function told the queue's maxReceiveCount, as the template tells it."""
    monkeypatch.setenv(settings.ENV_PROCESS_MAX_RECEIVE_COUNT, str(MAX_RECEIVES))
    monkeypatch.setenv(settings.ENV_PAYLOAD_BUCKET, BUCKET)
    monkeypatch.setenv(settings.ENV_PROCESS_QUEUE_URL, aws.queue_url)
    aws.s3.create_bucket(Bucket=BUCKET)
    fresh_app()
    return aws


def deliver(
    body: dict[str, Any], context: LocalContext, *, receive: int, message_id: str = "m-1"
) -> list[str]:
    """Hand ``body`` to the handler as its ``receive``-th delivery; the ids that failed."""
    event = sqs_event(body, ids=[message_id])
    event["Records"][0]["attributes"]["ApproximateReceiveCount"] = str(receive)
    response = lambda_handler(event, context)
    return [item["itemIdentifier"] for item in response["batchItemFailures"]]


def answer(aws: Aws, message_id: str, token: str) -> WaiterItem | None:
    """The row that makes the callback handler send ``SendTaskFailure`` to ``token``."""
    return aws.dependencies.get(f"invalid-message/{message_id}", waiter_id_for(token))


def wait(url: str, token: str) -> dict[str, Any]:
    """What the parent state machine sends: a payload by reference, and its callback."""
    return {"payload": {"url": url}, "callback": {"task_token": token, "parent_execution": "arn:p"}}


@pytest.mark.usefixtures("workflows")
def test_a_missing_bucket_is_answered_at_once(
    last_receive: Aws, lambda_context: LocalContext
) -> None:
    # GIVEN a dependency, and a join member, in a bucket that does not exist
    join = {"join": {"task_token": "tok-join"}, "payloads": [{"url": MISSING_BUCKET}]}
    # WHEN each arrives for the first time
    assert deliver(wait(MISSING_BUCKET, "tok-wait"), lambda_context, receive=1) == []
    assert deliver(join, lambda_context, receive=1, message_id="m-join") == []
    # THEN neither is retried: each parent hears why at once, the url and the code named
    for message_id, token, error in (
        ("m-1", "tok-wait", DependencyError.INVALID),
        ("m-join", "tok-join", DependencyError.INVALID_JOIN),
    ):
        row = answer(last_receive, message_id, token)
        assert row is not None, message_id
        assert (row.workflow_state, row.error_name) == (PayloadState.INVALID, error)
        assert MISSING_BUCKET in (row.cause or "")
        assert "NoSuchBucket" in (row.cause or "")


@pytest.mark.usefixtures("workflows")
def test_a_missing_key_is_retried_then_answered_on_the_last_receive(
    last_receive: Aws, lambda_context: LocalContext
) -> None:
    body = wait(MISSING_KEY, "tok-late")
    # GIVEN a dependency whose object is not written yet: retried, nobody answered
    for receive in range(1, MAX_RECEIVES):
        assert deliver(body, lambda_context, receive=receive) == ["m-1"]
        assert answer(last_receive, "m-1", "tok-late") is None
    # WHEN it fails on the last receive the queue allows
    assert deliver(body, lambda_context, receive=MAX_RECEIVES) == ["m-1"]
    # THEN the record still fails (the whole message goes to the DLQ) but the parent
    # hears DependencyInvalid first, with what failed and that it was the last try
    row = answer(last_receive, "m-1", "tok-late")
    assert row is not None
    assert (row.workflow_state, row.error_name) == (PayloadState.INVALID, DependencyError.INVALID)
    assert row.parent_execution == "arn:p"
    cause = row.cause or ""
    assert f"cannot read {MISSING_KEY}: NoSuchKey" in cause
    assert f"receive {MAX_RECEIVES}, the last" in cause
    record = last_receive.states.get("invalid-message/m-1")
    assert record is not None
    assert record.last_error == row.cause


@pytest.mark.usefixtures("workflows")
def test_an_unknown_workflow_is_answered_on_the_last_receive(
    last_receive: Aws, lambda_context: LocalContext
) -> None:
    body = payload("item-nowhere", workflow="never-deployed", callback={"task_token": "tok-u"})
    assert deliver(body, lambda_context, receive=1) == ["m-1"]
    assert answer(last_receive, "m-1", "tok-u") is None
    assert deliver(body, lambda_context, receive=MAX_RECEIVES) == ["m-1"]
    row = answer(last_receive, "m-1", "tok-u")
    assert row is not None
    assert row.error_name is DependencyError.INVALID
    assert "'never-deployed'" in (row.cause or "")
    assert f"{WORKFLOW_ARN_PREFIX}never-deployed" in (row.cause or "")


@pytest.mark.usefixtures("workflows")
def test_an_unexpected_error_on_the_last_receive_answers_the_parent(
    last_receive: Aws, lambda_context: LocalContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a flow that fails in a way nobody foresaw, echoing the token it was given
    flow = process_handler.process_flow()

    def broken(message: Any) -> Any:
        msg = f"the table went away while holding {message.callback.task_token}"
        raise RuntimeError(msg)

    monkeypatch.setattr(flow, "handle", broken)
    body = payload(callback={"task_token": "tok-boom"})
    # WHEN it fails before and on the last receive
    assert deliver(body, lambda_context, receive=MAX_RECEIVES - 1) == ["m-1"]
    assert answer(last_receive, "m-1", "tok-boom") is None
    assert deliver(body, lambda_context, receive=MAX_RECEIVES) == ["m-1"]
    # THEN the parent hears what failed, and no token is kept as text
    row = answer(last_receive, "m-1", "tok-boom")
    assert row is not None
    assert row.error_name is DependencyError.INVALID
    assert "RuntimeError: the table went away" in (row.cause or "")
    assert "tok-boom" not in (row.cause or "")


@pytest.mark.usefixtures("workflows")
def test_a_join_failing_its_last_receive_fails_with_invalid_join(
    last_receive: Aws, lambda_context: LocalContext
) -> None:
    # GIVEN a join whose member is not written yet (its row is never created), and one
    # whose member's workflow is not deployed (its row exists, the member cannot start)
    unread = {"join": {"task_token": "tok-unread"}, "payloads": [{"url": MISSING_KEY}]}
    unknown = {
        "join": {"task_token": "tok-unknown", "join_id": "unknown-member"},
        "payloads": [payload("member-x", workflow="never-deployed")],
    }
    # WHEN both fail on their last receive
    assert deliver(unread, lambda_context, receive=MAX_RECEIVES, message_id="unread") == ["unread"]
    assert deliver(unknown, lambda_context, receive=MAX_RECEIVES, message_id="unknown") == [
        "unknown"
    ]
    # THEN each parent hears InvalidJoin: through an invalid-message record, or its join row
    row = answer(last_receive, "unread", "tok-unread")
    assert row is not None
    assert row.error_name is DependencyError.INVALID_JOIN
    assert "NoSuchKey" in (row.cause or "")
    join = last_receive.joins.get("unknown-member")
    assert join is not None
    assert (join.workflow_state, join.error) == (PayloadState.FAILED, DependencyError.INVALID_JOIN)
    assert "'never-deployed'" in (join.cause or "")
    assert last_receive.states.get("invalid-message/unknown") is None


@pytest.mark.usefixtures("workflows")
def test_a_join_chunk_failing_its_last_receive_fails_the_join(
    last_receive: Aws, lambda_context: LocalContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a join registered one member per invocation, whose second member's object
    # is not there: the first invocation sends a join_chunk message for it
    monkeypatch.setenv(settings.ENV_JOIN_CHUNK_SIZE, "1")
    fresh_app()
    join = {
        "join": {"task_token": "tok-chunked", "join_id": "chunked"},
        "payloads": [payload("member-1"), {"url": MISSING_KEY}],
    }
    assert deliver(join, lambda_context, receive=1, message_id="m-join") == []
    sqs = last_receive.sqs
    (sent,) = sqs.receive_message(QueueUrl=last_receive.queue_url).get("Messages", [])
    chunk = json.loads(sent["Body"])
    assert chunk["join_chunk"]["join_id"] == "chunked"
    # WHEN that message fails before, then on, its last receive
    assert deliver(chunk, lambda_context, receive=1, message_id="m-chunk") == ["m-chunk"]
    row = last_receive.joins.get("chunked")
    assert row is not None
    assert row.workflow_state is PayloadState.PROCESSING
    assert deliver(chunk, lambda_context, receive=MAX_RECEIVES, message_id="m-chunk") == ["m-chunk"]
    # THEN the join is decided InvalidJoin with the cause, which its row's token is sent
    row = last_receive.joins.get("chunked")
    assert row is not None
    assert row.workflow_state is PayloadState.FAILED
    assert row.error == DependencyError.INVALID_JOIN
    assert "NoSuchKey" in (row.cause or "")
    assert f"receive {MAX_RECEIVES}, the last" in (row.cause or "")


@pytest.mark.usefixtures("workflows")
def test_only_a_readable_token_is_answered_and_only_with_the_setting(
    last_receive: Aws, lambda_context: LocalContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN messages failing for good on their last receive, one without a token
    bare = {"url": MISSING_KEY}
    assert deliver(bare, lambda_context, receive=MAX_RECEIVES, message_id="bare") == ["bare"]
    assert deliver(wait(MISSING_KEY, "tok-on"), lambda_context, receive=4, message_id="on") == [
        "on"
    ]
    # THEN the one without a token just fails (nobody to tell, nothing recorded) ...
    assert last_receive.states.get("invalid-message/bare") is None
    # ... and one past the count (the queue's count was lowered meanwhile) is answered too
    assert answer(last_receive, "on", "tok-on") is not None
    # WHEN the setting is unset, the rule is off: the parent is left to its timeout
    monkeypatch.delenv(settings.ENV_PROCESS_MAX_RECEIVE_COUNT)
    fresh_app()
    assert deliver(wait(MISSING_KEY, "tok-off"), lambda_context, receive=99, message_id="off") == [
        "off"
    ]
    assert answer(last_receive, "off", "tok-off") is None


def test_a_token_with_no_utf8_form_is_not_read_from_a_broken_body() -> None:
    # GIVEN bodies whose token has a lone surrogate (Step Functions could never take it back)
    for holder in ("callback", "join"):
        body = json.dumps({holder: {"task_token": "tok-\ud800"}})
        # THEN no parent is read from it; a sound token still is
        assert token_to_answer(body)[0] is None
        assert token_to_answer(json.dumps({holder: {"task_token": "tok-1"}}))[0] == "tok-1"
