"""``StopExecution`` of a parent waiting on its task token, as AWS answers it.

moto 5.2.5 leaves such a parent ``RUNNING`` until its task wakes, drops the
request's error and cause, and still takes an answer to its token; the strict
layer (:mod:`dependency_tracker_local.stop_execution`) aborts it at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest
from moto.stepfunctions.parser.models import stepfunctions_parser_backends
from moto.stepfunctions.parser.utils import TMP_THREADS

from dependency_tracker_local.strict import strict_limits
from tests.conftest import ACCOUNT, REGION, Aws, code_of, payload, wait_until
from tests.harness import create_parent, queue_bodies, start_parent

if TYPE_CHECKING:
    import threading
    from collections.abc import Iterator


@dataclass
class Waiting:
    """A parent waiting on its task token, and the thread interpreting it."""

    parent: str
    machine: str
    token: str
    worker: threading.Thread


def _interpreter(execution_arn: str) -> threading.Thread:
    """The thread running the execution's state machine (moto keeps no other handle on it)."""
    backend = stepfunctions_parser_backends[ACCOUNT][REGION]
    # The parser's Execution (moto types the answer as its older model's).
    execution: Any = backend.describe_execution(execution_arn)
    worker = execution.exec_worker
    found: threading.Thread = next(
        thread
        for thread in TMP_THREADS
        if getattr(getattr(thread, "_target", None), "__self__", None) is worker
    )
    return found


@pytest.fixture
def waiting(aws: Aws) -> Iterator[Waiting]:
    # The layer is on even with DEPTRACK_STRICT=0: the tests are about it.
    with strict_limits():
        machine = create_parent(aws)
        parent = start_parent(aws, machine, payload(), name="stopped")
        (body,) = queue_bodies(aws)
        yield Waiting(parent, machine, body["callback"]["task_token"], _interpreter(parent))


def _history(aws: Aws, execution_arn: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = aws.sfn.get_execution_history(executionArn=execution_arn)[
        "events"
    ]
    return events


def test_a_stopped_parent_is_aborted_at_once_with_the_error_and_cause(
    aws: Aws, waiting: Waiting
) -> None:
    stopped = aws.sfn.stop_execution(executionArn=waiting.parent, error="Stopped", cause="by test")
    described = aws.sfn.describe_execution(executionArn=waiting.parent)
    assert (described["status"], described.get("error"), described.get("cause")) == (
        "ABORTED",
        "Stopped",
        "by test",
    )
    assert described["stopDate"] == stopped["stopDate"]


def test_the_history_ends_with_execution_aborted_and_nothing_after_it(
    aws: Aws, waiting: Waiting
) -> None:
    aws.sfn.stop_execution(executionArn=waiting.parent, error="Stopped", cause="by test")
    last = _history(aws, waiting.parent)[-1]
    assert (last["type"], last["executionAbortedEventDetails"]) == (
        "ExecutionAborted",
        {"error": "Stopped", "cause": "by test"},
    )
    # The interpreter wakes and ends without adding events or changing the status.
    wait_until(lambda: not waiting.worker.is_alive())
    history = _history(aws, waiting.parent)
    assert [e["type"] for e in history].count("ExecutionAborted") == 1
    assert history[-1] == last
    described = aws.sfn.describe_execution(executionArn=waiting.parent)
    assert (described["status"], described.get("error"), described.get("cause")) == (
        "ABORTED",
        "Stopped",
        "by test",
    )


def test_a_stop_without_error_or_cause_leaves_both_out(aws: Aws, waiting: Waiting) -> None:
    aws.sfn.stop_execution(executionArn=waiting.parent)
    described = aws.sfn.describe_execution(executionArn=waiting.parent)
    assert described["status"] == "ABORTED"
    assert "error" not in described
    assert "cause" not in described


def test_answers_to_a_stopped_parent_s_token_are_refused_with_task_timed_out(
    aws: Aws, waiting: Waiting
) -> None:
    aws.sfn.stop_execution(executionArn=waiting.parent, error="Stopped", cause="by test")
    token = waiting.token
    assert code_of(lambda: aws.sfn.send_task_heartbeat(taskToken=token)) == "TaskTimedOut"
    assert code_of(lambda: aws.sfn.send_task_success(taskToken=token, output="{}")) == (
        "TaskTimedOut"
    )
    assert code_of(lambda: aws.sfn.send_task_failure(taskToken=token, error="E", cause="c")) == (
        "TaskTimedOut"
    )
    wait_until(lambda: not waiting.worker.is_alive())
    described = aws.sfn.describe_execution(executionArn=waiting.parent)
    assert (described["status"], described.get("error")) == ("ABORTED", "Stopped")


def test_a_stopped_parent_leaves_the_running_list_at_once(aws: Aws, waiting: Waiting) -> None:
    def listed(status: str) -> list[str]:
        page = aws.sfn.list_executions(stateMachineArn=waiting.machine, statusFilter=status)
        return [e["executionArn"] for e in page["executions"]]

    assert listed("RUNNING") == [waiting.parent]  # the RUNNING index has seen it running
    aws.sfn.stop_execution(executionArn=waiting.parent)
    assert listed("RUNNING") == []
    assert listed("ABORTED") == [waiting.parent]
