"""Task-token callbacks on the strict layer: the cause is kept, a closed task answers TaskTimedOut.

Each behaviour runs on moto alone too (what docs/local.md says moto does) and with
the layer (what AWS does).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from dependency_tracker_local.strict import strict_limits
from dependency_tracker_local.task_tokens import TASK_CLOSED
from tests.conftest import code_of, wait_until

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

ROLE = "arn:aws:iam::123456789012:role/task-tokens"
CAUSE = '{"payload_id": "c/workflow-x/item", "reason": "the child failed"}'


@dataclass
class Callbacks:
    sfn: Any
    sqs: Any
    queue_url: str

    def machine(self, name: str, task: dict[str, Any], after: dict[str, Any]) -> str:
        """``Wait`` (a callback task publishing its token) then the states in ``after``."""
        wait = {
            "Type": "Task",
            "Resource": "arn:aws:states:::sqs:sendMessage.waitForTaskToken",
            "Parameters": {"QueueUrl": self.queue_url, "MessageBody.$": "$$.Task.Token"},
            **task,
        }
        definition = {"StartAt": "Wait", "States": {"Wait": wait, **after}}
        return str(
            self.sfn.create_state_machine(
                name=name, roleArn=ROLE, definition=json.dumps(definition)
            )["stateMachineArn"]
        )

    def start(self, machine_arn: str, name: str = "run") -> str:
        return str(
            self.sfn.start_execution(stateMachineArn=machine_arn, name=name, input="{}")[
                "executionArn"
            ]
        )

    def token(self) -> str:
        """The next task token the machines published (each one once)."""

        def published() -> str | None:
            got = self.sqs.receive_message(QueueUrl=self.queue_url, WaitTimeSeconds=0)
            for message in got.get("Messages", []):
                self.sqs.delete_message(
                    QueueUrl=self.queue_url, ReceiptHandle=message["ReceiptHandle"]
                )
                return str(message["Body"])
            return None

        token: str = wait_until(published)
        return token

    def ended(self, execution_arn: str) -> dict[str, Any]:
        def stopped() -> dict[str, Any] | None:
            described: dict[str, Any] = self.sfn.describe_execution(executionArn=execution_arn)
            return None if described["status"] == "RUNNING" else described

        described: dict[str, Any] = wait_until(stopped)
        return described

    def status(self, execution_arn: str) -> str:
        return str(self.sfn.describe_execution(executionArn=execution_arn)["status"])

    def events(self, execution_arn: str, kind: str) -> list[dict[str, Any]]:
        history = self.sfn.get_execution_history(executionArn=execution_arn)["events"]
        return [event for event in history if event["type"] == kind]


@pytest.fixture
def moto() -> Iterator[Callbacks]:
    """A moto account with a queue the callback tasks publish their tokens to; no layer."""
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        session = boto3.session.Session(region_name="us-east-1")
        sqs = session.client("sqs")
        queue_url = sqs.create_queue(QueueName="tokens")["QueueUrl"]
        yield Callbacks(session.client("stepfunctions"), sqs, queue_url)


# A Catch that keeps what it caught, then fails with it, as the tracker's parents do.
CAUGHT = {
    "Catch": [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.caught", "Next": "Keep"}],
    "End": True,
}
KEEP_THEN_FAIL = {
    "Keep": {"Type": "Pass", "Next": "Fail"},
    "Fail": {"Type": "Fail", "ErrorPath": "$.caught.Error", "CausePath": "$.caught.Cause"},
}


def caught_failure(c: Callbacks, name: str) -> tuple[str, dict[str, Any]]:
    """A callback task failed with a cause, caught and re-raised; the execution ended."""
    execution = c.start(c.machine(name, {**CAUGHT}, KEEP_THEN_FAIL))
    c.sfn.send_task_failure(taskToken=c.token(), error="DependencyFailed", cause=CAUSE)
    return execution, c.ended(execution)


def test_the_cause_reaches_the_catch_the_history_and_the_execution(moto: Callbacks) -> None:
    # GIVEN moto alone: the cause is dropped (the error name survives)
    execution, described = caught_failure(moto, "alone")
    assert (described["status"], described["error"]) == ("FAILED", "DependencyFailed")
    assert not described.get("cause")
    (failed,) = moto.events(execution, "TaskFailed")
    assert "cause" not in failed["taskFailedEventDetails"]
    # WHEN the layer is on
    with strict_limits():
        execution, described = caught_failure(moto, "strict")
        (failed,) = moto.events(execution, "TaskFailed")
        (caught,) = moto.events(execution, "PassStateExited")
        (execution_failed,) = moto.events(execution, "ExecutionFailed")
    assert (described["status"], described["error"], described["cause"]) == (
        "FAILED",
        "DependencyFailed",
        CAUSE,
    )
    assert failed["taskFailedEventDetails"]["cause"] == CAUSE
    # the Catch's result carries Error and Cause ($.Cause), as States.TaskFailed does on AWS
    kept = json.loads(caught["stateExitedEventDetails"]["output"])["caught"]
    assert kept == {"Error": "DependencyFailed", "Cause": CAUSE}
    assert execution_failed["executionFailedEventDetails"] == {
        "error": "DependencyFailed",
        "cause": CAUSE,
    }


def timed_out(c: Callbacks, name: str, *, heartbeat: bool = False) -> str:
    """The token of a callback task whose TimeoutSeconds (HeartbeatSeconds) ran out."""
    limit = {"HeartbeatSeconds": 1} if heartbeat else {"TimeoutSeconds": 1}
    after = {"Caught": {"Type": "Succeed"}}
    catch = [{"ErrorEquals": ["States.Timeout"], "Next": "Caught"}]
    execution = c.start(c.machine(name, {**limit, "Catch": catch, "End": True}, after))
    token = c.token()
    assert c.ended(execution)["status"] == "SUCCEEDED"  # through the Catch
    return token


@pytest.mark.parametrize("heartbeat", [False, True], ids=["TimeoutSeconds", "HeartbeatSeconds"])
def test_every_answer_after_a_timeout_is_refused_with_task_timed_out(
    moto: Callbacks, heartbeat: bool
) -> None:
    # GIVEN moto alone: a late failure is accepted (and lost), a late success is InvalidToken
    token = timed_out(moto, "alone", heartbeat=heartbeat)
    assert code_of(lambda: moto.sfn.send_task_failure(taskToken=token, error="E")) is None
    assert code_of(lambda: moto.sfn.send_task_success(taskToken=token, output="{}")) == (
        "InvalidToken"
    )
    # WHEN the layer is on THEN every late answer is refused as AWS refuses it
    with strict_limits():
        token = timed_out(moto, "strict", heartbeat=heartbeat)
        answers: list[Callable[[], object]] = [
            lambda: moto.sfn.send_task_failure(taskToken=token, error="E", cause="late"),
            lambda: moto.sfn.send_task_success(taskToken=token, output="{}"),
            lambda: moto.sfn.send_task_heartbeat(taskToken=token),
        ]
        for answer in answers:
            with pytest.raises(ClientError) as refused:
                answer()
            error = refused.value.response["Error"]
            assert (error["Code"], error["Message"]) == ("TaskTimedOut", TASK_CLOSED)


def test_a_task_answered_once_is_closed_while_its_execution_runs_on(moto: Callbacks) -> None:
    after = {"Later": {"Type": "Wait", "Seconds": 30, "End": True}}
    with strict_limits():
        execution = moto.start(moto.machine("answered", {"Next": "Later"}, after))
        token = moto.token()
        assert code_of(lambda: moto.sfn.send_task_success(taskToken=token, output="{}")) is None
        wait_until(lambda: moto.events(execution, "WaitStateEntered"))
        assert moto.status(execution) == "RUNNING"
        assert code_of(lambda: moto.sfn.send_task_success(taskToken=token, output="{}")) == (
            "TaskTimedOut"
        )
        assert code_of(lambda: moto.sfn.send_task_failure(taskToken=token, error="E")) == (
            "TaskTimedOut"
        )
        # a token never issued is still InvalidToken
        assert code_of(lambda: moto.sfn.send_task_success(taskToken="nope", output="{}")) == (
            "InvalidToken"
        )
        moto.sfn.stop_execution(executionArn=execution)


def test_a_retried_callback_task_waits_on_a_token_of_its_own(moto: Callbacks) -> None:
    retry = {"Retry": [{"ErrorEquals": ["States.Timeout"], "MaxAttempts": 1}], "End": True}
    with strict_limits():
        execution = moto.start(moto.machine("retried", {"TimeoutSeconds": 1, **retry}, {}))
        first = moto.token()
        second = moto.token()  # the retry published after the first attempt timed out
        assert second != first
        assert code_of(lambda: moto.sfn.send_task_success(taskToken=first, output="{}")) == (
            "TaskTimedOut"
        )
        moto.sfn.send_task_success(taskToken=second, output='{"done": true}')
        described = moto.ended(execution)
    assert (described["status"], json.loads(described["output"])) == ("SUCCEEDED", {"done": True})


def test_a_heartbeat_on_an_open_task_without_heartbeat_seconds_is_taken(moto: Callbacks) -> None:
    # GIVEN moto alone: an open callback task with no HeartbeatSeconds refuses a heartbeat
    execution = moto.start(moto.machine("open-alone", {"End": True}, {}))
    token = moto.token()
    assert code_of(lambda: moto.sfn.send_task_heartbeat(taskToken=token)) == "InvalidToken"
    moto.sfn.stop_execution(executionArn=execution)
    # WHEN the layer is on THEN it is taken, as AWS takes one for any open callback task
    with strict_limits():
        execution = moto.start(moto.machine("open-strict", {"End": True}, {}))
        token = moto.token()
        assert code_of(lambda: moto.sfn.send_task_heartbeat(taskToken=token)) is None
        assert moto.status(execution) == "RUNNING"
        moto.sfn.send_task_success(taskToken=token, output="{}")
        assert moto.ended(execution)["status"] == "SUCCEEDED"
        assert code_of(lambda: moto.sfn.send_task_heartbeat(taskToken=token)) == "TaskTimedOut"
