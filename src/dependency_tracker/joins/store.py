"""JoinStore, the one object the join flows use: the join row here, its other rows from parts.

Registration writes are joins/registration_rows.py, the tokens and their answers
joins/token_rows.py, the outcome counts
joins/count_rows.py, the members read back for the summary joins/member_rows.py
and the join row's decision joins/decision.py; the calls they share are
joins/row_access.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dependency_tracker.joins import count_rows, member_rows, registration_rows, token_rows
from dependency_tracker.joins.decision import JoinDecisions
from dependency_tracker.joins.registration_rows import Registration
from dependency_tracker.joins.row_access import DEFAULT_CONCURRENCY, RowAccess
from dependency_tracker.joins.rows import ChunkItem, JoinItem, chunk_id_for
from dependency_tracker.table.dynamodb import put_if_absent
from dependency_tracker.table.items import join_partition_for
from dependency_tracker.table.prefixes import JOIN_ROW_KEY

if TYPE_CHECKING:
    from collections.abc import Sequence

    from mypy_boto3_dynamodb import DynamoDBClient

    from dependency_tracker.joins.outputs import MemberOutcome
    from dependency_tracker.table.items import MembershipItem, ReleaseMark, Resolution

# Registration is what register_members answers; callers import it from here too.
__all__ = ["JoinStore", "Registration"]


class JoinStore(JoinDecisions):
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

    def chunk(self, join_id: str, index: int) -> ChunkItem | None:
        """The chunk row, once chunk ``index`` is registered."""
        item = self._access.get(join_partition_for(join_id), chunk_id_for(index))
        return None if item is None else ChunkItem.from_item(item)

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

    # ------------------------------------------------------------ registration

    def register_members(self, rows: Sequence[MembershipItem]) -> list[Registration]:
        """Write each membership row unless it exists (conditional puts, in parallel)."""
        return registration_rows.register_members(self._access, rows)

    def start_chunk(self, chunk: ChunkItem) -> None:
        """Write a chunk's member list before any of its members is registered or started."""
        registration_rows.start_chunk(self._access, chunk)

    def finish_chunk(self, chunk: ChunkItem, *, chunks: int | None) -> bool:
        """Mark a registered chunk recorded and add its members to the join, exactly once."""
        return registration_rows.finish_chunk(self._access, chunk, chunks=chunks)

    def set_total(self, join_id: str, total: int) -> None:
        """Write n on the join row once every chunk is registered (for readers of the row)."""
        registration_rows.set_total(self._access, join_id, total)

    # ------------------------------------------------------------------ counts

    def count(self, member: MembershipItem, resolution: Resolution, *, retention_days: int) -> bool:
        """Add a member's outcome to its join's counts, exactly once."""
        return count_rows.count_outcome(
            self._access, member, resolution, retention_days=retention_days
        )

    def read(self, join_id: str) -> tuple[JoinItem | None, int, int]:
        """The join row and its counts (succeeded, failed): one consistent ``BatchGetItem``."""
        return count_rows.read_counts(self._access, join_id)

    # ----------------------------------------------------------------- members

    def members(self, join_id: str) -> tuple[list[MemberOutcome], list[str]]:
        """Each member the chunk rows name, once, with its outcome (manifest order); duplicates."""
        return member_rows.member_outcomes(self._access, join_id)

    def chunk_rows(self, chunk: ChunkItem) -> list[MembershipItem]:
        """The membership rows ``chunk`` wrote (not those of members another chunk listed first)."""
        return member_rows.chunk_rows(self._access, chunk)
