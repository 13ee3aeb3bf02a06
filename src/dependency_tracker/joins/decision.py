"""Deciding a join: its row turns terminal once, when its counts settle it or it is refused.

Two sides check the counts, each after its own write (the ordering rule): the
callback flow after counting a member's outcome (joins/counting.py), and the
registration flow once the last chunk makes ``n`` known (joins/chunks.py).
Whichever reads last sees every count and the final ``n``, so a settled join is
always decided; :meth:`JoinStore.decide_join` (joins/store.py) is conditional, so it is
decided once. A join is also decided ``FAILED`` when it is refused (a cycle,
an unusable member list): the same write, with the error.

A rerun takes a member's outcome back (joins/reopening.py): counts can then
shrink, so a decision is also conditional on the take-backs its read saw, and
:func:`decide_from_counts` reads again when one came between.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_lambda_powertools.metrics import MetricUnit

from dependency_tracker.core.enums import DependencyError, PayloadState
from dependency_tracker.core.observability import logger, metrics
from dependency_tracker.table.keys import partition_key

# Reads of a settled join whose decision a concurrent take-back refused; each refusal
# means a take-back (a rerun starting) landed, so a few are plenty.
MAX_DECIDE_READS = 5

if TYPE_CHECKING:
    from dependency_tracker.joins.rows import JoinItem
    from dependency_tracker.joins.store import JoinStore


def decide_if_settled(
    joins: JoinStore,
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
        asked = f"quorum {join.needed}"
        if join.needed is None or join.known_total is None or join.needed <= join.known_total:
            asked = f"join.min_succeeded {join.least}"  # only a deadline's count is left
        cause = (
            f"{asked} is more than the {join.known_total} distinct payloads of join {join.join_id}"
        )
    first_success = join.quorum == 1 and state is PayloadState.SUCCEEDED
    if not joins.decide_join(
        join.join_id,
        state,
        error=error,
        # In its key form: the join row stays small whatever the id's length.
        winner=partition_key(winner) if first_success and winner is not None else None,
        cause=cause,
        reopened=join.reopened,
    ):
        return False
    logger.info(
        "join decided",
        extra={"state": state.value, "error": error, "succeeded": succeeded, "failed": failed},
    )
    metrics.add_metric(name="JoinsDecided", unit=MetricUnit.Count, value=1)
    return True


def decide_from_counts(
    joins: JoinStore, join_id: str, *, winner: str | None, may_succeed: bool
) -> JoinItem | None:
    """Read ``join_id`` with its counts and decide it if they settle it (after a write).

    A settled join whose decision was refused is read again: another side decided
    it (the next read says so), or a rerun took an outcome back in between and the
    counts are read anew. Returns the join as last read (None when it is gone).
    """
    join: JoinItem | None = None
    for _ in range(MAX_DECIDE_READS):
        join, succeeded, failed = joins.read(join_id)
        if join is None or join.workflow_state is not PayloadState.PROCESSING:
            return join
        settled = join.decision(succeeded, failed)
        if settled is None or (settled[0] is PayloadState.SUCCEEDED and not may_succeed):
            return join
        if decide_if_settled(
            joins, join, succeeded, failed, winner=winner, may_succeed=may_succeed
        ):
            return join
    return join
