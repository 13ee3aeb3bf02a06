"""``DependencyTable.scan_pages``: the operator's full read of the dependency table."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from dependency_tracker.core.enums import PayloadState, utcnow
from dependency_tracker.joins.rows import JoinItem
from dependency_tracker.table.items import MembershipItem, WaiterItem
from tests.unit.cli.rows import join, waiter

if TYPE_CHECKING:
    from tests.conftest import Aws


def test_scan_pages_reads_every_kind_of_row_and_can_skip_notified_ones(aws: Aws) -> None:
    # GIVEN a waiting waiter, a notified one, and a join with two members
    join_row, members = join("j", ["m1", "m2"])
    rows = [
        waiter("dep", "t1", parent="p"),
        waiter("dep", "t2", state=PayloadState.SUCCEEDED, notified=True),
        join_row,
        *members,
    ]
    for row in rows:
        assert aws.dependencies.register(row)
    # WHEN the table is scanned, whole and without notified rows
    everything = [row for page in aws.dependencies.scan_pages() for row in page]
    waiting = [row for page in aws.dependencies.scan_pages(unnotified_only=True) for row in page]
    # THEN rows come back typed, and the filter drops only the notified waiter
    assert sorted(type(row).__name__ for row in everything) == [
        "JoinItem",
        "MembershipItem",
        "MembershipItem",
        "WaiterItem",
        "WaiterItem",
    ]
    assert len(waiting) == 4
    assert all(row.notified_at is None for row in waiting)
    assert any(isinstance(row, JoinItem) for row in waiting)
    assert sum(isinstance(row, MembershipItem) for row in waiting) == 2
    assert sum(isinstance(row, WaiterItem) for row in waiting) == 1


def test_scan_pages_can_keep_join_rows_decided_since_a_time(aws: Aws) -> None:
    # GIVEN joins told their decision 1 h and 30 h ago, a notified waiter, a running join
    now = utcnow()
    for name, ago in (("recent", timedelta(hours=1)), ("old", timedelta(hours=30))):
        row, _ = join(name, ["m"])
        told = now - ago
        decided = {"workflow_state": PayloadState.FAILED, "resolved_at": told, "notified_at": told}
        assert aws.dependencies.register(row.model_copy(update=decided))
    assert aws.dependencies.register(waiter("dep", "t2", state=PayloadState.FAILED, notified=True))
    assert aws.dependencies.register(join("running", ["m"])[0])
    # WHEN the unanswered rows are scanned with the joins decided in the last 24 h
    rows = [
        row
        for page in aws.dependencies.scan_pages(
            unnotified_only=True, joins_decided_since=now - timedelta(hours=24)
        )
        for row in page
    ]
    # THEN the running join and the one decided 1 h ago come back, not the older one or the
    # notified waiter
    assert sorted(row.join_id for row in rows if isinstance(row, JoinItem)) == ["recent", "running"]
    assert not any(isinstance(row, WaiterItem) for row in rows)
