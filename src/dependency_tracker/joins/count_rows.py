"""A join's outcome counts: each member counted once into a count shard, the shards read back.

The counts keep the join row's size and write rate constant in the number of
members: per member, one two-item transaction (its membership row marked
counted, one count shard added to); the join row itself is never written per
member.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

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


def take_back(access: RowAccess, member: MembershipItem) -> bool:
    """Return a resolved member of an undecided join to ``PROCESSING`` (a rerun starts).

    One transaction: the membership row loses its outcome (only if it still holds
    the one read: a row counted since is taken back with its count, never twice),
    its count shard gives the outcome back when it had been counted, and the join
    row, still undecided, gains one ``reopened``. False when any condition failed.
    """
    state = member.workflow_state
    if not state.is_terminal:
        return False
    counted = f"COUNTED:{state.value}"
    if member.notified_at is not None and member.notify_outcome != counted:
        return False
    now = utcnow()
    condition = "workflow_state = :old AND " + (
        "notify_outcome = :counted" if member.notified_at else "attribute_not_exists(notified_at)"
    )
    processing = PayloadState.PROCESSING.value
    plain: dict[str, object] = {"old": state.value, "processing": processing, "now": now}
    if member.notified_at:
        plain["counted"] = counted
    items: list[dict[str, Any]] = [
        {
            "Update": {
                "TableName": access.table_name,
                "Key": key_attributes(payload_id=member.payload_id, waiter_id=member.waiter_id),
                "UpdateExpression": (
                    "SET workflow_state = :processing, updated_at = :now "
                    "REMOVE notified_at, notify_outcome, resolved_at, execution_arn, #error, "
                    "#cause, result_json, replayed, expiration_time"
                ),
                "ConditionExpression": condition,
                "ExpressionAttributeNames": {"#error": "error", "#cause": "cause"},
                "ExpressionAttributeValues": values(**plain),
            }
        },
        {
            "Update": {
                "TableName": access.table_name,
                "Key": key_attributes(
                    payload_id=join_partition_for(member.join_id), waiter_id=JOIN_ROW_KEY
                ),
                "UpdateExpression": "ADD reopened :one SET updated_at = :now",
                "ConditionExpression": "workflow_state = :processing",
                "ExpressionAttributeValues": values(one=1, now=now, processing=processing),
            }
        },
    ]
    if member.notified_at:
        outcome = "succeeded" if state is PayloadState.SUCCEEDED else "failed"
        items.append(
            {
                "Update": {
                    "TableName": access.table_name,
                    "Key": key_attributes(
                        payload_id=count_partition_for(member.join_id, shard_of(member.payload_id)),
                        waiter_id=COUNT_SHARD_KEY,
                    ),
                    "UpdateExpression": f"ADD {outcome} :minus_one SET updated_at = :now",
                    "ConditionExpression": f"{outcome} >= :one",
                    "ExpressionAttributeValues": values(minus_one=-1, one=1, now=now),
                }
            }
        )
    return access.transact(items)


def read_counts(access: RowAccess, join_id: str) -> tuple[JoinItem | None, int, int]:
    """The join row and its counts (succeeded, failed): one consistent ``BatchGetItem``.

    Read after the caller's own write (the ordering rule): a member counted
    and a chunk finished concurrently each read the other's write or are
    read by it, so one of them always sees the decision.

    Counts only grow, so a shard read before another's write undercounts and
    decides nothing wrongly, unless a rerun took an outcome back (:func:`take_back`).
    A join with a take-back has its shards read again after its row: the counts are
    then at least as new as the row's ``reopened``, which its decision is conditional on.
    """
    join_key = key_attributes(payload_id=join_partition_for(join_id), waiter_id=JOIN_ROW_KEY)
    join, succeeded, failed = _read(access, join_id, [join_key])
    if join is not None and join.reopened:
        _, succeeded, failed = _read(access, join_id, [])
    return join, succeeded, failed


def _read(
    access: RowAccess, join_id: str, keys: list[dict[str, Any]]
) -> tuple[JoinItem | None, int, int]:
    """``keys`` and every count shard of ``join_id``: the join row (if asked) and the sums."""
    keys = keys + [
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
