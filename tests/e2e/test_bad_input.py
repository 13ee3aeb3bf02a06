"""Bad input on the process queue: reported, recorded or dead-lettered; nothing lost."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

from dependency_tracker.core.enums import PayloadState
from dependency_tracker.table.items import WaiterItem
from tests.conftest import wait_until
from tests.e2e.conftest import dependency, finished, start_parent, state_of, waiters

if TYPE_CHECKING:
    from typing import Any

    from dependency_tracker_local import LocalStack

pytestmark = pytest.mark.e2e

# Far longer than any test waits: a parent that stops did so because it was answered.
PATIENT = 600


def test_invalid_dependency_message_fails_its_parent_at_once(stack: LocalStack) -> None:
    # GIVEN a parent whose dependency has neither features nor id
    parent = start_parent(stack, "bad-dep", [{"process": [{"workflow": "simulate"}]}])
    # THEN it hears DependencyInvalid instead of waiting for its timeout
    described = finished(stack, parent)
    assert (described["status"], described["error"]) == ("FAILED", "DependencyInvalid")


def test_garbage_is_recorded_and_unknown_workflows_reach_the_dlq(stack: LocalStack) -> None:
    sqs = stack.client("sqs")
    queue = stack.outputs["ProcessQueueUrl"]
    # GIVEN garbage, a payload for a workflow nobody deployed, and a good payload
    garbage = sqs.send_message(QueueUrl=queue, MessageBody="{this is not json")["MessageId"]
    unknown = dependency("b-unknown")
    unknown["process"][0]["workflow"] = "not-deployed"
    sqs.send_message(QueueUrl=queue, MessageBody=json.dumps(unknown))
    sqs.send_message(QueueUrl=queue, MessageBody=json.dumps(dependency("b-good")))
    # THEN the good one runs, the garbage is recorded as invalid ...
    wait_until(
        lambda: (
            (item := state_of(stack, "e2e/workflow-simulate/b-good")) is not None
            and item.state is PayloadState.SUCCEEDED
        )
    )
    record = wait_until(lambda: state_of(stack, f"invalid-message/{garbage}"))
    assert record.state is PayloadState.INVALID
    assert "not valid JSON" in (record.last_error or "")
    # ... and the unknown workflow is retried, then lands in the DLQ, intact
    dlq = stack.outputs["ProcessDlqUrl"]

    def dead_lettered() -> list[dict[str, str]]:
        messages: list[dict[str, str]] = sqs.receive_message(
            QueueUrl=dlq, MaxNumberOfMessages=10, AttributeNames=["All"]
        ).get("Messages", [])
        return messages

    (message,) = wait_until(dead_lettered, timeout=60)
    assert json.loads(message["Body"]) == unknown
    assert int(message["Attributes"]["ApproximateReceiveCount"]) >= 3


def nested(levels: int) -> Any:
    """A value that, under a payload's key, makes the payload ``levels`` deep."""
    value: Any = "leaf"
    for _ in range(levels - 1):
        value = {"a": value}
    return value


def failed_at_once(
    stack: LocalStack, parent: str, *, named: str | None = None
) -> tuple[str, list[str]]:
    """The error a parent failed with, well before its own timeout, and the causes it was sent.

    The cause the tracker sent is read from the row that answered the parent (moto
    drops a ``SendTaskFailure`` cause), found by the parent it names (``named``, if not
    ``parent`` as it is); the parent's own cause joins it when it has one.
    """
    described = finished(stack, parent, timeout=30)
    assert described["status"] == "FAILED"
    (sent,) = [
        row.cause or ""
        for page in waiters(stack).scan_pages()
        for row in page
        if isinstance(row, WaiterItem)
        and row.parent_execution == (named or parent)
        and row.error_name
    ]
    received = described.get("cause")
    return described["error"], [sent, received] if received else [sent]


def waiting_parent(stack: LocalStack, name: str) -> tuple[str, str]:
    """A parent holding a token, waiting on a payload nobody starts: its ARN and token."""
    never = f"e2e/workflow-simulate/never-{name}"
    parent = start_parent(stack, name, [{"wait_for": never}], timeout_seconds=PATIENT)
    row = wait_until(lambda: next(iter(waiters(stack).waiters(never)), None))
    return parent, row.task_token


def send(stack: LocalStack, body: str) -> str:
    queue = stack.outputs["ProcessQueueUrl"]
    return str(stack.client("sqs").send_message(QueueUrl=queue, MessageBody=body)["MessageId"])


def test_a_lone_surrogate_in_a_payload_id_answers_the_parent_at_once(stack: LocalStack) -> None:
    # GIVEN a parent holding a token
    parent, token = waiting_parent(stack, "lone-surrogate")
    # WHEN a message with its token names a payload id no AWS service can store (the body
    # itself is plain ASCII JSON: the escape only decodes to a lone surrogate)
    bad = {**dependency("s"), "id": "sx/\ud800"}
    callback = {"task_token": token, "parent_execution": parent}
    send(stack, json.dumps({"payload": bad, "callback": callback}))
    # THEN the parent hears DependencyInvalid naming the field
    error, causes = failed_at_once(stack, parent)
    assert error == "DependencyInvalid"
    assert all("payload.id is not encodable as UTF-8" in cause for cause in causes)


def test_a_lone_surrogate_in_the_parent_named_still_answers_it(stack: LocalStack) -> None:
    # GIVEN a message with a parent's token that names its parent with a lone surrogate
    parent, token = waiting_parent(stack, "surrogate-parent")
    callback = {"task_token": token, "parent_execution": f"{parent}\ud800"}
    send(stack, json.dumps({"payload": dependency("sp"), "callback": callback}))
    # THEN the parent is told, its name kept escaped
    error, causes = failed_at_once(stack, parent, named=f"{parent}\\ud800")
    assert error == "DependencyInvalid"
    assert all("callback.parent_execution is not encodable" in cause for cause in causes)


def test_a_body_nested_past_what_json_reads_is_recorded_not_retried(stack: LocalStack) -> None:
    # GIVEN a body nested deeper than any JSON parser here reads (no token can be read)
    message_id = send(stack, '{"a": ' * 5000 + "1" + "}" * 5000)
    # THEN it is recorded as invalid at once, not retried into the DLQ
    record = wait_until(lambda: state_of(stack, f"invalid-message/{message_id}"))
    assert record.state is PayloadState.INVALID
    assert "nests too deeply to be read as JSON" in (record.last_error or "")


@pytest.mark.parametrize(
    ("name", "bad", "where"),
    [
        pytest.param(
            "too-deep",
            dependency("deep") | {"properties": nested(400)},
            "properties nests objects and arrays deeper than the 100 levels",
            id="nested-400-levels",
        ),
        pytest.param(
            "wait-and-payload",
            dependency("both") | {"wait_for": "e2e/workflow-simulate/other"},
            "this one has 'wait_for' and 'payload'",
            id="wait-for-beside-a-payload",
        ),
        pytest.param(
            "replace-yes",
            dependency("yes") | {"process": [{"workflow": "simulate", "replace": "yes"}]},
            "process.0.replace: Input should be a valid boolean, got a string",
            id="replace-not-a-boolean",
        ),
    ],
)
def test_a_dependency_that_can_never_run_answers_its_parent_at_once(
    stack: LocalStack, name: str, bad: dict[str, Any], where: str
) -> None:
    # GIVEN a parent whose one dependency no retry could ever make valid
    parent = start_parent(stack, name, [bad], timeout_seconds=PATIENT)
    # THEN it fails with DependencyInvalid naming why, long before its timeout
    error, causes = failed_at_once(stack, parent)
    assert error == "DependencyInvalid"
    assert all(where in cause for cause in causes)


@pytest.mark.parametrize(
    ("name", "quorum", "got"),
    [
        pytest.param("quorum-string", "2", "a string", id="string"),
        pytest.param("quorum-true", True, "true", id="true"),
    ],
)
def test_a_quorum_that_is_not_an_integer_fails_the_join_at_once(
    stack: LocalStack, name: str, quorum: object, got: str
) -> None:
    # GIVEN the wait-for-join parent, which passes its input's quorum through as given
    members = [dependency(f"{name}-1"), dependency(f"{name}-2")]
    parent = stack.client("stepfunctions").start_execution(
        stateMachineArn=stack.outputs["StateMachines"]["wait-for-join"],
        name=name,
        input=json.dumps({"dependencies": members, "quorum": quorum, "timeout_seconds": PATIENT}),
    )["executionArn"]
    # THEN the join is refused as InvalidJoin naming the field, and no member ran
    error, causes = failed_at_once(stack, parent)
    assert error == "InvalidJoin"
    assert all(f"join.quorum: Input should be a valid integer, got {got}" in c for c in causes)
    assert state_of(stack, f"e2e/workflow-simulate/{name}-1") is None
