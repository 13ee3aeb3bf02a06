"""Parents pause on task tokens and resume when their dependencies finish."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

from dependency_tracker.core.enums import PayloadState
from tests.conftest import wait_until
from tests.e2e.conftest import (
    all_child_runs,
    child_executions,
    dependency,
    dependency_id,
    finished,
    notified,
    start_parent,
    state_of,
    waiters,
)

if TYPE_CHECKING:
    from dependency_tracker_local import LocalStack

pytestmark = pytest.mark.e2e


def test_parent_resumes_with_every_summary(stack: LocalStack) -> None:
    # GIVEN a parent waiting on two dependencies
    parent = start_parent(
        stack, "single-ok", [dependency("s-ok-1", seconds=1), dependency("s-ok-2")]
    )
    # WHEN they finish THEN the parent resumes with both summaries, in order
    described = finished(stack, parent)
    assert described["status"] == "SUCCEEDED"
    output = json.loads(described["output"])
    assert [d["payload_id"] for d in output["dependencies"]] == [
        dependency_id("s-ok-1"),
        dependency_id("s-ok-2"),
    ]
    # one small summary per dependency: the execution and result stay on its state item
    assert all(set(d) == {"payload_id", "replayed"} for d in output["dependencies"])
    assert all(d["replayed"] is False for d in output["dependencies"])
    # the waiter rows carry who waited, and were retired with a TTL
    rows = list(waiters(stack).waiters(dependency_id("s-ok-1")))
    assert [row.parent_execution for row in rows] == [parent]
    wait_until(lambda: notified(stack, dependency_id("s-ok-1")))


def test_parent_with_no_dependencies_succeeds(stack: LocalStack) -> None:
    described = finished(stack, start_parent(stack, "no-deps", []))
    assert described["status"] == "SUCCEEDED"
    assert json.loads(described["output"])["dependencies"] == []


@pytest.mark.parametrize(
    ("outcome", "error", "state"),
    [
        ("fail", "DependencyFailed", PayloadState.FAILED),
        ("invalid", "DependencyInvalid", PayloadState.INVALID),
    ],
)
def test_failed_dependency_fails_the_parent_with_its_name(
    stack: LocalStack, outcome: str, error: str, state: PayloadState
) -> None:
    item = f"s-{outcome}"
    parent = start_parent(stack, f"single-{outcome}", [dependency(item, outcome=outcome)])
    described = finished(stack, parent)
    assert (described["status"], described["error"]) == ("FAILED", error)
    recorded = state_of(stack, dependency_id(item))
    assert recorded is not None
    assert recorded.state is state


def test_dependency_slower_than_the_callback_timeout(stack: LocalStack) -> None:
    # GIVEN a parent that waits 1 s on a dependency that takes 3 s
    parent = start_parent(stack, "single-timeout", [dependency("s-slow", seconds=3)], 1)
    # THEN the parent fails with DependencyTimedOut
    described = finished(stack, parent)
    assert (described["status"], described["error"]) == ("FAILED", "DependencyTimedOut")
    # AND the late callback finds the parent gone: recorded, not retried, not dead-lettered
    wait_until(lambda: notified(stack, dependency_id("s-slow")), timeout=20)
    (row,) = waiters(stack).waiters(dependency_id("s-slow"))
    assert row.workflow_state is PayloadState.SUCCEEDED
    assert (row.notify_outcome or "").startswith("PARENT_GONE:")
    assert stack.dead_letters == {"update-state": [], "callback": []}


def test_dependency_already_succeeded_is_replayed(stack: LocalStack) -> None:
    # GIVEN a dependency that finished before anyone waited on it
    sqs = stack.client("sqs")
    sqs.send_message(
        QueueUrl=stack.outputs["ProcessQueueUrl"], MessageBody=json.dumps(dependency("s-done"))
    )
    wait_until(
        lambda: (
            (item := state_of(stack, dependency_id("s-done"))) is not None
            and item.state is PayloadState.SUCCEEDED
        )
    )
    runs_before = len(all_child_runs(stack))
    # WHEN a parent waits on it
    described = finished(stack, start_parent(stack, "replay", [dependency("s-done")]))
    # THEN it resumes with the stored result, and nothing ran again
    assert described["status"] == "SUCCEEDED"
    (summary,) = json.loads(described["output"])["dependencies"]
    assert summary["replayed"] is True
    assert len(child_executions(stack, dependency_id("s-done"))) == 1
    assert len(all_child_runs(stack)) == runs_before


def test_duplicate_message_on_the_process_queue(stack: LocalStack) -> None:
    sqs = stack.client("sqs")
    queue = stack.outputs["ProcessQueueUrl"]
    # GIVEN the same bare payload published twice, and a parent waiting on it
    body = json.dumps(dependency("s-dup", seconds=1))
    for _ in range(2):
        sqs.send_message(QueueUrl=queue, MessageBody=body)
    parent = start_parent(stack, "dup-parent", [dependency("s-dup", seconds=1)])
    described = finished(stack, parent)
    assert described["status"] == "SUCCEEDED"
    (row,) = waiters(stack).waiters(dependency_id("s-dup"))
    wait_until(lambda: notified(stack, dependency_id("s-dup")))
    # WHEN the parent's own message (same token) arrives again
    copy = {
        "payload": dependency("s-dup", seconds=1),
        "callback": {"task_token": row.task_token, "parent_execution": parent},
    }
    sqs.send_message(QueueUrl=queue, MessageBody=json.dumps(copy))
    wait_until(lambda: queue_drained(stack))
    # THEN one execution ran, one waiter row exists, and the parent resumed once
    assert len(child_executions(stack, dependency_id("s-dup"))) == 1
    (again,) = waiters(stack).waiters(dependency_id("s-dup"))
    assert again.notified_at is not None
    assert again.notify_outcome == "SENT:SUCCEEDED"
    history = stack.client("stepfunctions").get_execution_history(executionArn=parent)["events"]
    assert [event["type"] for event in history].count("TaskSucceeded") == 1


def queue_drained(stack: LocalStack) -> bool:
    attributes = stack.client("sqs").get_queue_attributes(
        QueueUrl=stack.outputs["ProcessQueueUrl"],
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return all(int(value) == 0 for value in attributes.values())
