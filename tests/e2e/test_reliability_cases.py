"""Hard cases from the reliability issue, end to end on the embedded stack.

* A parent whose token expired before the callback: the late callback is recorded
  (``PARENT_GONE:<code>``), sent once, not retried, and nothing is dead-lettered.
  The strict layer answers a late ``SendTaskSuccess`` with ``TaskTimedOut``, as
  AWS does; a second variant answers it from a hook on the handlers' Step
  Functions client, as AWS would.
* An EventBridge status change without its input and output (``included: false``,
  as EventBridge sends for executions over 248 KiB): update-state reads both with
  ``DescribeExecution`` and the parent still gets the child's result, inline or
  stored in the payload bucket, live and replayed.

The hard case of 1,000 parents on one payload is ``tests/chaos/test_hot.py``.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest
from botocore.awsrequest import AWSResponse, HTTPHeaders

from dependency_tracker.core.enums import PayloadState
from dependency_tracker_local.pumps import ExecutionPump, StreamPump
from tests.chaos.hot import SendProbe
from tests.conftest import wait_until
from tests.e2e.conftest import dependency, dependency_id, finished, start_parent, state_of, waiters
from tests.e2e.parent_limits import callback_outputs

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from dependency_tracker.table.items import WaiterItem
    from dependency_tracker_local import LocalStack

pytestmark = pytest.mark.e2e


@dataclass
class Taps:
    """What the update-state and callback handlers were given and answered, during one test.

    ``strip`` makes every status change arrive as EventBridge sends a large
    execution's: no ``input``/``output``, ``included: false``.
    """

    strip: bool = False
    status_events: list[tuple[dict[str, Any], Any]] = field(default_factory=list)
    stream_batches: list[tuple[dict[str, Any], Any]] = field(default_factory=list)
    described: list[str] = field(default_factory=list)  # DescribeExecution by update-state
    dead_before: dict[str, int] = field(default_factory=dict)
    pump_errors_before: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def update_state(
        self, handler: Callable[[dict[str, Any], Any], Any]
    ) -> Callable[[dict[str, Any], Any], Any]:
        def invoke(event: dict[str, Any], context: Any) -> Any:
            if self.strip:
                event = json.loads(json.dumps(event))
                event["detail"].update(
                    input=None,
                    output=None,
                    inputDetails={"included": False},
                    outputDetails={"included": False},
                )
            response = handler(event, context)
            with self._lock:
                self.status_events.append((event, response))
            return response

        return invoke

    def callback(
        self, handler: Callable[[dict[str, Any], Any], Any]
    ) -> Callable[[dict[str, Any], Any], Any]:
        def invoke(event: dict[str, Any], context: Any) -> Any:
            response = handler(event, context)
            with self._lock:
                self.stream_batches.append((event, response))
            return response

        return invoke

    def on_describe(self, params: dict[str, Any], **_: Any) -> None:
        with self._lock:
            self.described.append(str(params.get("executionArn")))

    def new_dead_letters(self, stack: LocalStack) -> dict[str, list[dict[str, Any]]]:
        """What the update-state and callback pumps gave up on during this test."""
        return {
            name: events[self.dead_before.get(name, 0) :]
            for name, events in stack.dead_letters.items()
        }

    def row_records(self, row: WaiterItem) -> list[tuple[dict[str, Any], bool]]:
        """Every stream record of ``row`` the callback handler got, and whether it failed it."""
        found: list[tuple[dict[str, Any], bool]] = []
        for event, response in self.stream_batches:
            failed = {item["itemIdentifier"] for item in response.get("batchItemFailures", [])}
            for record in event["Records"]:
                keys = record["dynamodb"]["Keys"]
                if (keys["payload_id"]["S"], keys["waiter_id"]["S"]) == (
                    row.payload_id,
                    row.waiter_id,
                ):
                    found.append((record, record["dynamodb"]["SequenceNumber"] in failed))
        return found


@pytest.fixture
def taps(stack: LocalStack) -> Iterator[Taps]:
    """Wraps the running update-state and callback pumps' handlers for one test."""
    executions, stream = stack.pumps["executions"], stack.pumps["stream"]
    assert isinstance(executions, ExecutionPump)
    assert isinstance(stream, StreamPump)
    tapped = Taps(
        dead_before={name: len(events) for name, events in stack.dead_letters.items()},
        pump_errors_before=stack.pump_errors,
    )
    sfn_events = handler_client(stack, "stepfunctions").meta.events
    original = executions.handler, stream.handler
    executions.handler = tapped.update_state(executions.handler)
    stream.handler = tapped.callback(stream.handler)
    sfn_events.register("before-parameter-build.sfn.DescribeExecution", tapped.on_describe)
    try:
        yield tapped
    finally:
        executions.handler, stream.handler = original
        sfn_events.unregister("before-parameter-build.sfn.DescribeExecution", tapped.on_describe)


@pytest.fixture
def sends(stack: LocalStack) -> Iterator[SendProbe]:
    """Every ``SendTask*`` the callback handler makes, with Step Functions' answer."""
    probe = SendProbe()
    probe.attach(handler_client(stack, "stepfunctions"))
    try:
        yield probe
    finally:
        probe.detach(handler_client(stack, "stepfunctions"))


def handler_client(stack: LocalStack, service: str) -> Any:
    """The client the stack's handlers call ``service`` with (their app's)."""
    assert stack.app is not None
    return stack.app.clients.get(service)


@dataclass
class TimedOutParents:
    """Answers ``TaskTimedOut``, as AWS does after a task's timeout, to sends about these ids."""

    payload_ids: set[str] = field(default_factory=set)

    def __call__(self, params: dict[str, Any], **_: Any) -> tuple[AWSResponse, Any] | None:
        body = json.loads(params.get("body") or b"{}")
        about = json.loads(body.get("output") or "{}").get("payload_id")
        if about not in self.payload_ids:
            return None
        parsed = {
            "Error": {"Code": "TaskTimedOut", "Message": "Task Timed Out: 'Provided task'"},
            "ResponseMetadata": {"HTTPStatusCode": 400},
        }
        return AWSResponse("https://states.invalid/", 400, HTTPHeaders(), None), parsed


def dlq_messages(stack: LocalStack) -> list[dict[str, Any]]:
    got: list[dict[str, Any]] = (
        stack.client("sqs")
        .receive_message(
            QueueUrl=stack.outputs["ProcessDlqUrl"], MaxNumberOfMessages=10, VisibilityTimeout=0
        )
        .get("Messages", [])
    )
    return got


@pytest.mark.parametrize(("answer", "code"), [("moto", "TaskTimedOut"), ("aws", "TaskTimedOut")])
def test_parent_gone_before_the_callback_is_recorded_once(
    stack: LocalStack, taps: Taps, sends: SendProbe, answer: str, code: str
) -> None:
    item = f"rc-late-{answer}"
    pid = dependency_id(item)
    timed_out = TimedOutParents({pid} if answer == "aws" else set())
    sfn_events = handler_client(stack, "stepfunctions").meta.events
    sfn_events.register_first("before-call.sfn.SendTaskSuccess", timed_out)
    try:
        # GIVEN a parent that waits 1 s on a child that takes 3 s
        parent = start_parent(stack, f"rc-late-{answer}", [dependency(item, seconds=3)], 1)
        (row,) = wait_until(lambda: list(waiters(stack).waiters(pid)))
        # WHEN the parent's callback timeout passes THEN it fails with DependencyTimedOut
        described = finished(stack, parent)
        assert (described["status"], described["error"]) == ("FAILED", "DependencyTimedOut")
        # AND when the child succeeds, the late callback finds the parent gone: recorded
        wait_until(lambda: _notified(stack, pid), timeout=20)
    finally:
        sfn_events.unregister("before-call.sfn.SendTaskSuccess", timed_out)
    (done,) = waiters(stack).waiters(pid)
    assert done.workflow_state is PayloadState.SUCCEEDED
    assert done.resolved_at is not None
    assert done.resolved_at > described["stopDate"]  # the child outlived the parent's wait
    assert done.notify_outcome == f"PARENT_GONE:{code}"
    # exactly one SendTask* for that row, refused with the parent-gone code
    mine = sends.by_token().get(row.task_token, [])
    assert [(s.operation, s.status, s.code) for s in mine] == [("SendTaskSuccess", 400, code)]
    # the stream record reached the callback handler once and was not failed (no retry); the
    # tap keeps a batch once the handler returned, after it marked the row: wait for it
    records = wait_until(lambda: taps.row_records(done))
    assert [record["dynamodb"]["NewImage"]["workflow_state"]["S"] for record, _ in records] == [
        "SUCCEEDED"
    ]
    assert [failed for _, failed in records] == [False]
    # and nothing reached a DLQ: stream and EventBridge destinations, the process DLQ
    assert taps.new_dead_letters(stack) == {"update-state": [], "callback": []}
    assert dlq_messages(stack) == []
    assert stack.pump_errors == taps.pump_errors_before


def _notified(stack: LocalStack, pid: str) -> bool:
    rows = list(waiters(stack).waiters(pid))
    return bool(rows) and all(row.notified_at is not None for row in rows)


def big_dependency(item: str, size: str) -> dict[str, Any]:
    """A ``simulate`` payload whose item has a self link; ``large`` outgrows the inline result."""
    body = dependency(item)
    feature = body["features"][0]
    feature["links"] = [{"rel": "self", "href": f"s3://catalog/e2e/{item}.json"}]
    if size == "large":
        feature["properties"] = {"blob": "x" * 6000}  # the result (> 4 KiB) goes to the bucket
    return body


@pytest.mark.parametrize("size", ["small", "large"])
def test_status_change_without_input_and_output(stack: LocalStack, taps: Taps, size: str) -> None:
    item = f"rc-noinput-{size}"
    pid = dependency_id(item)
    body = big_dependency(item, size)
    # GIVEN every status change arrives without input and output (included: false)
    taps.strip = True
    # WHEN a parent waits on a child that runs through the stack
    described = finished(stack, start_parent(stack, f"rc-noinput-{size}", [body]))
    # THEN update-state fetched both and the parent resumed with the child's result
    assert described["status"] == "SUCCEEDED", described.get("error")
    (summary,) = json.loads(described["output"])["dependencies"]
    state = state_of(stack, pid)
    assert state is not None
    assert state.state is PayloadState.SUCCEEDED
    child = state.execution_arn
    assert child is not None
    # the tap keeps an event once update-state returned, which the parent may not wait for
    delivered = wait_until(
        lambda: [
            (event, response)
            for event, response in taps.status_events
            if event["detail"]["executionArn"] == child
        ]
    )
    assert len(delivered) == 1
    event, response = delivered[0]
    assert response == {"action": "recorded"}
    assert (event["detail"]["input"], event["detail"]["output"]) == (None, None)
    assert (
        event["detail"]["inputDetails"] == event["detail"]["outputDetails"] == {"included": False}
    )
    # one DescribeExecution gives update-state both the input and the output
    assert taps.described.count(child) == 1
    child_output = json.loads(
        stack.client("stepfunctions").describe_execution(executionArn=child)["output"]
    )
    assert child_output["features"] == body["features"]
    full = {
        "items": [{"id": item, "collection": "e2e", "href": f"s3://catalog/e2e/{item}.json"}],
        "output": child_output,
    }
    if size == "small":
        expected = full
    else:
        text = json.dumps(full, sort_keys=True)
        digest = hashlib.sha256(pid.encode("utf-8")).hexdigest()
        bucket = stack.outputs["PayloadBucketName"]
        expected = {
            "bytes": len(text.encode("utf-8")),
            "item_count": 1,
            "url": f"s3://{bucket}/results/{digest}/1.json",
        }
        stored = stack.client("s3").get_object(Bucket=bucket, Key=f"results/{digest}/1.json")
        assert json.loads(stored["Body"].read()) == full
    # the callback output (the contract) carries the result; the parent keeps only the id
    (sent,) = callback_outputs(stack, described["executionArn"])
    assert sent == {
        "payload_id": pid,
        "state": "SUCCEEDED",
        "execution_arn": child,
        "replayed": False,
        "result": expected,
    }
    assert summary == {"payload_id": pid, "replayed": False}
    assert state.result_json is not None
    assert json.loads(state.result_json) == expected
    # AND a later parent gets it replayed, and nothing runs again
    again = finished(stack, start_parent(stack, f"rc-noinput-{size}-again", [body]))
    assert again["status"] == "SUCCEEDED"
    (replayed,) = json.loads(again["output"])["dependencies"]
    assert replayed == {**summary, "replayed": True}
    after = state_of(stack, pid)
    assert after is not None
    assert after.executions == [child]
    assert taps.new_dead_letters(stack) == {"update-state": [], "callback": []}
