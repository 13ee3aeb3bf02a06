"""A join's rows stay within DynamoDB's 400 KB whatever the number of members.

Before joins held counts, the join row listed every member and every outcome, so
a join whose row could outgrow 400 KB was refused at once (``flows/join_limits.py``,
about 1,400 typical cirrus ids). Now the join row holds counts, each member's
outcome is on its own membership row, and the member list is spread over chunk
rows of at most ``join_chunk_size`` (100) members in their key form (at most
2,048 bytes each). These tests hold each of those rows to its bound, sized as
DynamoDB sizes them (:func:`dependency_tracker.core.limits.item_size`), and check
that the table takes the largest chunk row under the strict layer.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

import pytest
from pydantic import ValidationError

from dependency_tracker.core.enums import DependencyError, PayloadState
from dependency_tracker.core.limits import (
    DDB_MAX_ITEM_BYTES,
    DDB_MAX_PARTITION_KEY_BYTES,
    KIB,
    item_size,
    utf8_size,
)
from dependency_tracker.core.settings import DEFAULT_CYCLE_DEPTH, Settings
from dependency_tracker.joins.rows import (
    JOIN_COUNT_SHARDS,
    ChunkItem,
    CountShardItem,
    JoinItem,
    count_partition_for,
)
from dependency_tracker.joins.store import JoinStore
from dependency_tracker.table.dependency_table import MAX_REFUSAL_CAUSE_CHARS
from dependency_tracker.table.items import JOIN_ROW_KEY, join_partition_for
from dependency_tracker.table.keys import partition_key
from dependency_tracker_local.strict import strict_limits

if TYPE_CHECKING:
    from tests.conftest import Aws

NOW = datetime.now(UTC)
LATEST = datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC)
JOIN_ID = "j" * 200  # the longest join id a message may give
TOKEN = "t" * 2048  # the longest task token Step Functions hands out
PARENT = "arn:aws:states:us-east-1:123456789012:execution:deptrack-wait-for-join:" + "p" * 80
MANIFEST = "s3://deptrack-payloads/manifests/" + "0" * 64 + ".jsonl"
# The largest chunk the settings allow (the registration flow reads no more per chunk).
MAX_CHUNK = 100


def key_form_ids(count: int, length: int) -> list[str]:
    """``count`` distinct member ids of ``length`` UTF-8 bytes."""
    return [f"c/workflow-pass/{index:06d}-".ljust(length, "m") for index in range(count)]


def registered_row(members: int, member_bytes: int) -> JoinItem:
    """The join row once registration is over: ``members`` members read from a manifest."""
    chunks = -(-members // MAX_CHUNK)
    (longest,) = key_form_ids(1, member_bytes)
    return JoinItem(
        payload_id=join_partition_for(JOIN_ID),
        waiter_id=JOIN_ROW_KEY,
        join_id=JOIN_ID,
        task_token=TOKEN,
        quorum=members - 1,
        total=members,
        registered=members,
        chunks=chunks,
        registered_chunks=chunks,
        duplicates=members,
        source=MANIFEST,
        parent_execution=PARENT,
        waiter_payload_id=longest,
        created_at=NOW,
        updated_at=NOW,
    )


def decided(row: JoinItem, winner: str) -> JoinItem:
    """``row`` decided, its parent told: every attribute the flows add, at its longest."""
    return row.model_copy(
        update={
            "workflow_state": PayloadState.SUCCEEDED,
            "error": max((str(error) for error in DependencyError), key=len),
            "winner": winner,
            "resolved_at": LATEST,
            "updated_at": LATEST,
            "notified_at": LATEST,
            "notify_outcome": "PARENT_GONE:TaskDoesNotExist",
            "expiration_time": 99_999_999_999,
        }
    )


def test_a_join_row_stays_far_under_16_kb_whatever_the_member_count() -> None:
    # GIVEN the row the registration flow leaves for 100,000 members with 2 KB ids,
    # and the same join decided with a 2 KB winner and its parent told
    (winner,) = key_form_ids(1, DDB_MAX_PARTITION_KEY_BYTES)
    large = decided(registered_row(100_000, DDB_MAX_PARTITION_KEY_BYTES), winner)
    small = decided(registered_row(10, DDB_MAX_PARTITION_KEY_BYTES), winner)
    # THEN no member list is on it, it is far under 16 KB, and 10 members cost the
    # same but for the digits of its counts
    item = large.to_item()
    assert not {"members", "succeeded", "failed", "failures"} & set(item)
    assert item_size(item) < 16 * KIB
    assert 0 <= item_size(item) - item_size(small.to_item()) <= 16


def test_a_refused_join_row_stays_far_under_the_item_limit() -> None:
    # GIVEN a join refused with the longest cause kept (4-byte characters), and one
    # refused with DependencyCycle over a cycle of the default depth of 2 KB ids
    (long_id,) = key_form_ids(1, 100_000)
    base = registered_row(100_000, DDB_MAX_PARTITION_KEY_BYTES)
    invalid = decided(base, "").model_copy(
        update={"winner": None, "cause": "😀" * MAX_REFUSAL_CAUSE_CHARS}
    )
    cycle = [partition_key(long_id + str(n)) for n in range(DEFAULT_CYCLE_DEPTH + 1)]
    refused = decided(base, "").model_copy(update={"winner": None, "cycle": cycle})
    # THEN either row is a fraction of DynamoDB's 400 KB
    for row in (invalid, refused):
        assert item_size(row.to_item()) < DDB_MAX_ITEM_BYTES // 4


@pytest.mark.parametrize("member_bytes", [DDB_MAX_PARTITION_KEY_BYTES, 100_000])
def test_a_chunk_row_of_the_largest_chunk_stays_under_400_kb(member_bytes: int) -> None:
    # GIVEN a chunk of 100 members whose ids take their longest key form (2,048 bytes),
    # whether the ids are that long or much longer (then derived)
    members = key_form_ids(MAX_CHUNK, member_bytes)
    chunk = ChunkItem.of(JOIN_ID, 99_999_999, members, [], LATEST)
    assert {utf8_size(key) for key in chunk.members} == {DDB_MAX_PARTITION_KEY_BYTES}
    # THEN the row is under 400 KB, with room for its expiry and key attributes
    assert item_size(chunk.to_item()) < DDB_MAX_ITEM_BYTES - 4 * KIB
    # AND it is no larger when some of its entries are duplicates (each entry is one or
    # the other: a chunk lists at most join_chunk_size of them in all)
    split = ChunkItem.of(JOIN_ID, 0, members[:50], members[50:], LATEST)
    assert item_size(split.to_item()) <= item_size(chunk.to_item())


def test_the_chunk_size_the_bound_relies_on_is_at_most_100() -> None:
    fields = {"state_table": "s", "dependency_table": "d", "workflow_arn_prefix": "arn:"}
    assert Settings.model_validate(fields).join_chunk_size == MAX_CHUNK
    with pytest.raises(ValidationError):
        Settings.model_validate({**fields, "join_chunk_size": MAX_CHUNK + 1})


def test_count_shards_are_tiny() -> None:
    shard = CountShardItem(
        payload_id=count_partition_for(JOIN_ID, JOIN_COUNT_SHARDS - 1),
        join_id=JOIN_ID,
        succeeded=10**12,
        failed=10**12,
    )
    assert item_size(shard.to_item()) < 1 * KIB


def test_the_table_takes_the_largest_chunk_row(aws: Aws) -> None:
    # GIVEN a join and a chunk of 100 members with 100 KB ids, under the strict layer
    # (DynamoDB's 400 KB item limit and key limits, as AWS applies them)
    with strict_limits():
        joins = JoinStore(aws.dynamodb, aws.dependencies.table_name)
        chunk_rows = aws.chunk_rows
        fresh = JoinItem(
            payload_id=join_partition_for(JOIN_ID),
            waiter_id=JOIN_ROW_KEY,
            join_id=JOIN_ID,
            task_token=TOKEN,
            source=MANIFEST,
            created_at=NOW,
            updated_at=NOW,
        )
        assert joins.create(fresh)
        members = key_form_ids(MAX_CHUNK, 100_000)
        # WHEN the chunk is recorded (the chunk row and the join's counts, one transaction)
        assert chunk_rows.finish_chunk(ChunkItem.of(JOIN_ID, 0, members, [], NOW), chunks=1)
        # THEN it is stored whole, and the join row counts it
        stored = chunk_rows.chunk(JOIN_ID, 0)
        assert stored is not None
        assert stored.members == [partition_key(member) for member in members]
        row = joins.get(JOIN_ID)
        assert row is not None
        assert (row.registered, row.registered_chunks, row.chunks) == (MAX_CHUNK, 1, 1)
        assert row.known_total == MAX_CHUNK
