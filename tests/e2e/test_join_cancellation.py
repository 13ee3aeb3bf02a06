"""A join whose parent is gone (on_parent_gone: cancel) through the real wait-for-join."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

from dependency_tracker.core.enums import PayloadState
from dependency_tracker.joins.cancellation import PARENT_GONE_ERROR
from dependency_tracker.joins.store import JoinStore
from dependency_tracker.table.items import MembershipItem, membership_id_for
from tests.conftest import wait_until
from tests.e2e.conftest import dependency, dependency_id, finished, states, waiters
from tests.e2e.test_joins import start_join

if TYPE_CHECKING:
    from dependency_tracker_local import LocalStack

pytestmark = pytest.mark.e2e

MEMBERS, SHARED = 1000, 40


def test_a_cancelled_1000_member_join_stops_its_members_but_not_those_another_parent_waits_on(
    stack: LocalStack,
) -> None:
    # GIVEN a parent that waits (keep, the default) on 40 slow payloads, and a second
    # parent that joins 1,000 slow payloads, those 40 among them, with on_parent_gone cancel
    ids = [f"cx-{index:04d}" for index in range(MEMBERS)]
    shared = ids[:SHARED]
    keeper = start_join(
        stack, "cancel-keeper", [dependency(i, seconds=600) for i in shared], timeout_seconds=900
    )
    sfn = stack.client("stepfunctions")
    dependencies = waiters(stack)
    joins = JoinStore(dependencies.client, dependencies.table_name)
    wait_until(lambda: _registered(stack, keeper, joins) == SHARED, timeout=60)
    parent = start_join(
        stack,
        "cancel-parent",
        [dependency(i, seconds=600) for i in ids],
        timeout_seconds=900,
        on_parent_gone="cancel",
    )
    wait_until(lambda: _registered(stack, parent, joins) == MEMBERS, timeout=240, every=0.5)
    join_id = _join_id(stack, parent)
    # WHEN the parent is aborted
    sfn.stop_execution(executionArn=parent, error="Cancelled", cause="the mosaic was cancelled")
    # THEN every member of the join ends: the others ABORTED with a cause naming the parent
    members = [dependency_id(i) for i in ids]

    def ended() -> list[MembershipItem]:
        rows = [dependencies.get_row(m, membership_id_for(join_id)) for m in members]
        return [r for r in rows if isinstance(r, MembershipItem) and r.workflow_state.is_terminal]

    done = wait_until(
        lambda: (rows := ended()) and len(rows) == MEMBERS - SHARED and rows, timeout=240, every=0.5
    )
    assert {row.payload_id for row in done} == set(members[SHARED:])
    assert {row.workflow_state for row in done} == {PayloadState.ABORTED}
    assert {row.error for row in done} == {PARENT_GONE_ERROR}
    assert all(parent in (row.cause or "") for row in done)
    # AND their executions are stopped, while the 40 another parent waits on run on
    table = states(stack)

    def stopped() -> bool:
        found = table.batch_get(members[SHARED:])
        return all(s.state is PayloadState.ABORTED for s in found.values())

    wait_until(stopped, timeout=240, every=0.5)
    running = table.batch_get(members[:SHARED])
    assert {s.state for s in running.values()} == {PayloadState.PROCESSING}
    assert sfn.describe_execution(executionArn=keeper)["status"] == "RUNNING"
    # AND the join is decided ABORTED, its cause naming the parent gone
    row = joins.get(join_id)
    assert row is not None
    assert row.workflow_state is PayloadState.ABORTED
    assert row.decided_by == "parent_gone"
    assert parent in (row.gone_cause or "")
    sfn.stop_execution(executionArn=keeper)


def test_a_join_without_cancel_leaves_its_members_running(stack: LocalStack) -> None:
    # GIVEN a join (keep, the default) and a join with cancel, each of two slow members
    keep = start_join(stack, "keep-parent", [dependency(f"kp-{i}", seconds=600) for i in range(2)])
    cancel = start_join(
        stack,
        "cancel-after-keep",
        [dependency(f"kc-{i}", seconds=600) for i in range(2)],
        on_parent_gone="cancel",
    )
    dependencies = waiters(stack)
    joins = JoinStore(dependencies.client, dependencies.table_name)
    wait_until(lambda: _registered(stack, keep, joins) == 2, timeout=60)
    wait_until(lambda: _registered(stack, cancel, joins) == 2, timeout=60)
    # WHEN the keep join's parent is aborted, then the other's
    sfn = stack.client("stepfunctions")
    sfn.stop_execution(executionArn=keep)
    finished(stack, keep)
    sfn.stop_execution(executionArn=cancel)
    # THEN once the later parent's members are stopped (its end handled after the first's)
    table = states(stack)

    def states_of(prefix: str) -> set[PayloadState]:
        found = table.batch_get([dependency_id(f"{prefix}-{i}") for i in range(2)])
        return {item.state for item in found.values()}

    wait_until(lambda: states_of("kc") == {PayloadState.ABORTED}, timeout=60)
    # the keep join's members run on, and the join was never marked gone
    assert states_of("kp") == {PayloadState.PROCESSING}
    row = joins.get(_join_id(stack, keep))
    assert row is not None
    assert row.gone_at is None
    assert row.on_parent_gone is None


def test_cancel_without_a_parent_execution_is_refused_naming_the_field(stack: LocalStack) -> None:
    # GIVEN a join whose on_parent_gone is not one of the choices
    parent = start_join(stack, "cancel-bad", [dependency("cb-1")], on_parent_gone="stop-everything")
    # THEN the parent fails InvalidJoin at once, the cause naming the field
    described = finished(stack, parent)
    assert described["error"] == "InvalidJoin"
    assert "join.on_parent_gone must be one of 'keep', 'cancel'" in described["cause"]


def _join_id(stack: LocalStack, parent: str) -> str:
    """The join id wait-for-join derives from its execution (States.Hash of the id)."""
    history = stack.client("stepfunctions").get_execution_history(executionArn=parent)
    for event in history["events"]:
        details = event.get("taskScheduledEventDetails")
        if details is not None:
            body = json.loads(details["parameters"])["MessageBody"]
            return str(body["join"]["join_id"])
    raise AssertionError("no join sent yet")


def _registered(stack: LocalStack, parent: str, joins: JoinStore) -> int:
    try:
        row = joins.get(_join_id(stack, parent))
    except AssertionError:
        return 0
    return 0 if row is None else row.registered
