"""``DependencyTable.scan_pages``: the operator's full read of the dependency table."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dependency_tracker.core.enums import PayloadState
from dependency_tracker.table.items import MembershipItem, WaiterItem
from dependency_tracker.table.join_items import JoinItem
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
