"""Reruns that count: a member's outcome taken back from its undecided joins before it runs again.

A join counts each member's outcome once (joins/count_rows.py). When a member
payload runs again (a ``rerun``, a ``replace``), the outcome its joins counted
is no longer its latest: before the new attempt starts, every membership row of
the payload whose join is still undecided returns to ``PROCESSING`` and its
count is given back, in one transaction per row. The new run's end then resolves
the row like any waiter and the callback counts it again: the latest outcome
counts, and no member is counted twice. A decided join keeps its decision and
its members' outcomes.

Taking back can only shrink the counts; the check after the write (the ordering
rule) still decides a join another side's refused decision left settled.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_lambda_powertools.metrics import MetricUnit

from dependency_tracker.core.observability import logger, metrics
from dependency_tracker.joins.decision import decide_from_counts

if TYPE_CHECKING:
    from dependency_tracker.joins.store import JoinStore


class MemberReopening:
    """Takes a payload's outcomes back from the undecided joins it is a member of."""

    def __init__(self, *, joins: JoinStore) -> None:
        self.joins = joins

    def reopen(self, payload_id: str) -> int:
        """Before a later attempt of ``payload_id`` starts; how many rows were taken back."""
        reopened = 0
        for member in self.joins.memberships_of(payload_id):
            if not member.workflow_state.is_terminal or not self.joins.take_back(member):
                continue
            reopened += 1
            logger.info(
                "member outcome taken back for its rerun",
                extra={"join_id": member.join_id, "was": member.workflow_state.value},
            )
            decide_from_counts(self.joins, member.join_id, winner=None, may_succeed=False)
        if reopened:
            metrics.add_metric(name="JoinMembersReopened", unit=MetricUnit.Count, value=reopened)
        return reopened
