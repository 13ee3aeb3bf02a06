"""A join's outcome counts: each member counted once into a count shard, the shards read back.

The counts keep the join row's size and write rate constant in the number of
members: per member, one two-item transaction (its membership row marked
counted, one count shard added to); the join row itself is never written per
member.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from dependency_tracker.core.enums import PayloadState, utcnow
from dependency_tracker.joins.row_access import bookkeeping_expiry
from dependency_tracker.joins.rows import (
    JOIN_COUNT_SHARDS,
    CountShardItem,
    JoinItem,
    count_partition_for,
    shard_of,
)
from dependency_tracker.table.dynamodb import values
from dependency_tracker.table.items import join_partition_for, key_attributes
from dependency_tracker.table.prefixes import COUNT_SHARD_KEY, JOIN_ROW_KEY

if TYPE_CHECKING:
    from dependency_tracker.joins.row_access import RowAccess
    from dependency_tracker.table.items import MembershipItem, Resolution


def count_outcome(
    access: RowAccess, member: MembershipItem, resolution: Resolution, *, retention_days: int
) -> bool:
    """Add a member's outcome to its join's counts, exactly once.

    One transaction: the membership row is marked notified (only if it was
    not: that is what makes a redelivered stream record count nothing) and
    one count shard gains the outcome. False when it had been counted.
    """
    now = utcnow()
    expires = int((now + timedelta(days=retention_days)).timestamp())
    outcome = "succeeded" if resolution.state is PayloadState.SUCCEEDED else "failed"
    shard = shard_of(member.payload_id)
    return access.transact(
        [
            {
                "Update": {
                    "TableName": access.table_name,
                    "Key": key_attributes(payload_id=member.payload_id, waiter_id=member.waiter_id),
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
                    "TableName": access.table_name,
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
                        expires=bookkeeping_expiry(now),
                    ),
                }
            },
        ]
    )


def read_counts(access: RowAccess, join_id: str) -> tuple[JoinItem | None, int, int]:
    """The join row and its counts (succeeded, failed): one consistent ``BatchGetItem``.

    Read after the caller's own write (the ordering rule): a member counted
    and a chunk finished concurrently each read the other's write or are
    read by it, so one of them always sees the decision.
    """
    keys = [key_attributes(payload_id=join_partition_for(join_id), waiter_id=JOIN_ROW_KEY)]
    keys += [
        key_attributes(payload_id=count_partition_for(join_id, shard), waiter_id=COUNT_SHARD_KEY)
        for shard in range(JOIN_COUNT_SHARDS)
    ]
    join, succeeded, failed = None, 0, 0
    for item in access.batch_get(keys):
        if item["waiter_id"]["S"] == JOIN_ROW_KEY:
            join = JoinItem.from_item(item)
        else:
            shard = CountShardItem.from_item(item)
            succeeded += shard.succeeded
            failed += shard.failed
    return join, succeeded, failed
