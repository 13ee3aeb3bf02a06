"""Stores with payload ids past DynamoDB's key limits: every call finds the same row.

The ``aws`` fixture runs with the strict layer, so a key over 2,048 bytes (partition)
or 1,024 bytes (sort) on any call is refused as AWS refuses it.
"""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from dependency_tracker.core.enums import DependencyError, PayloadState, utcnow
from dependency_tracker.core.limits import DDB_MAX_PARTITION_KEY_BYTES, utf8_size
from dependency_tracker.cycles.edges import WaitEdges
from dependency_tracker.cycles.guard import CycleGuard
from dependency_tracker.joins.registration_rows import Registration
from dependency_tracker.joins.rows import ChunkItem, JoinItem
from dependency_tracker.joins.store import JoinStore
from dependency_tracker.payloads.model import ProcessPayload
from dependency_tracker.table.dependency_table import (
    MAX_RECORDED_CYCLE_BYTES,
    MAX_REFUSAL_CAUSE_CHARS,
)
from dependency_tracker.table.items import (
    JOIN_ROW_KEY,
    MembershipItem,
    Resolution,
    WaiterItem,
    join_partition_for,
    membership_id_for,
    waiter_id_for,
)
from dependency_tracker.table.keys import partition_key
from dependency_tracker_local.strict import strict_limits
from tests.conftest import DEPENDENCY_TABLE, STATE_TABLE, Aws


def long_id(size: int, tail: str = "") -> str:
    """A cirrus-shaped id of about ``size`` UTF-8 bytes, with multi-byte characters."""
    head = "sentinel-2-l2a/workflow-mosaic/"
    items = "/".join(f"S2B_T31ÜFJ_{n:06d}" for n in range(size // 18 + 1))
    text = (head + items).encode("utf-8")[:size].decode("utf-8", errors="ignore")
    return text + tail


SIZES = [3_000, 100_000]


@pytest.fixture(params=SIZES, ids=lambda size: f"{size}B")
def pid(request: pytest.FixtureRequest) -> str:
    text = long_id(request.param)
    assert utf8_size(text) > DDB_MAX_PARTITION_KEY_BYTES
    return text


def waiter(payload_id: str, token: str, waiter_payload_id: str | None = None) -> WaiterItem:
    now = utcnow()
    return WaiterItem(
        payload_id=payload_id,
        waiter_id=waiter_id_for(token),
        task_token=token,
        waiter_payload_id=waiter_payload_id,
        created_at=now,
        updated_at=now,
    )


def test_the_raw_id_is_refused_as_a_key(aws: Aws, pid: str) -> None:
    # What every call below would hit without the derivation (as AWS: the strict layer).
    with strict_limits(), pytest.raises(ClientError, match="ValidationException"):
        aws.dynamodb.get_item(TableName=STATE_TABLE, Key={"payload_id": {"S": pid}})


def test_state_claim_get_batch_get_and_final(aws: Aws, pid: str) -> None:
    payload = ProcessPayload.model_validate({"id": pid, "process": [{"workflow": "pass"}]})
    claimed = aws.states.claim(payload, None, message_id="m1")
    assert claimed.payload_id == pid
    aws.states.set_processing(pid, 1, "arn:e1")
    stored = aws.states.get(pid)
    assert stored is not None
    assert (stored.payload_id, stored.state) == (pid, PayloadState.PROCESSING)
    found = aws.states.batch_get([pid, "short/one"])
    assert list(found) == [pid]
    final = aws.states.set_final(
        payload_id=pid,
        workflow="pass",
        state=PayloadState.SUCCEEDED,
        execution_arn="arn:e1",
        attempt=1,
    )
    assert (final.payload_id, final.state) == (pid, PayloadState.SUCCEEDED)
    # the row on disk: derived key, whole id beside it
    raw = aws.dynamodb.scan(TableName=STATE_TABLE)["Items"]
    assert [item["payload_id"]["S"] for item in raw] == [partition_key(pid)]
    assert raw[0]["full_payload_id"]["S"] == pid


def test_a_final_state_that_creates_the_item_keeps_the_whole_id(aws: Aws, pid: str) -> None:
    # An execution the tracker did not start: set_final's UpdateItem creates the item.
    item = aws.states.set_final(
        payload_id=pid,
        workflow="pass",
        state=PayloadState.FAILED,
        execution_arn="arn:foreign",
        attempt=None,
        error="E",
    )
    assert item.payload_id == pid
    stored = aws.states.get(pid)
    assert stored is not None
    assert stored.payload_id == pid


def test_waiters_register_query_resolve_and_notify(aws: Aws, pid: str) -> None:
    rows = [waiter(pid, f"t{n}", waiter_payload_id=pid + "-parent") for n in range(3)]
    for row in rows:
        assert aws.dependencies.register(row) is True
    assert aws.dependencies.register(rows[0]) is False  # a duplicate delivery
    # another long id with the same first 2 KB is another payload
    twin = pid[:-1] + ("#" if pid[-1] != "#" else "$")
    aws.dependencies.register(waiter(twin, "t0"))
    got = aws.dependencies.get(pid, rows[0].waiter_id)
    assert got is not None
    assert (got.payload_id, got.waiter_payload_id) == (pid, pid + "-parent")
    assert sorted(r.task_token for r in aws.dependencies.waiters(pid)) == ["t0", "t1", "t2"]
    assert sorted(w for page in aws.dependencies.pending_ids(pid) for w in page) == sorted(
        r.waiter_id for r in rows
    )
    first = Resolution(state=PayloadState.FAILED, execution_arn="arn:e", error="E")
    assert aws.dependencies.resolve(pid, rows[0].waiter_id, first) is True
    resolved = aws.dependencies.resolve_all(pid, Resolution(state=PayloadState.SUCCEEDED))
    assert resolved == 2
    states = sorted(r.workflow_state for r in aws.dependencies.waiters(pid))
    assert states == [PayloadState.FAILED, PayloadState.SUCCEEDED, PayloadState.SUCCEEDED]
    twin_row = aws.dependencies.get(twin, waiter_id_for("t0"))
    assert twin_row is not None
    assert twin_row.workflow_state is PayloadState.PROCESSING
    assert aws.dependencies.mark_notified(
        pid, rows[0].waiter_id, outcome="SENT:FAILED", retention_days=1
    )
    assert not aws.dependencies.refuse(pid, rows[1].waiter_id, DependencyError.CYCLE, "c")


def test_scans_show_whole_ids(aws: Aws, pid: str) -> None:
    aws.dependencies.register(waiter(pid, "t0"))
    (page,) = list(aws.dependencies.scan_pages())
    assert [row.payload_id for row in page] == [pid]


def test_join_with_a_long_member(aws: Aws, pid: str) -> None:
    # Under the strict layer (on whatever DEPTRACK_STRICT says): any raw long key is refused.
    with strict_limits():
        now = utcnow()
        joins = JoinStore(aws.dynamodb, DEPENDENCY_TABLE)
        chunk_rows = aws.chunk_rows
        assert joins.create(
            JoinItem(
                payload_id=join_partition_for("mosaic"),
                waiter_id=JOIN_ROW_KEY,
                join_id="mosaic",
                task_token="tok",
                quorum=2,
                created_at=now,
                updated_at=now,
            )
        )

        def member(payload_id: str, chunk: int) -> MembershipItem:
            return MembershipItem(
                payload_id=payload_id,
                waiter_id=membership_id_for("mosaic"),
                join_id="mosaic",
                chunk=chunk,
                created_at=now,
                updated_at=now,
            )

        # the first chunk registers both members; a second one names the long one again
        long_row = member(pid, 0)
        assert chunk_rows.register_members([long_row, member("short", 0)]) == [Registration.NEW] * 2
        assert chunk_rows.register_members([long_row]) == [Registration.OWN]  # a redelivery
        first = ChunkItem.of("mosaic", 0, [pid, "short"], [], now)
        assert first.members == [partition_key(pid), "short"]
        assert chunk_rows.finish_chunk(first, chunks=None)
        assert chunk_rows.register_members([member(pid, 1)]) == [Registration.DUPLICATE]
        assert chunk_rows.finish_chunk(ChunkItem.of("mosaic", 1, [], [pid], now), chunks=2)
        # the payload's rows show the membership whole, not the join's bookkeeping
        (row,) = list(aws.dependencies.rows(pid))
        assert isinstance(row, MembershipItem)
        assert (row.payload_id, row.chunk) == (pid, 0)
        # the member fails: its outcome is counted once, whatever the redeliveries
        failed = Resolution(state=PayloadState.FAILED, error="Boom")
        assert aws.dependencies.resolve(pid, long_row.waiter_id, failed)
        assert joins.count(long_row, failed, retention_days=1)
        assert not joins.count(long_row, failed, retention_days=1)
        join, succeeded, failed_count = joins.read("mosaic")
        assert join is not None
        assert (join.registered, join.duplicates, join.known_total) == (2, 1, 2)
        assert (succeeded, failed_count) == (0, 1)
        counted = aws.dependencies.get_row(pid, long_row.waiter_id)
        assert counted is not None
        assert counted.notify_outcome == "COUNTED:FAILED"
        # the summary's member list finds every membership row and gives back whole ids
        members, duplicates = joins.members("mosaic")
        assert [(m.payload_id, m.state, m.error) for m in members] == [
            (pid, PayloadState.FAILED, "Boom"),
            ("short", None, None),
        ]
        assert duplicates == [pid]
        assert join.decision(succeeded, failed_count) == (
            PayloadState.FAILED,
            DependencyError.QUORUM_UNREACHABLE,
        )
        assert joins.decide_join(
            "mosaic", PayloadState.FAILED, error=DependencyError.QUORUM_UNREACHABLE
        )
        stored = aws.joins.get("mosaic")
        assert stored is not None
        assert stored.workflow_state is PayloadState.FAILED


def test_edges_add_follow_and_refuse(aws: Aws, pid: str) -> None:
    edges = WaitEdges(aws.dynamodb, DEPENDENCY_TABLE, retention_days=1)
    other = long_id(5_000, tail="/other")
    assert edges.add(pid, [other, "short"], via=waiter_id_for("t"), waiter_attempt=1) is None
    assert sorted(edges.targets(pid, attempt=1)) == sorted([other, "short"])
    edges.refuse(pid, [other], via=waiter_id_for("t"), cycle=[pid, other, pid])
    assert edges.targets(pid) == ["short"]
    # a redelivery gets the recorded cycle back whole (the row may keep key forms)
    assert edges.add(pid, [other], via=waiter_id_for("t")) == [pid, other, pid]


def test_cycle_check_between_long_ids(aws: Aws, pid: str) -> None:
    guard = CycleGuard(
        states=aws.states,
        edges=WaitEdges(aws.dynamodb, DEPENDENCY_TABLE, retention_days=1),
        max_length=5,
    )
    other = long_id(4_000, tail="/b")
    assert guard.admit(pid, [other], via=waiter_id_for("a")) is None
    cycle = guard.admit(other, [pid], via=waiter_id_for("b"))
    assert cycle is not None
    assert cycle.path == (other, pid, other)


def test_a_refusal_naming_long_ids_fits_the_row(aws: Aws) -> None:
    # A cycle of three 100,000-byte ids: the whole cause would push the row past 400 KB.
    a, b = long_id(100_000, tail="/a"), long_id(100_000, tail="/b")
    aws.dependencies.register(waiter(a, "t", waiter_payload_id=b))
    cause = f"waiting would close a dependency cycle: {b} -> {a} -> {b}"
    assert aws.dependencies.refuse(a, waiter_id_for("t"), DependencyError.CYCLE, cause)
    row = aws.dependencies.get(a, waiter_id_for("t"))
    assert row is not None
    assert row.cause is not None
    assert len(row.cause) == MAX_REFUSAL_CAUSE_CHARS
    assert row.cause.endswith("...[truncated]")
    assert cause.startswith(row.cause.removesuffix("...[truncated]"))


def test_a_join_refused_over_long_ids_records_them_within_a_bound(aws: Aws, pid: str) -> None:
    now = utcnow()
    aws.dependencies.register(
        JoinItem(
            payload_id=join_partition_for("ring"),
            waiter_id=JOIN_ROW_KEY,
            join_id="ring",
            task_token="tok",
            quorum=1,
            total=1,
            registered=1,
            created_at=now,
            updated_at=now,
        )
    )
    cycle = [pid, "short", pid]
    assert JoinStore(aws.dynamodb, DEPENDENCY_TABLE).decide_join(
        "ring", PayloadState.FAILED, error=DependencyError.CYCLE, cycle=cycle
    )
    stored = aws.joins.get("ring")
    assert stored is not None
    # whole while the cycle fits MAX_RECORDED_CYCLE_BYTES, else in key form
    if utf8_size(pid) * 2 <= MAX_RECORDED_CYCLE_BYTES:
        assert stored.cycle == cycle
    else:
        assert stored.cycle == [partition_key(pid), "short", partition_key(pid)]
