"""Counting a join's member outcomes exactly once, and deciding the join once.

A member's outcome reaches the callback flow as its membership row turning
terminal on the stream. :meth:`JoinCounting.record` counts it in one
transaction (the row marked counted, one count shard added to), then reads the
join row and every shard and decides the join if the counts settle it. The
registration flow checks the same counts after the join's last chunk, since
that is when ``n`` becomes known: the decision itself is joins/decision.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dependency_tracker.core.observability import logger
from dependency_tracker.joins.decision import decide_from_counts

if TYPE_CHECKING:
    from dependency_tracker.joins.results import JoinResults
    from dependency_tracker.joins.store import JoinStore
    from dependency_tracker.table.items import MembershipItem, Resolution


class JoinCounting:
    """Adds member outcomes to their joins' counts and decides the joins."""

    def __init__(
        self, *, joins: JoinStore, retention_days: int, results: JoinResults | None = None
    ) -> None:
        self.joins = joins
        self.retention_days = retention_days
        self.results = results  # None: no payload bucket, no results manifest

    def record(self, member: MembershipItem, resolution: Resolution) -> bool:
        """Count ``member``'s outcome once and decide its join if that settles it.

        Returns False when the outcome had been counted already (a redelivered
        record); the decision is still checked, since the delivery that counted
        may have died before deciding.
        """
        counted = self.joins.count(member, resolution, retention_days=self.retention_days)
        if not counted:
            logger.info("member outcome already counted")
        join = decide_from_counts(
            self.joins, member.join_id, winner=member.payload_id, may_succeed=True
        )
        if join is None:
            logger.warning("membership of a join that does not exist")
        elif join.workflow_state.is_terminal and self.results is not None:
            # A member ending after the decision: the last one rewrites the manifest, once.
            # Checked on a redelivery too: a final write that failed gave its claim back.
            self.results.finish(member.join_id)
        return counted
