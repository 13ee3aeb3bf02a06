"""A parent's send throttled once: retried on a new token, and the parent still gets its answer.

The fault is injected into moto's execution of the parents' ``sqs:sendMessage``
Task (``StateTaskServiceSqs._eval_service_task``), on the first attempt of a
marked dependency only, either before the message is sent (nothing reached the
queue) or after (the message was delivered, and the Task still failed: a
timeout on Step Functions' side of a send that went through). The error carries
the name Step Functions gives it for the optimized SQS integration. The Task's
``Retry`` sends again, with a new task token (as on AWS: the strict layer's
``task_tokens`` models it); the first token's message, when it was delivered,
is answered all the same and refused (``TaskTimedOut``), which the tracker
records as "parent gone" without retrying or dead-lettering anything.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest
from botocore.exceptions import ClientError
from moto.stepfunctions.parser.api import HistoryEventType, TaskFailedEventDetails
from moto.stepfunctions.parser.asl.component.common.error_name.custom_error_name import (
    CustomErrorName,
)
from moto.stepfunctions.parser.asl.component.common.error_name.failure_event import (
    FailureEvent,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_task.service.state_task_service_sqs import (  # noqa: E501 - moto's module path
    StateTaskServiceSqs,
)
from moto.stepfunctions.parser.asl.eval.event.event_detail import EventDetails

from dependency_tracker.table.items import waiter_id_for
from tests.conftest import wait_until
from tests.e2e.conftest import dependency, dependency_id, finished, start_parent, waiters

if TYPE_CHECKING:
    from dependency_tracker_local import LocalStack

pytestmark = pytest.mark.e2e

JOIN = "wait-for-join"
# The names Step Functions gives a failed call of its optimized SQS integration.
THROTTLED = "SQS.AmazonSQSException"
CLIENT_SIDE = "SQS.SdkClientException"


class InjectedSendError(ClientError):
    """A throttled SendMessage, reported to the Task under ``error_name``."""

    def __init__(self, error_name: str) -> None:
        response: Any = {
            "Error": {"Code": "ThrottlingException", "Message": "Rate exceeded (injected)"},
            "ResponseMetadata": {"HTTPStatusCode": 400},
        }
        super().__init__(response, "SendMessage")
        self.error_name = error_name


@dataclass
class SendFaults:
    """The first send of a message naming ``marker`` fails, ``when`` the message is sent."""

    marker: str
    # "before" or "after" the message reaches the queue; "late": it reaches the queue only
    # after the Retry's message (SQS gives no order: the first send is delivered last);
    # "always": every attempt fails before it is sent (a refusal no retry mends)
    when: str
    error_name: str = THROTTLED
    attempts: list[str] = field(default_factory=list)  # the token of each attempt
    delivered: list[str] = field(default_factory=list)  # ... of each message that was sent
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _held: tuple[Any, Any, dict[str, Any]] | None = None

    def send(self, original: Any, task: Any, **call: Any) -> None:
        """Run the send (``original``), failing its first attempt before or after it."""
        body = call["normalised_parameters"].get("MessageBody")
        message = json.loads(body if isinstance(body, str) else json.dumps(body))
        token = str((message.get("callback") or message.get("join") or {})["task_token"])
        with self._lock:
            self.attempts.append(token)
            first = len(self.attempts) == 1
        if self.when == "always":
            raise InjectedSendError(self.error_name)
        if first and self.when in ("before", "late"):
            if self.when == "late":
                self._held = (original, task, call)
            raise InjectedSendError(self.error_name)
        original(task, **call)
        with self._lock:
            self.delivered.append(token)
        if first:
            raise InjectedSendError(self.error_name)
        held, self._held = self._held, None
        if held is not None:  # the first send, delivered after the Retry's
            late, late_task, late_call = held
            late(late_task, **late_call)
            with self._lock:
                self.delivered.append(self.attempts[0])


@pytest.fixture
def faults(monkeypatch: pytest.MonkeyPatch) -> list[SendFaults]:
    """Patch moto's SQS Task (sends and error names) for the faults the test appends."""
    installed: list[SendFaults] = []
    send, name_error = StateTaskServiceSqs._eval_service_task, StateTaskServiceSqs._from_error

    def eval_service_task(self: Any, **call: Any) -> None:
        body = call["normalised_parameters"].get("MessageBody")
        text = body if isinstance(body, str) else json.dumps(body)
        for fault in installed:
            if fault.marker in text:
                fault.send(send, self, **call)
                return
        send(self, **call)

    def from_error(self: Any, env: Any, ex: Exception) -> FailureEvent:
        if not isinstance(ex, InjectedSendError):
            return name_error(self, env, ex)
        details = TaskFailedEventDetails(
            error=ex.error_name,
            cause=str(ex),
            resource=self._get_sfn_resource(),
            resourceType=self._get_sfn_resource_type(),
        )
        return FailureEvent(
            env=env,
            error_name=CustomErrorName(ex.error_name),
            event_type=HistoryEventType.TaskFailed,
            event_details=EventDetails(taskFailedEventDetails=details),  # type: ignore[typeddict-item]
        )

    monkeypatch.setattr(StateTaskServiceSqs, "_eval_service_task", eval_service_task)
    monkeypatch.setattr(StateTaskServiceSqs, "_from_error", from_error)
    return installed


def history_errors(stack: LocalStack, execution_arn: str) -> list[str]:
    """The error of every failed task attempt in the parent's history."""
    events = stack.client("stepfunctions").get_execution_history(
        executionArn=execution_arn, maxResults=1000
    )["events"]
    return [e["taskFailedEventDetails"]["error"] for e in events if e["type"] == "TaskFailed"]


def notify_outcome(stack: LocalStack, payload_id: str, token: str) -> str | None:
    rows = {row.waiter_id: row for row in waiters(stack).waiters(payload_id)}
    row = rows.get(waiter_id_for(token))
    return None if row is None or row.notified_at is None else row.notify_outcome


@pytest.mark.parametrize(
    ("when", "error_name"),
    [("before", THROTTLED), ("after", THROTTLED), ("before", CLIENT_SIDE), ("after", CLIENT_SIDE)],
)
def test_a_throttled_send_is_retried_and_the_parent_gets_its_answer(
    stack: LocalStack, faults: list[SendFaults], when: str, error_name: str
) -> None:
    # GIVEN a parent on two dependencies whose first send of one is throttled, before or
    # after SQS took the message
    item = f"send-{when}-{error_name.rsplit('.', 1)[1].lower()}"
    fault = SendFaults(marker=f'"{item}"', when=when, error_name=error_name)
    faults.append(fault)
    parent = start_parent(stack, item, [dependency(item), dependency(f"{item}-other")])
    # WHEN it runs
    described = finished(stack, parent, timeout=60)
    # THEN the send was retried once, on a new token, and the parent succeeded with both
    assert described["status"] == "SUCCEEDED", (described.get("error"), described.get("cause"))
    assert history_errors(stack, parent) == [error_name]
    first, retry = fault.attempts
    assert first != retry
    output = json.loads(described["output"])
    assert [d["payload_id"] for d in output["dependencies"]] == [
        dependency_id(item),
        dependency_id(f"{item}-other"),
    ]
    pid = dependency_id(item)
    if when == "before":
        # AND the tracker never heard of the first token
        assert fault.delivered == [retry]
        assert notify_outcome(stack, pid, first) is None
    else:
        # AND both messages were delivered; the first token's answer was refused, and the
        # tracker took it as a parent that has gone (done: not retried, not dead-lettered)
        assert fault.delivered == [first, retry]
        wait_until(lambda: notify_outcome(stack, pid, first) is not None, timeout=30)
        assert notify_outcome(stack, pid, first) == "PARENT_GONE:TaskTimedOut"
    # the callback marks the row after its SendTaskSuccess, which can end the parent first
    assert wait_until(lambda: notify_outcome(stack, pid, retry), timeout=30) == "SENT:SUCCEEDED"
    dlq = stack.client("sqs").get_queue_attributes(
        QueueUrl=stack.outputs["ProcessDlqUrl"], AttributeNames=["ApproximateNumberOfMessages"]
    )["Attributes"]
    assert dlq["ApproximateNumberOfMessages"] == "0"


def start_join(stack: LocalStack, name: str, dependencies: list[dict[str, Any]]) -> str:
    response = stack.client("stepfunctions").start_execution(
        stateMachineArn=stack.outputs["StateMachines"][JOIN],
        name=name,
        input=json.dumps({"dependencies": dependencies, "timeout_seconds": 60}),
    )
    return str(response["executionArn"])


def test_a_join_send_throttled_before_it_is_sent_is_retried(
    stack: LocalStack, faults: list[SendFaults]
) -> None:
    # GIVEN a join whose first send is throttled before SQS took it
    item = "join-send-before"
    fault = SendFaults(marker=f'"{item}"', when="before")
    faults.append(fault)
    parent = start_join(stack, item, [dependency(item), dependency(f"{item}-other")])
    # WHEN it runs THEN the send is retried on a new token, with the same join_id, and the
    # join resumes with both members
    described = finished(stack, parent, timeout=60)
    assert described["status"] == "SUCCEEDED", (described.get("error"), described.get("cause"))
    assert history_errors(stack, parent) == [THROTTLED]
    assert len(set(fault.attempts)) == 2
    assert json.loads(described["output"])["join"]["counts"]["succeeded"] == 2


def test_a_join_send_throttled_after_it_was_sent_is_retried(
    stack: LocalStack, faults: list[SendFaults]
) -> None:
    # GIVEN a join whose first send was delivered and still failed the Task
    item = "join-send-after"
    fault = SendFaults(marker=f'"{item}"', when="after")
    faults.append(fault)
    parent = start_join(stack, item, [dependency(item), dependency(f"{item}-other")])
    # WHEN it runs THEN the retry (same join_id, new token) takes the join over, its first
    # token's task being closed, and the parent resumes with both members
    described = finished(stack, parent, timeout=60)
    assert fault.delivered == fault.attempts
    assert described["status"] == "SUCCEEDED", (described.get("error"), described.get("cause"))
    assert json.loads(described["output"])["join"]["counts"]["succeeded"] == 2


def manifest_of(stack: LocalStack, key: str, dependencies: list[dict[str, Any]]) -> str:
    """A JSON Lines manifest of ``dependencies`` in the stack's payload bucket; its url."""
    bucket = stack.outputs["PayloadBucketName"]
    text = "".join(json.dumps(item) + "\n" for item in dependencies)
    stack.client("s3").put_object(Bucket=bucket, Key=key, Body=text.encode())
    return f"s3://{bucket}/{key}"


@pytest.mark.parametrize("when", ["after", "late"])
def test_a_join_by_manifest_sent_twice_by_its_retry_waits_once_and_succeeds(
    stack: LocalStack, faults: list[SendFaults], when: str
) -> None:
    # GIVEN a join by manifest whose first send was delivered (before the Retry's, or after
    # it) and still failed the Task: the same join, with a new token, is sent again
    item = f"manifest-send-{when}"
    url = manifest_of(
        stack, f"manifests/{item}.jsonl", [dependency(item), dependency(f"{item}-other")]
    )
    fault = SendFaults(marker=f"{item}.jsonl", when=when)
    faults.append(fault)
    response = stack.client("stepfunctions").start_execution(
        stateMachineArn=stack.outputs["StateMachines"][JOIN],
        name=item,
        input=json.dumps({"dependencies_url": url, "timeout_seconds": 60}),
    )
    # WHEN it runs
    described = finished(stack, response["executionArn"], timeout=60)
    # THEN neither send is refused: the parent succeeds with both members, each run once
    assert described["status"] == "SUCCEEDED", (described.get("error"), described.get("cause"))
    assert sorted(fault.delivered) == sorted(fault.attempts)
    assert len(set(fault.attempts)) == 2
    assert json.loads(described["output"])["join"]["counts"]["succeeded"] == 2
    for member in (item, f"{item}-other"):
        state = stack.client("dynamodb").get_item(
            TableName=stack.outputs["StateTableName"],
            Key={"payload_id": {"S": dependency_id(member)}},
            ConsistentRead=True,
        )["Item"]
        assert len(state["executions"]["SS"]) == 1


@pytest.mark.parametrize(
    ("error_name", "attempts"),
    [
        # one of the SDK's classes of permanent refusals: never retried
        ("SQS.QueueDoesNotExistException", 1),
        ("SQS.InvalidMessageContentsException", 1),
        # the SDK's name for codes it has no class for (AccessDenied, a message too large, but
        # also common throttling): two more attempts, not the transient names' six
        ("SQS.AmazonSQSException", 3),
    ],
)
def test_a_send_refused_for_good_fails_the_parent_without_a_minute_of_retries(
    stack: LocalStack, faults: list[SendFaults], error_name: str, attempts: int
) -> None:
    # GIVEN a parent whose every send of one dependency is refused under error_name
    item = f"send-refused-{error_name.rsplit('.', 1)[1].lower()}"
    fault = SendFaults(marker=f'"{item}"', when="always", error_name=error_name)
    faults.append(fault)
    parent = start_parent(stack, item, [dependency(item)])
    # WHEN it runs
    described = finished(stack, parent, timeout=60)
    # THEN it fails with that error after `attempts` sends, and nothing reached the tracker
    assert described["status"] == "FAILED"
    assert described.get("error") == error_name, described.get("cause")
    assert history_errors(stack, parent) == [error_name] * attempts
    assert len(fault.attempts) == attempts
    assert fault.delivered == []
