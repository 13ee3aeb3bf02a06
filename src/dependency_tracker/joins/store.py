"""JoinStore, the one store of a join's row: created, read, decided, answered, counted.

The join row and its decision are written here; the tokens and their answers
are joins/token_rows.py, the outcome counts joins/count_rows.py, the members
read back for the summary joins/member_rows.py; the calls they share are
joins/row_access.py. Registration's own rows (membership and chunk rows) are
written by :class:`~dependency_tracker.joins.registration_rows.ChunkRows`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dependency_tracker.core.enums import DependencyError, PayloadState, utcnow
from dependency_tracker.core.text import clip
from dependency_tracker.joins import count_rows, member_rows, token_rows
from dependency_tracker.joins.row_access import DEFAULT_CONCURRENCY, RowAccess
from dependency_tracker.joins.rows import JoinItem, ParentGone
from dependency_tracker.table.dependency_table import (
    MAX_RECORDED_CYCLE_BYTES,
    MAX_REFUSAL_CAUSE_CHARS,
)
from dependency_tracker.table.dynamodb import put_if_absent, update_if, values
from dependency_tracker.table.items import join_partition_for, key_attributes
from dependency_tracker.table.keys import recorded_ids
from dependency_tracker.table.prefixes import JOIN_ROW_KEY

if TYPE_CHECKING:
    from collections.abc import Iterator

    from mypy_boto3_dynamodb import DynamoDBClient

    from dependency_tracker.joins.outputs import MemberOutcome
    from dependency_tracker.table.items import MembershipItem, ReleaseMark, Resolution


CANCEL = ParentGone.CANCEL.value


class JoinStore:
    """Reads and writes a join's rows; the flows hold the rules, this the access."""

    def __init__(
        self, client: DynamoDBClient, table_name: str, *, concurrency: int = DEFAULT_CONCURRENCY
    ) -> None:
        self._client = client
        self.table_name = table_name
        self._access = RowAccess(client, table_name, concurrency=concurrency)

    # ---------------------------------------------------------------- join row

    def create(self, row: JoinItem) -> bool:
        """Write the join row unless it exists; False for a redelivery (or a reused id)."""
        return put_if_absent(self._client, self.table_name, row.to_item(), "waiter_id")

    def get(self, join_id: str) -> JoinItem | None:
        """Strongly consistent read of the join row."""
        item = self._access.get(join_partition_for(join_id), JOIN_ROW_KEY)
        return None if item is None else JoinItem.from_item(item)

    def decide_join(
        self,
        join_id: str,
        state: PayloadState,
        *,
        error: DependencyError | None = None,
        winner: str | None = None,
        cycle: list[str] | None = None,
        cause: str | None = None,
        reopened: int | None = None,
        decided_by: str | None = None,
    ) -> bool:
        """Turn a join terminal, once; False if it already was (it fires only once).

        ``reopened``: the take-backs the deciding read saw; a decision from counts
        is refused when a rerun took an outcome back since (False, still undecided).
        ``decided_by``: what decided it when not its counts (``deadline``). The join
        leaves the deadlines index either way: its deadline is cancelled.
        """
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
        if decided_by is not None:
            sets.append("decided_by = :decided_by")
            plain["decided_by"] = decided_by
        if cycle is not None:
            sets.append("#cycle = :cycle")
            names["#cycle"] = "cycle"
            # Whole ids while they fit, then key forms: a cycle of any ids fits the row,
            # and the summary names the key forms it can (joins/summary.py).
            plain["cycle"] = recorded_ids(cycle, MAX_RECORDED_CYCLE_BYTES)
        condition = "workflow_state = :processing"
        if reopened is not None:
            # A row written before take-backs existed has no ``reopened``: none happened.
            condition += " AND (reopened = :reopened" + (
                ")" if reopened else " OR attribute_not_exists(reopened))"
            )
            plain["reopened"] = reopened
        extra: dict[str, Any] = {"ExpressionAttributeNames": names} if names else {}
        return (
            update_if(
                self._client,
                TableName=self.table_name,
                Key=key_attributes(payload_id=join_partition_for(join_id), waiter_id=JOIN_ROW_KEY),
                UpdateExpression="SET " + ", ".join(sets) + " REMOVE deadline_shard",
                ConditionExpression=condition,
                ExpressionAttributeValues=values(**plain),
                **extra,
            )
            is not None
        )

    def mark_gone(self, join_id: str, cause: str) -> JoinItem | None:
        """Record, once, that a cancelling join's parent is gone; the row, or None.

        None when the join does not exist or does not cancel with its parent. A
        second call keeps the first time and cause and returns the row all the same.
        """
        response = update_if(
            self._client,
            TableName=self.table_name,
            Key=key_attributes(payload_id=join_partition_for(join_id), waiter_id=JOIN_ROW_KEY),
            UpdateExpression="SET gone_at = if_not_exists(gone_at, :now), "
            "gone_cause = if_not_exists(gone_cause, :cause)",
            ConditionExpression="on_parent_gone = :cancel",
            ExpressionAttributeValues=values(
                now=utcnow(), cause=clip(cause, MAX_REFUSAL_CAUSE_CHARS), cancel=CANCEL
            ),
            ReturnValues="ALL_NEW",
        )
        return None if response is None else JoinItem.from_item(response["Attributes"])

    # ------------------------------------------------------------------ tokens

    def add_token(self, join_id: str, token: str) -> bool:
        """Add a retried send's token; False if the join holds it or is full."""
        return token_rows.add_token(self._access, join_id, token)

    def mark_answered(
        self, join_id: str, token: str, outcome: str, *, over_gone: bool = False
    ) -> bool:
        """Record how one of the join's tokens was answered, once."""
        return token_rows.mark_answered(self._access, join_id, token, outcome, over_gone=over_gone)

    def finish_answering(
        self,
        join: JoinItem,
        *,
        outcome: str,
        retention_days: int,
        last: tuple[str, str] | None = None,
    ) -> bool:
        """Mark the join told once every token it holds is answered (``last``'s answer too)."""
        return token_rows.finish_answering(
            self._access, join, outcome=outcome, retention_days=retention_days, last=last
        )

    def mark_released(self, join: JoinItem, release: ReleaseMark, *, outcome: str) -> bool:
        """Record an operator's release of every token ``join`` holds."""
        return token_rows.mark_released(self._access, join, release, outcome=outcome)

    # ------------------------------------------------------------------ counts

    def count(self, member: MembershipItem, resolution: Resolution, *, retention_days: int) -> bool:
        """Add a member's outcome to its join's counts, exactly once."""
        return count_rows.count_outcome(
            self._access, member, resolution, retention_days=retention_days
        )

    def take_back(self, member: MembershipItem) -> bool:
        """Return a resolved member of an undecided join to ``PROCESSING``, its count with it."""
        return count_rows.take_back(self._access, member)

    def read(self, join_id: str) -> tuple[JoinItem | None, int, int]:
        """The join row and its counts (succeeded, failed): one consistent ``BatchGetItem``."""
        return count_rows.read_counts(self._access, join_id)

    # ----------------------------------------------------------------- members

    def members(self, join_id: str) -> tuple[list[MemberOutcome], list[str]]:
        """Each member the chunk rows name, once, with its outcome (manifest order); duplicates."""
        return member_rows.member_outcomes(self._access, join_id)

    def member_pages(self, join_id: str) -> Iterator[list[tuple[str, MembershipItem | None]]]:
        """The members (whole id, membership row or None) one chunk row at a time, in order."""
        return member_rows.member_pages(self._access, join_id)

    def claim_results_final(self, join_id: str, *, claim: bool = True) -> bool:
        """Set (or with ``claim`` False, remove) the join row's ``results_final_at``, once.

        Conditional: only one writer of the final results manifest claims it.
        """
        key = key_attributes(payload_id=join_partition_for(join_id), waiter_id=JOIN_ROW_KEY)
        if not claim:
            self._client.update_item(
                TableName=self.table_name, Key=key, UpdateExpression="REMOVE results_final_at"
            )
            return True
        return (
            update_if(
                self._client,
                TableName=self.table_name,
                Key=key,
                UpdateExpression="SET results_final_at = :now",
                ConditionExpression="attribute_exists(waiter_id) AND "
                "attribute_not_exists(results_final_at)",
                ExpressionAttributeValues=values(now=utcnow()),
            )
            is not None
        )

    def memberships_of(self, payload_id: str) -> Iterator[MembershipItem]:
        """Every join's membership row under one member payload."""
        return member_rows.memberships_of(self._access, payload_id)
