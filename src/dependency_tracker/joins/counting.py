"""Counting a join's member outcomes exactly once, and deciding the join once.

A member's outcome reaches the callback flow as its membership row turning
terminal on the stream. :meth:`JoinCounting.record` counts it in one
transaction (the row marked counted, one count shard added to), then reads the
join row and every shard and decides the join if the counts settle it. The
registration flow calls :func:`decide_if_settled` after the join's last chunk,
since that is when ``n`` becomes known.

Both sides write before they read (the ordering rule): whichever reads last
sees every count and the final ``n``, so a settled join is always decided;
``decide_join`` is conditional, so it is decided once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_lambda_powertools.metrics import MetricUnit

from dependency_tracker.core.enums import DependencyError, PayloadState
from dependency_tracker.core.observability import logger, metrics
from dependency_tracker.table.keys import partition_key

if TYPE_CHECKING:
    from dependency_tracker.joins.store import JoinStore
    from dependency_tracker.table.dependency_table import DependencyTable
    from dependency_tracker.table.items import MembershipItem, Resolution
    from dependency_tracker.table.join_items import JoinItem


class JoinCounting:
    """Adds member outcomes to their joins' counts and decides the joins."""

    def __init__(
        self, *, joins: JoinStore, dependencies: DependencyTable, retention_days: int
    ) -> None:
        self.joins = joins
        self.dependencies = dependencies
        self.retention_days = retention_days

    def record(self, member: MembershipItem, resolution: Resolution) -> bool:
        """Count ``member``'s outcome once and decide its join if that settles it.

        Returns False when the outcome had been counted already (a redelivered
        record); the decision is still checked, since the delivery that counted
        may have died before deciding.
        """
        counted = self.joins.count(member, resolution, retention_days=self.retention_days)
        if not counted:
            logger.info("member outcome already counted")
        join, succeeded, failed = self.joins.read(member.join_id)
        if join is None:
            logger.warning("membership of a join that does not exist")
            return counted
        decide_if_settled(
            self.dependencies, join, succeeded, failed, winner=member.payload_id, may_succeed=True
        )
        return counted


def decide_if_settled(
    dependencies: DependencyTable,
    join: JoinItem,
    succeeded: int,
    failed: int,
    *,
    winner: str | None,
    may_succeed: bool,
) -> bool:
    """Decide ``join`` if these counts settle it; True when this call decided it.

    ``winner`` is the member whose count is being recorded (either-or joins
    name it). ``may_succeed`` is False for the registration side when the
    quorum was given: its success is always seen by the count that reached it,
    which knows the winner.
    """
    if join.workflow_state is not PayloadState.PROCESSING:
        return False
    decided = join.decision(succeeded, failed)
    if decided is None:
        return False
    state, error = decided
    if state is PayloadState.SUCCEEDED and not may_succeed:
        return False
    cause = None
    if error is DependencyError.INVALID_JOIN:
        cause = (
            f"quorum {join.needed} is more than the {join.known_total} distinct payloads "
            f"of join {join.join_id}"
        )
    first_success = join.quorum == 1 and state is PayloadState.SUCCEEDED
    if not dependencies.decide_join(
        join.join_id,
        state,
        error=error,
        # In its key form: the join row stays small whatever the id's length.
        winner=partition_key(winner) if first_success and winner is not None else None,
        cause=cause,
    ):
        return False
    logger.info(
        "join decided",
        extra={"state": state.value, "error": error, "succeeded": succeeded, "failed": failed},
    )
    metrics.add_metric(name="JoinsDecided", unit=MetricUnit.Count, value=1)
    return True
