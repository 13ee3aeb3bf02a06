"""Deciding a join: its row turns terminal once, when its counts settle it or it is refused.

Two sides check the counts, each after its own write (the ordering rule): the
callback flow after counting a member's outcome (joins/counting.py), and the
registration flow once the last chunk makes ``n`` known (joins/chunks.py).
Whichever reads last sees every count and the final ``n``, so a settled join is
always decided; :meth:`JoinDecisions.decide_join` is conditional, so it is
decided once. A join is also decided ``FAILED`` when it is refused (a cycle,
an unusable member list): the same write, with the error.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.metrics import MetricUnit

from dependency_tracker.core.enums import DependencyError, PayloadState, utcnow
from dependency_tracker.core.observability import logger, metrics
from dependency_tracker.core.text import clip
from dependency_tracker.table.dependency_table import (
    MAX_RECORDED_CYCLE_BYTES,
    MAX_REFUSAL_CAUSE_CHARS,
)
from dependency_tracker.table.dynamodb import update_if, values
from dependency_tracker.table.items import JOIN_ROW_KEY, join_partition_for, key_attributes
from dependency_tracker.table.keys import partition_key, recorded_ids

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

    from dependency_tracker.joins.rows import JoinItem


class JoinDecisions:
    """The join row's one write to a terminal state (a base of :class:`JoinStore`)."""

    _client: DynamoDBClient
    table_name: str

    def decide_join(
        self,
        join_id: str,
        state: PayloadState,
        *,
        error: DependencyError | None = None,
        winner: str | None = None,
        cycle: list[str] | None = None,
        cause: str | None = None,
    ) -> bool:
        """Turn a join terminal, once; False if it already was (it fires only once)."""
        sets = ["workflow_state = :state", "resolved_at = :now", "updated_at = :now"]
        plain: dict[str, object] = {
            "state": state.value,
            "now": utcnow(),
            "processing": PayloadState.PROCESSING.value,
        }
        names: dict[str, str] = {}
        if error is not None:
            sets.append("#error = :error")
            names["#error"] = "error"
            plain["error"] = error.value
        if winner is not None:
            sets.append("winner = :winner")
            plain["winner"] = winner
        if cause is not None:
            sets.append("#cause = :cause")
            names["#cause"] = "cause"
            plain["cause"] = clip(cause, MAX_REFUSAL_CAUSE_CHARS)
        if cycle is not None:
            sets.append("#cycle = :cycle")
            names["#cycle"] = "cycle"
            # Whole ids while they fit, then key forms: a cycle of any ids fits the row,
            # and the summary names the key forms it can (joins/summary.py).
            plain["cycle"] = recorded_ids(cycle, MAX_RECORDED_CYCLE_BYTES)
        extra: dict[str, Any] = {"ExpressionAttributeNames": names} if names else {}
        return (
            update_if(
                self._client,
                TableName=self.table_name,
                Key=key_attributes(payload_id=join_partition_for(join_id), waiter_id=JOIN_ROW_KEY),
                UpdateExpression="SET " + ", ".join(sets),
                ConditionExpression="workflow_state = :processing",
                ExpressionAttributeValues=values(**plain),
                **extra,
            )
            is not None
        )


def decide_if_settled(
    joins: JoinDecisions,
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
    if not joins.decide_join(
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
