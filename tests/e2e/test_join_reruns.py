"""Reruns that count, through the real wait-for-join: a failed member rerun turns into a success."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest

from dependency_tracker.core.enums import PayloadState
from dependency_tracker.joins.store import JoinStore
from dependency_tracker.table.items import membership_id_for
from tests.conftest import wait_until
from tests.e2e.conftest import dependency, dependency_id, finished, waiters
from tests.e2e.test_joins import start_join

if TYPE_CHECKING:
    from dependency_tracker_local import LocalStack

pytestmark = pytest.mark.e2e


def rerun_of(item: str, attempt: int) -> dict[str, Any]:
    """A rerun of ``item``'s failed attempt, fixed to succeed (what ``rerun --from`` sends)."""
    body = dependency(item)
    body["process"][0] |= {"replace": True, "replace_if": {"state": "FAILED", "attempt": attempt}}
    return body


def test_a_failed_member_rerun_and_succeeded_decides_its_quorum(stack: LocalStack) -> None:
    # GIVEN a 2-of-3 join: A fails, B succeeds, C runs for minutes
    members = [
        dependency("jr-a", outcome="fail"),
        dependency("jr-b"),
        dependency("jr-c", seconds=300),
    ]
    parent = start_join(stack, "rerun-counts", members, quorum=2, timeout_seconds=300)
    dependencies = waiters(stack)
    joins = JoinStore(dependencies.client, dependencies.table_name)

    def counted() -> str | None:
        for row in dependencies.scan_pages():
            for item in row:
                join_id = getattr(item, "join_id", None)
                if join_id and joins.read(join_id)[1:] == (1, 1):
                    return str(join_id)
        return None

    join_id = wait_until(counted, timeout=30)
    # WHEN A is rerun with its input fixed, while the join is undecided
    stack.client("sqs").send_message(
        QueueUrl=stack.outputs["ProcessQueueUrl"], MessageBody=json.dumps(rerun_of("jr-a", 1))
    )
    # THEN the parent resumes with A and B succeeded, long before C ends
    described = finished(stack, parent, timeout=60)
    assert described["status"] == "SUCCEEDED"
    summary = json.loads(described["output"])["join"]
    assert summary["succeeded"] == [dependency_id("jr-a"), dependency_id("jr-b")]
    assert (summary["failed"], summary["pending"]) == ([], [dependency_id("jr-c")])
    # AND the counts agree with the lists: A counted once, as its latest outcome
    assert joins.read(join_id)[1:] == (2, 0)
    membership = dependencies.get_row(dependency_id("jr-a"), membership_id_for(join_id))
    assert membership is not None
    assert (membership.workflow_state, membership.notify_outcome) == (
        PayloadState.SUCCEEDED,
        "COUNTED:SUCCEEDED",
    )
