"""A join's rows in the dependency table: registration chunks, exactly-once counts, reads.

Everything here keeps the join row's size and write rate constant in the
number of members: per member, one conditional put (its membership row) and one
two-item transaction (its membership row marked counted, one count shard
added to); per chunk of members, one two-item transaction (the chunk row and
the join row's ``registered`` count). The join row's decision, its one write
to a terminal state, comes from joins/decision.py.
"""

from __future__ import annotations

import random
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from enum import StrEnum, unique
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from dependency_tracker.core.enums import PayloadState, utcnow
from dependency_tracker.core.limits import DDB_MAX_BATCH_GET_KEYS
from dependency_tracker.joins.decision import JoinDecisions
from dependency_tracker.joins.outputs import MemberOutcome
from dependency_tracker.table.dynamodb import (
    batch_get,
    is_conditional_failure,
    put_if_absent,
    values,
)
from dependency_tracker.table.items import (
    MembershipItem,
    Resolution,
    join_partition_for,
    key_attributes,
    membership_id_for,
)
from dependency_tracker.table.join_items import (
    JOIN_COUNT_SHARDS,
    ChunkItem,
    CountShardItem,
    JoinItem,
    chunk_id_for,
    count_partition_for,
    shard_of,
)
from dependency_tracker.table.prefixes import CHUNK_KEY_PREFIX, COUNT_SHARD_KEY, JOIN_ROW_KEY

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from mypy_boto3_dynamodb import DynamoDBClient

# Chunk rows and count shards outlive any wait (MaxWaitSeconds is at most a year):
# the decision and the summary need them until the parent is told.
BOOKKEEPING_RETENTION_DAYS = 400
# Transaction conflicts retried in place before the stream retries the record.
MAX_CONFLICT_RETRIES = 5
# Membership puts and summary reads are I/O bound and spread over members' partitions.
DEFAULT_CONCURRENCY = 8


@unique
class Registration(StrEnum):
    """What registering a member's membership row found."""

    NEW = "new"  # written now
    OWN = "own"  # written by an earlier delivery of the same chunk
    DUPLICATE = "duplicate"  # an earlier chunk lists the same member


class JoinStore(JoinDecisions):
    """Reads and writes a join's rows; the flows hold the rules, this the access."""

    def __init__(
        self, client: DynamoDBClient, table_name: str, *, concurrency: int = DEFAULT_CONCURRENCY
    ) -> None:
        self._client = client
        self.table_name = table_name
        self._concurrency = max(1, concurrency)

    # ------------------------------------------------------------ registration

    def create(self, row: JoinItem) -> bool:
        """Write the join row unless it exists; False for a redelivery (or a reused id)."""
        return put_if_absent(self._client, self.table_name, row.to_item(), "waiter_id")

    def get(self, join_id: str) -> JoinItem | None:
        """Strongly consistent read of the join row."""
        item = self._get(join_partition_for(join_id), JOIN_ROW_KEY)
        return None if item is None else JoinItem.from_item(item)

    def chunk(self, join_id: str, index: int) -> ChunkItem | None:
        """The chunk row, once chunk ``index`` is registered."""
        item = self._get(join_partition_for(join_id), chunk_id_for(index))
        return None if item is None else ChunkItem.from_item(item)

    def register_members(self, rows: Sequence[MembershipItem]) -> list[Registration]:
        """Write each membership row unless it exists (conditional puts, in parallel).

        ``BatchWriteItem`` is not used: its puts are unconditional, and
        overwriting a membership row its member already resolved would count the
        member twice (or hide its outcome).
        """
        if len(rows) <= 1 or self._concurrency == 1:
            return [self._register_member(row) for row in rows]
        with ThreadPoolExecutor(max_workers=min(self._concurrency, len(rows))) as pool:
            return list(pool.map(self._register_member, rows))

    def _register_member(self, row: MembershipItem) -> Registration:
        if put_if_absent(self._client, self.table_name, row.to_item(), "waiter_id"):
            return Registration.NEW
        existing = self._get(row.payload_id, row.waiter_id)
        if existing is not None and MembershipItem.from_item(existing).chunk == row.chunk:
            return Registration.OWN
        return Registration.DUPLICATE

    def start_chunk(self, chunk: ChunkItem) -> None:
        """Write a chunk's member list before any of its members is registered or started.

        The summary lists members from chunk rows, so a join decided by this
        chunk's members (before the chunk is finished, or if it never is) still
        names them. A redelivery keeps the row written first.
        """
        item = chunk.to_item()
        item["expiration_time"] = {"N": str(_bookkeeping_expiry(chunk.created_at))}
        put_if_absent(self._client, self.table_name, item, "waiter_id")

    def finish_chunk(self, chunk: ChunkItem, *, chunks: int | None) -> bool:
        """Mark a registered chunk recorded and add its members to the join, exactly once.

        One transaction: the chunk row marked ``recorded`` (only if it was not;
        created with ``chunk.members`` when :meth:`start_chunk` did not run) and the
        join row's ``registered``/``registered_chunks``/``duplicates`` counts
        (``chunks`` set when this is the last chunk). ``chunk.members`` are the
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
        return self._transact(
            [
                {
                    "Update": {
                        "TableName": self.table_name,
                        "Key": {"payload_id": row["payload_id"], "waiter_id": row["waiter_id"]},
                        "UpdateExpression": (
                            "SET recorded = :true, join_id = :join, #index = :index, "
                            "members = if_not_exists(members, :list), duplicates = :repeated, "
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
                                expires=_bookkeeping_expiry(now),
                            ),
                            ":list": row.get("members", {"L": []}),
                            ":repeated": row.get("duplicates", {"L": []}),
                        },
                    }
                },
                {
                    "Update": {
                        "TableName": self.table_name,
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
            self._client.update_item(
                TableName=self.table_name,
                Key=key_attributes(payload_id=join_partition_for(join_id), waiter_id=JOIN_ROW_KEY),
                UpdateExpression="SET #total = :total",
                ConditionExpression="attribute_exists(join_id) AND attribute_not_exists(#total)",
                ExpressionAttributeNames={"#total": "total"},
                ExpressionAttributeValues=values(total=total),
            )
        except ClientError as exc:
            if not is_conditional_failure(exc):
                raise

    def adopt(self, join_id: str, *, old_token: str, new_token: str) -> bool:
        """Hand the join to ``new_token`` if ``old_token`` still owns it; False otherwise.

        ``notified_at`` is removed: a join decided while its parent was gone is
        told again, to the new token (the row turns un-notified on the stream).
        """
        try:
            self._client.update_item(
                TableName=self.table_name,
                Key=key_attributes(payload_id=join_partition_for(join_id), waiter_id=JOIN_ROW_KEY),
                UpdateExpression=(
                    "SET task_token = :new, updated_at = :now REMOVE notified_at, notify_outcome"
                ),
                ConditionExpression="attribute_exists(join_id) AND task_token = :old",
                ExpressionAttributeValues=values(new=new_token, old=old_token, now=utcnow()),
            )
        except ClientError as exc:
            if not is_conditional_failure(exc):
                raise
            return False
        return True

    # ---------------------------------------------------------------- counting

    def count(self, member: MembershipItem, resolution: Resolution, *, retention_days: int) -> bool:
        """Add a member's outcome to its join's counts, exactly once.

        One transaction: the membership row is marked notified (only if it was
        not: that is what makes a redelivered stream record count nothing) and
        one count shard gains the outcome. False when it had been counted.
        """
        now = utcnow()
        expires = int((now + timedelta(days=retention_days)).timestamp())
        outcome = "succeeded" if resolution.state is PayloadState.SUCCEEDED else "failed"
        shard = shard_of(member.payload_id)
        return self._transact(
            [
                {
                    "Update": {
                        "TableName": self.table_name,
                        "Key": key_attributes(
                            payload_id=member.payload_id, waiter_id=member.waiter_id
                        ),
                        "UpdateExpression": (
                            "SET notified_at = :now, notify_outcome = :outcome, "
                            "expiration_time = :expires, updated_at = :now"
                        ),
                        "ConditionExpression": (
                            "attribute_not_exists(notified_at) AND workflow_state = :state"
                        ),
                        "ExpressionAttributeValues": values(
                            now=now,
                            outcome=f"COUNTED:{resolution.state.value}",
                            expires=expires,
                            state=resolution.state.value,
                        ),
                    }
                },
                {
                    "Update": {
                        "TableName": self.table_name,
                        "Key": key_attributes(
                            payload_id=count_partition_for(member.join_id, shard),
                            waiter_id=COUNT_SHARD_KEY,
                        ),
                        "UpdateExpression": (
                            f"ADD {outcome} :one SET join_id = :join, updated_at = :now, "
                            "expiration_time = :expires"
                        ),
                        "ExpressionAttributeValues": values(
                            one=1,
                            join=member.join_id,
                            now=now,
                            expires=_bookkeeping_expiry(now),
                        ),
                    }
                },
            ]
        )

    def read(self, join_id: str) -> tuple[JoinItem | None, int, int]:
        """The join row and its counts (succeeded, failed): one consistent ``BatchGetItem``.

        Read after the caller's own write (the ordering rule): a member counted
        and a chunk finished concurrently each read the other's write or are
        read by it, so one of them always sees the decision.
        """
        keys = [key_attributes(payload_id=join_partition_for(join_id), waiter_id=JOIN_ROW_KEY)]
        keys += [
            key_attributes(
                payload_id=count_partition_for(join_id, shard), waiter_id=COUNT_SHARD_KEY
            )
            for shard in range(JOIN_COUNT_SHARDS)
        ]
        join, succeeded, failed = None, 0, 0
        for item in self._batch_get(keys):
            if item["waiter_id"]["S"] == JOIN_ROW_KEY:
                join = JoinItem.from_item(item)
            else:
                shard = CountShardItem.from_item(item)
                succeeded += shard.succeeded
                failed += shard.failed
        return join, succeeded, failed

    # ----------------------------------------------------------------- summary

    def members(self, join_id: str) -> tuple[list[MemberOutcome], list[str]]:
        """Each member the chunk rows name, once, with its outcome (manifest order); duplicates.

        One ``Query`` page per ~1 MB of chunk rows, then one ``BatchGetItem`` per
        100 members: read once, when the decided join's summary is sent (its
        counts and lists both come from this read). A member whose row is not
        written yet, or not terminal, is pending.
        """
        keys: list[str] = []
        duplicates: list[str] = []
        seen: set[str] = set()
        for chunk in self._chunks(join_id):
            # A chunk lists its members before it knows which are duplicates of another
            # chunk's: the first listing wins.
            keys.extend(key for key in chunk.members if key not in seen)
            seen.update(chunk.members)
            duplicates.extend(chunk.duplicates)
        found = self._membership_rows(join_id, keys)
        outcomes = []
        for key in keys:
            row = found.get(key)
            if row is None:
                outcomes.append(MemberOutcome(payload_id=key))
                continue
            done = row.workflow_state.is_terminal
            outcomes.append(
                MemberOutcome(
                    payload_id=row.payload_id,
                    state=row.workflow_state if done else None,
                    error=row.error if done else None,
                )
            )
        return outcomes, duplicates

    def chunk_rows(self, chunk: ChunkItem) -> list[MembershipItem]:
        """The membership rows ``chunk`` wrote (not those of members another chunk listed first)."""
        rows = self._membership_rows(chunk.join_id, chunk.members).values()
        return [row for row in rows if row.chunk == chunk.index]

    def _membership_rows(self, join_id: str, keys: list[str]) -> dict[str, MembershipItem]:
        """The join's membership rows of these members (key forms) that exist, by key form."""
        membership = membership_id_for(join_id)
        requests = [
            [
                key_attributes(payload_id=key, waiter_id=membership)
                for key in keys[i : i + DDB_MAX_BATCH_GET_KEYS]
            ]
            for i in range(0, len(keys), DDB_MAX_BATCH_GET_KEYS)
        ]
        found: dict[str, MembershipItem] = {}

        def fetch(batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
            return list(self._batch_get(batch))

        with ThreadPoolExecutor(max_workers=self._concurrency) as pool:
            for items in pool.map(fetch, requests):
                for item in items:
                    found[item["payload_id"]["S"]] = MembershipItem.from_item(item)
        return found

    def _chunks(self, join_id: str) -> Iterator[ChunkItem]:
        query: dict[str, Any] = {
            "TableName": self.table_name,
            "KeyConditionExpression": "payload_id = :pid AND begins_with(waiter_id, :chunk)",
            "ExpressionAttributeValues": values(
                pid=key_attributes(payload_id=join_partition_for(join_id))["payload_id"]["S"],
                chunk=CHUNK_KEY_PREFIX,
            ),
            "ConsistentRead": True,
        }
        while True:
            response = self._client.query(**query)
            for item in response.get("Items", []):
                yield ChunkItem.from_item(item)
            last = response.get("LastEvaluatedKey")
            if not last:
                return
            query["ExclusiveStartKey"] = last

    # ------------------------------------------------------------------ access

    def _transact(self, items: list[dict[str, Any]]) -> bool:
        """Run a transaction; False when a condition refused it (it wrote nothing).

        Two transactions on one item at once conflict on AWS (the count shards are
        few and hot): a conflict is retried here, with jittered backoff, before the
        error goes back to the stream, whose retries are few and then discard.
        """
        for attempt in range(MAX_CONFLICT_RETRIES + 1):
            try:
                self._client.transact_write_items(TransactItems=items)  # type: ignore[arg-type]
            except ClientError as exc:
                if _cancelled_by_condition(exc):
                    return False
                if not _conflicted(exc) or attempt == MAX_CONFLICT_RETRIES:
                    raise
                time.sleep(random.uniform(0, min(1.0, 0.025 * 2**attempt)))  # noqa: S311
                continue
            return True
        return True  # unreachable: the last attempt returns or raises

    def _get(self, payload_id: str, waiter_id: str) -> dict[str, Any] | None:
        response = self._client.get_item(
            TableName=self.table_name,
            Key=key_attributes(payload_id=payload_id, waiter_id=waiter_id),
            ConsistentRead=True,
        )
        return response.get("Item")

    def _batch_get(self, keys: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        """Consistent ``BatchGetItem`` of at most 100 keys, unprocessed keys retried."""
        yield from batch_get(self._client, self.table_name, keys)


def _bookkeeping_expiry(now: Any) -> int:
    return int((now + timedelta(days=BOOKKEEPING_RETENTION_DAYS)).timestamp())


def _conflicted(exc: ClientError) -> bool:
    """Another transaction held one of the items (retryable)."""
    code = exc.response.get("Error", {}).get("Code")
    if code == "TransactionConflictException":
        return True
    reasons = exc.response.get("CancellationReasons") or []
    return code == "TransactionCanceledException" and any(
        reason.get("Code") == "TransactionConflict" for reason in reasons
    )


def _cancelled_by_condition(exc: ClientError) -> bool:
    """A transaction cancelled only because one of its conditions failed."""
    if exc.response.get("Error", {}).get("Code") != "TransactionCanceledException":
        return False
    reasons = exc.response.get("CancellationReasons") or []
    codes = {reason.get("Code") for reason in reasons}
    if reasons:
        return codes <= {"ConditionalCheckFailed", "None"} and "ConditionalCheckFailed" in codes
    return "ConditionalCheckFailed" in exc.response.get("Error", {}).get("Message", "")
