"""Join deadlines through the real wait-for-join: decided at the deadline, never before it."""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING, Any

import pytest

from dependency_tracker.joins.store import JoinStore
from tests.e2e.conftest import dependency, dependency_id, finished, waiters
from tests.e2e.test_joins import start_join

if TYPE_CHECKING:
    from dependency_tracker_local import LocalStack

pytestmark = pytest.mark.e2e

FAST, SLOW = 190, 10
DEADLINE_SECONDS = 5


def members() -> list[dict[str, Any]]:
    """The slow members first: they are in the first chunk, registered with the join.

    A deadline counts from registration: on a loaded machine it may pass before a later
    chunk registers (its members are then ``unregistered``, never started).
    """
    slow = [dependency(f"dl-slow-{index}", seconds=300) for index in range(SLOW)]
    return slow + [dependency(f"dl-{index:03d}") for index in range(FAST)]


def test_a_200_member_join_succeeds_at_its_deadline_and_one_needing_more_fails(
    stack: LocalStack,
) -> None:
    # GIVEN two all-of joins of the same 200 members, 10 of which run for minutes, each
    # with a deadline 5 s after registration: one goes on with whatever succeeded by then
    # (min_succeeded 0: however loaded the machine, it succeeds), one needs 195
    enough = start_join(
        stack,
        "deadline-enough",
        members(),
        deadline=DEADLINE_SECONDS,
        min_succeeded=0,
        timeout_seconds=300,
    )
    short = start_join(
        stack,
        "deadline-short",
        members(),
        deadline=DEADLINE_SECONDS,
        min_succeeded=FAST + SLOW // 2,
        timeout_seconds=300,
    )
    slow = {dependency_id(f"dl-slow-{index}") for index in range(SLOW)}
    # WHEN the deadline passes
    described = finished(stack, enough, timeout=120)
    # THEN the first resumes with the members that succeeded, the slow ones pending
    assert described["status"] == "SUCCEEDED", described
    summary = json.loads(described["output"])["join"]
    assert summary["decided_by"] == "deadline"
    assert slow <= set(summary["pending"])
    assert summary["failed"] == []
    named = len(summary["succeeded"]) + len(summary["pending"])
    assert named + summary.get("unregistered", 0) == FAST + SLOW
    # AND it was decided at its deadline, not before
    dependencies = waiters(stack)
    row = JoinStore(dependencies.client, dependencies.table_name).get(summary["join_id"])
    assert row is not None
    assert row.deadline_at is not None
    assert row.resolved_at is not None
    assert row.resolved_at >= row.deadline_at
    assert datetime.fromisoformat(summary["deadline"]) == row.deadline_at
    # AND the second fails JoinDeadlineExceeded, its cause the summary naming the pending ones
    failed = finished(stack, short, timeout=120)
    assert (failed["status"], failed["error"]) == ("FAILED", "JoinDeadlineExceeded")
    cause = json.loads(failed["cause"])
    assert cause["decided_by"] == "deadline"
    assert slow <= set(cause["pending"])
    assert len(cause["succeeded"]) < FAST + SLOW // 2


def test_an_invalid_deadline_fails_the_parent_at_once_naming_the_field(stack: LocalStack) -> None:
    parent = start_join(
        stack, "deadline-past", [dependency("dl-x")], deadline="2001-01-01T00:00:00Z"
    )
    described = finished(stack, parent)
    assert (described["status"], described["error"]) == ("FAILED", "InvalidJoin")
    assert "join.deadline 2001-01-01T00:00:00Z is in the past" in described["cause"]
