"""The cause the tracker sends reaches the parent, and a late answer finds the parent gone.

On the embedded stack (the strict layer keeps ``SendTaskFailure``'s cause and
refuses answers about closed tasks with ``TaskTimedOut``, as AWS does): a
parent's ``describe_execution`` shows why its dependency failed or was invalid
(``dependency-tracker wait`` prints it: tests/e2e/test_wait_command.py), and a
failure that comes after the parent's callback timeout is recorded as
``PARENT_GONE:TaskTimedOut``, not sent.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest

from dependency_tracker.core.enums import PayloadState
from tests.conftest import wait_until
from tests.e2e.conftest import (
    dependency,
    dependency_id,
    finished,
    notified,
    start_parent,
    waiters,
)

if TYPE_CHECKING:
    from dependency_tracker_local import LocalStack

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize(
    ("outcome", "error", "state"),
    [
        ("fail", "DependencyFailed", PayloadState.FAILED),
        ("invalid", "DependencyInvalid", PayloadState.INVALID),
    ],
)
def test_the_parent_shows_why_its_dependency_did_not_succeed(
    stack: LocalStack, outcome: str, error: str, state: PayloadState
) -> None:
    # GIVEN a parent waiting on a child that ends in `outcome`
    item = f"fc-{outcome}"
    parent = start_parent(stack, f"fc-{outcome}", [dependency(item, outcome=outcome)], 30)
    # WHEN it resumes
    described = finished(stack, parent)
    # THEN it failed with the tracker's error name AND the cause the tracker sent
    assert (described["status"], described["error"]) == ("FAILED", error)
    # the callback marks the row after its SendTaskFailure, which can end the parent first
    wait_until(lambda: notified(stack, dependency_id(item)))
    (row,) = waiters(stack).waiters(dependency_id(item))
    assert row.workflow_state is state
    assert row.notify_outcome == f"SENT:{state.value}"
    assert described.get("cause"), "the parent lost the cause"
    cause = json.loads(described["cause"])
    assert cause["payload_id"] == dependency_id(item)
    history = stack.client("stepfunctions").get_execution_history(executionArn=parent)["events"]
    (failed,) = [event for event in history if event["type"] == "TaskFailed"]
    assert failed["taskFailedEventDetails"]["cause"] == described["cause"]


def test_a_failure_after_the_parent_timed_out_is_recorded_as_parent_gone(
    stack: LocalStack,
) -> None:
    # GIVEN a parent that waits 1 s on a child that fails after 3 s
    item = "fc-late-failure"
    pid = dependency_id(item)
    parent = start_parent(stack, "fc-late", [dependency(item, seconds=3, outcome="fail")], 1)
    assert finished(stack, parent)["error"] == "DependencyTimedOut"

    # WHEN the child fails and the callback answers the timed-out token
    def told() -> list[Any]:
        return [row for row in waiters(stack).waiters(pid) if row.notify_outcome]

    (row,) = wait_until(told, timeout=30)
    # THEN Step Functions refused it (TaskTimedOut) and the row says the parent was gone,
    # where moto alone took the failure silently (SENT:FAILED)
    assert row.workflow_state is PayloadState.FAILED
    assert row.notify_outcome == "PARENT_GONE:TaskTimedOut"
    assert stack.dead_letters == {"update-state": [], "callback": []}
