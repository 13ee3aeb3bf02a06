"""Ids past the key limit reach people and parents whole, never in their key form.

The table keys an id over 2,048 bytes by a prefix and its SHA-256
(``dependency_tracker.table.keys``). Lists kept on one row (a chunk's members and
duplicates, a refused join's cycle, a refused wait edge's cycle) keep such ids in
that key form when they must; every output built from them (the join summary a
parent receives, a refusal's cause, the log line that names a cycle) names the
whole id wherever it is recorded.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest

from dependency_tracker.core.enums import DependencyError, PayloadState, utcnow
from dependency_tracker.core.limits import DDB_MAX_ITEM_BYTES, item_size, utf8_size
from dependency_tracker.cycles.edges import WaitEdges
from dependency_tracker.cycles.guard import CycleGuard
from dependency_tracker.joins.registration_rows import Registration
from dependency_tracker.joins.rows import ChunkItem, JoinItem
from dependency_tracker.joins.store import JoinStore
from dependency_tracker.joins.summary import read_summary
from dependency_tracker.table.dependency_table import DependencyTable
from dependency_tracker.table.items import (
    JOIN_ROW_KEY,
    MembershipItem,
    Resolution,
    join_partition_for,
    membership_id_for,
    waiter_id_for,
)
from dependency_tracker.table.keys import is_derived, partition_key
from dependency_tracker.waits.process import ProcessAction
from tests.conftest import payload, payload_id

if TYPE_CHECKING:
    from tests.conftest import Aws

JOIN = "mosaics"


def long_item(tag: str, size: int) -> str:
    """An item id making :func:`payload_id` about ``size`` bytes (past the key limit)."""
    return f"{tag}-".ljust(size, "x")


def long_id(tag: str, size: int = 3_000) -> str:
    text = payload_id(long_item(tag, size))
    assert partition_key(text) != text
    return text


def create_join(joins: JoinStore, *, quorum: int | None = None, waiter: str | None = None) -> None:
    now = utcnow()
    assert joins.create(
        JoinItem(
            payload_id=join_partition_for(JOIN),
            waiter_id=JOIN_ROW_KEY,
            join_id=JOIN,
            task_token="tok",
            quorum=quorum,
            waiter_payload_id=waiter,
            created_at=now,
            updated_at=now,
        )
    )


def membership(member: str, chunk: int) -> MembershipItem:
    now = utcnow()
    return MembershipItem(
        payload_id=member,
        waiter_id=membership_id_for(JOIN),
        join_id=JOIN,
        chunk=chunk,
        created_at=now,
        updated_at=now,
    )


def decided_summary(aws: Aws, joins: JoinStore) -> dict[str, Any]:
    join = aws.joins.get(JOIN)
    assert join is not None
    return dict(json.loads(read_summary(joins, join).to_json()))


def test_a_summary_names_long_duplicates_by_their_whole_ids(aws: Aws) -> None:
    # GIVEN a join over two long members and a short one, each long one listed twice:
    # once more in its own chunk, and once more in a later chunk
    a, b = long_id("a"), long_id("b")
    joins = JoinStore(aws.dynamodb, aws.dependencies.table_name)
    chunk_rows = aws.chunk_rows
    create_join(joins)
    now = utcnow()
    chunk_rows.start_chunk(ChunkItem.of(JOIN, 0, [a, b, "short"], [], now))
    rows = [membership(member, 0) for member in (a, b, "short")]
    assert chunk_rows.register_members(rows) == [Registration.NEW] * 3
    assert chunk_rows.finish_chunk(ChunkItem.of(JOIN, 0, [a, b, "short"], [a], now), chunks=None)
    chunk_rows.start_chunk(ChunkItem.of(JOIN, 1, [b], [], now))
    assert chunk_rows.register_members([membership(b, 1)]) == [Registration.DUPLICATE]
    assert chunk_rows.finish_chunk(ChunkItem.of(JOIN, 1, [], [b], now), chunks=2)
    # the chunk rows list them by key form, as before
    chunk = chunk_rows.chunk(JOIN, 0)
    assert chunk is not None
    assert chunk.duplicates == [partition_key(a)]
    # WHEN every member succeeds and the join's summary is read
    for row in rows:
        assert aws.dependencies.resolve(row.payload_id, row.waiter_id, succeeded())
    summary = decided_summary(aws, joins)
    # THEN its lists name the whole ids: the duplicates too
    assert summary["succeeded"] == [a, b, "short"]
    assert summary["duplicates"] == [a, b]


def succeeded() -> Resolution:
    return Resolution(state=PayloadState.SUCCEEDED)


def test_a_listed_member_without_its_row_yet_is_named_whole(aws: Aws) -> None:
    # GIVEN a chunk listed (its member list written) whose membership rows are not
    # written yet: a join decided by another chunk's members is summarised meanwhile
    a = long_id("pending")
    joins = JoinStore(aws.dynamodb, aws.dependencies.table_name)
    chunk_rows = aws.chunk_rows
    create_join(joins)
    chunk_rows.start_chunk(ChunkItem.of(JOIN, 0, [a, "short"], [], utcnow()))
    # WHEN its members are read for the summary
    members, duplicates = joins.members(JOIN)
    # THEN the long member is pending under its whole id, kept on the chunk row
    assert [(m.payload_id, m.state) for m in members] == [(a, None), ("short", None)]
    assert duplicates == []
    assert decided_summary(aws, joins)["pending"] == [a, "short"]


def test_the_chunk_row_keeps_whole_ids_only_within_its_bound() -> None:
    # GIVEN a chunk of 100 members whose ids are far past the key limit
    members = [payload_id(long_item(f"m{n:03d}", 30_000)) for n in range(100)]
    chunk = ChunkItem.of(JOIN, 0, members, [], utcnow())
    # THEN its whole ids stay out (no room), and so does one the row cannot hold
    assert chunk.full_members == []
    # AND with fewer members, as many whole ids as leave room for every duplicate key
    few = ChunkItem.of(JOIN, 0, members[:10], [], utcnow())
    assert 0 < len(few.full_members) < 10
    worst = few.model_copy(update={"duplicates": [partition_key(m) for m in members]})
    assert item_size(worst.to_item()) < DDB_MAX_ITEM_BYTES


@pytest.mark.parametrize("size", [3_000, 100_000])
def test_a_join_refused_over_a_cycle_of_long_ids_names_them_whole(aws: Aws, size: int) -> None:
    # GIVEN a join whose waiting payload and member are long ids, refused because the
    # member waits on the waiter (a cycle), with a third long payload between them
    waiter, member, between = long_id("w", size), long_id("m", size), long_id("x", size)
    joins = JoinStore(aws.dynamodb, aws.dependencies.table_name)
    chunk_rows = aws.chunk_rows
    create_join(joins, waiter=waiter)
    chunk_rows.start_chunk(ChunkItem.of(JOIN, 0, [member], [], utcnow()))
    assert chunk_rows.register_members([membership(member, 0)]) == [Registration.NEW]
    cycle = [waiter, member, between, waiter]
    assert joins.decide_join(JOIN, PayloadState.FAILED, error=DependencyError.CYCLE, cycle=cycle)
    # WHEN the parent's summary (the DependencyCycle cause) is read
    summary = decided_summary(aws, joins)
    stored = aws.joins.get(JOIN)
    assert stored is not None
    if size < 5_000:
        # THEN a cycle that fits the row's bound is recorded and sent whole
        assert stored.cycle == cycle
        assert summary["cycle"] == cycle
    else:
        # THEN past the bound the row keeps key forms, and the summary names every id
        # the join itself records (its waiter and its members) whole
        assert stored.cycle is not None
        assert all(is_derived(node) for node in stored.cycle)
        assert summary["cycle"] == [waiter, member, partition_key(between), waiter]
        assert utf8_size(json.dumps(stored.cycle)) < 16 * 1024


def test_a_refused_wait_edge_gives_its_cycle_back_whole(aws: Aws) -> None:
    # GIVEN A waits on B and B's wait on A was refused (its edges mark the cycle)
    a, b = long_id("a"), long_id("b")
    edges = WaitEdges(aws.dynamodb, aws.dependencies.table_name, retention_days=1)
    guard = CycleGuard(states=aws.states, edges=edges, max_length=5)
    assert guard.admit(a, [b], via=waiter_id_for("ta")) is None
    first = guard.admit(b, [a], via=waiter_id_for("tb"))
    assert first is not None
    assert first.path == (b, a, b)
    # WHEN the same wait is checked again (a redelivery: the recorded cycle, no search)
    again = guard.admit(b, [a], via=waiter_id_for("tb"))
    # THEN the cycle it gets back names the whole ids, as the first check did
    assert again is not None
    assert again.path == (b, a, b)
    assert again.describe() == f"{b} -> {a} -> {b}"


@pytest.mark.usefixtures("workflows")
def test_a_refusal_redelivered_after_a_crash_names_the_cycle_whole(
    aws: Aws, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN A (a long id) runs and waits on B (a long id)
    item_a, item_b = long_item("a", 3_000), long_item("b", 3_000)
    a, b = payload_id(item_a), payload_id(item_b)
    process = aws.app().process
    process.handle(process.parse(json.dumps(payload(item_a)), message_id="m-a"))
    b_waits = {**payload(item_b), "callback": {"task_token": "token-a", "waiter_payload_id": a}}
    process.handle(process.parse(json.dumps(b_waits), message_id="m-b"))
    # AND B asks to wait on A; the first delivery dies after marking the edges refused,
    # before the refusal reaches the waiter row
    body = json.dumps(
        {**payload(item_a), "callback": {"task_token": "token-b", "waiter_payload_id": b}}
    )
    real_refuse = DependencyTable.refuse

    def crash(*args: Any, **kwargs: Any) -> bool:
        raise RuntimeError("died before the refusal landed")

    monkeypatch.setattr(DependencyTable, "refuse", crash)
    with pytest.raises(RuntimeError, match="died"):
        process.handle(process.parse(body, message_id="m-2"))
    monkeypatch.setattr(DependencyTable, "refuse", real_refuse)
    # WHEN the message is delivered again
    assert process.handle(process.parse(body, message_id="m-2")) is ProcessAction.REFUSED
    # THEN the parent's cause names the cycle by its whole ids
    row = aws.dependencies.get(a, waiter_id_for("token-b"))
    assert row is not None
    assert row.cause == f"waiting would close a dependency cycle: {b} -> {a} -> {b}"
