"""Registration writes: membership rows, chunk rows and the join row's registered counts.

:class:`ChunkRows` is the registration's own access to them (joins/chunks.py
uses it); the join row and its counts are :class:`~dependency_tracker.joins.store.JoinStore`'s.
They keep the join row's size and write rate constant in the number of
members: per member, one conditional put (its membership row); per chunk of
members, one two-item transaction (the chunk row and the join row's
``registered`` count).
"""

from __future__ import annotations

from enum import StrEnum, unique
from typing import TYPE_CHECKING

from botocore.exceptions import ClientError

from dependency_tracker.core.enums import utcnow
from dependency_tracker.core.threads import ContextExecutor
from dependency_tracker.joins import member_rows
from dependency_tracker.joins.row_access import bookkeeping_expiry
from dependency_tracker.joins.rows import ChunkItem, chunk_id_for
from dependency_tracker.table.dynamodb import is_conditional_failure, put_if_absent, values
from dependency_tracker.table.items import MembershipItem, join_partition_for, key_attributes
from dependency_tracker.table.prefixes import JOIN_ROW_KEY

if TYPE_CHECKING:
    from collections.abc import Sequence

    from dependency_tracker.joins.row_access import RowAccess


@unique
class Registration(StrEnum):
    """What registering a member's membership row found."""

    NEW = "new"  # written now
    OWN = "own"  # written by an earlier delivery of the same chunk
    DUPLICATE = "duplicate"  # an earlier chunk lists the same member


class ChunkRows:
    """A join's registration rows: membership rows, chunk rows, the registered counts."""

    def __init__(self, access: RowAccess) -> None:
        self._access = access

    def chunk(self, join_id: str, index: int) -> ChunkItem | None:
        """The chunk row, once chunk ``index`` is registered."""
        item = self._access.get(join_partition_for(join_id), chunk_id_for(index))
        return None if item is None else ChunkItem.from_item(item)

    def chunk_indexes(self, join_id: str) -> list[int]:
        """The indexes of the join's chunk rows (read by key: a chunk row is up to 400 KB)."""
        return member_rows.chunk_indexes(self._access, join_id)

    def chunk_rows(self, chunk: ChunkItem) -> list[MembershipItem]:
        """The membership rows ``chunk`` wrote (not those of members another chunk listed first)."""
        return member_rows.chunk_rows(self._access, chunk)

    def register_members(self, rows: Sequence[MembershipItem]) -> list[Registration]:
        """Write each membership row unless it exists (conditional puts, in parallel).

        ``BatchWriteItem`` is not used: its puts are unconditional, and
        overwriting a membership row its member already resolved would count the
        member twice (or hide its outcome).
        """

        def register(row: MembershipItem) -> Registration:
            if put_if_absent(
                self._access.client, self._access.table_name, row.to_item(), "waiter_id"
            ):
                return Registration.NEW
            existing = self._access.get(row.payload_id, row.waiter_id)
            if existing is not None and MembershipItem.from_item(existing).chunk == row.chunk:
                return Registration.OWN
            return Registration.DUPLICATE

        if len(rows) <= 1 or self._access.concurrency == 1:
            return [register(row) for row in rows]
        with ContextExecutor(max_workers=min(self._access.concurrency, len(rows))) as pool:
            return list(pool.map(register, rows))

    def start_chunk(self, chunk: ChunkItem) -> None:
        """Write a chunk's member list before any of its members is registered or started.

        The summary lists members from chunk rows, so a join decided by this
        chunk's members (before the chunk is finished, or if it never is) still
        names them. A redelivery keeps the row written first.
        """
        item = chunk.to_item()
        item["expiration_time"] = {"N": str(bookkeeping_expiry(chunk.created_at))}
        put_if_absent(self._access.client, self._access.table_name, item, "waiter_id")

    def finish_chunk(self, chunk: ChunkItem, *, chunks: int | None) -> bool:
        """Mark a registered chunk recorded and add its members to the join, exactly once.

        One transaction: the chunk row marked ``recorded`` (only if it was not;
        created with ``chunk.members`` and ``chunk.full_members`` when
        :meth:`start_chunk` did not run) and the join row's
        ``registered``/``registered_chunks``/``duplicates`` counts (``chunks`` set
        when this is the last chunk). ``chunk.members`` are the
        members this chunk registered. False when the chunk was recorded before.
        """
        now = utcnow()
        sets = "updated_at = :now" + (", chunks = :chunks" if chunks is not None else "")
        plain: dict[str, object] = {
            "members": len(chunk.members),
            "one": 1,
            "duplicates": len(chunk.duplicates),
            "now": now,
        }
        if chunks is not None:
            plain["chunks"] = chunks
        join_key = key_attributes(
            payload_id=join_partition_for(chunk.join_id), waiter_id=JOIN_ROW_KEY
        )
        row = chunk.to_item()
        return self._access.transact(
            [
                {
                    "Update": {
                        "TableName": self._access.table_name,
                        "Key": {"payload_id": row["payload_id"], "waiter_id": row["waiter_id"]},
                        "UpdateExpression": (
                            "SET recorded = :true, join_id = :join, #index = :index, "
                            "members = if_not_exists(members, :list), "
                            "full_members = if_not_exists(full_members, :full), "
                            "duplicates = :repeated, "
                            "created_at = if_not_exists(created_at, :now), "
                            "expiration_time = if_not_exists(expiration_time, :expires)"
                        ),
                        "ConditionExpression": (
                            "attribute_not_exists(recorded) OR recorded = :false"
                        ),
                        "ExpressionAttributeNames": {"#index": "index"},
                        "ExpressionAttributeValues": {
                            **values(
                                true=True,
                                false=False,
                                join=chunk.join_id,
                                index=chunk.index,
                                now=now,
                                expires=bookkeeping_expiry(now),
                            ),
                            ":list": row.get("members", {"L": []}),
                            ":full": row.get("full_members", {"L": []}),
                            ":repeated": row.get("duplicates", {"L": []}),
                        },
                    }
                },
                {
                    "Update": {
                        "TableName": self._access.table_name,
                        "Key": join_key,
                        "UpdateExpression": (
                            "ADD registered :members, registered_chunks :one, "
                            f"duplicates :duplicates SET {sets}"
                        ),
                        "ConditionExpression": "attribute_exists(join_id)",
                        "ExpressionAttributeValues": values(**plain),
                    }
                },
            ]
        )

    def set_total(self, join_id: str, total: int) -> None:
        """Write n on the join row once every chunk is registered (for readers of the row)."""
        try:
            self._access.client.update_item(
                TableName=self._access.table_name,
                Key=key_attributes(payload_id=join_partition_for(join_id), waiter_id=JOIN_ROW_KEY),
                UpdateExpression="SET #total = :total",
                ConditionExpression="attribute_exists(join_id) AND attribute_not_exists(#total)",
                ExpressionAttributeNames={"#total": "total"},
                ExpressionAttributeValues=values(total=total),
            )
        except ClientError as exc:
            if not is_conditional_failure(exc):
                raise
