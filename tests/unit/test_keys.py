"""Key derivation: any id fits DynamoDB's key limits, short ids keep their key."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dependency_tracker.core.enums import PayloadState, utcnow
from dependency_tracker.core.limits import (
    DDB_MAX_PARTITION_KEY_BYTES,
    DDB_MAX_SORT_KEY_BYTES,
    utf8_size,
)
from dependency_tracker.joins.messages import JOIN_ID_PATTERN
from dependency_tracker.joins.registration_rows import Registration
from dependency_tracker.joins.rows import ChunkItem, JoinItem
from dependency_tracker.joins.store import JoinStore
from dependency_tracker.table.items import (
    EdgeItem,
    MembershipItem,
    PayloadStateItem,
    Resolution,
    WaiterItem,
    edge_id_for,
    edge_partition_for,
    join_partition_for,
    key_attributes,
    membership_id_for,
    restore_keys,
    waiter_id_for,
)
from dependency_tracker.table.keys import HASH_MARK, is_derived, partition_key, sort_key, table_key
from dependency_tracker.table.rows import row_from_item

if TYPE_CHECKING:
    from tests.conftest import Aws

# Short and long, ASCII and not: 1- to 4-byte characters, so cuts land inside characters.
ids = st.one_of(
    st.text(min_size=1, max_size=50),
    st.text(min_size=300, max_size=3_000),
    st.text(alphabet="é€😀a/", min_size=500, max_size=2_000),
    st.integers(min_value=1, max_value=6_000).map(lambda n: "x" * n),
)
LIMITS = (DDB_MAX_PARTITION_KEY_BYTES, DDB_MAX_SORT_KEY_BYTES)


@settings(max_examples=300, deadline=None)
@given(text=ids)
def test_any_id_gives_a_key_within_each_limit(text: str) -> None:
    for limit in LIMITS:
        key = table_key(text, limit)
        assert 1 <= utf8_size(key) <= limit
        key.encode("utf-8")  # valid UTF-8: no character was cut in half


@settings(max_examples=300, deadline=None)
@given(text=ids)
def test_ids_within_the_limit_keep_their_key_and_longer_ones_are_derived(text: str) -> None:
    for limit in LIMITS:
        key = table_key(text, limit)
        if utf8_size(text) <= limit:
            assert key == text
        else:
            digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
            assert key.endswith(f"{HASH_MARK}{digest}")
            assert is_derived(key)
            # readable: the key starts with as much of the id as fits
            prefix = key.removesuffix(f"{HASH_MARK}{digest}")
            assert text.startswith(prefix)
            assert utf8_size(prefix) >= limit - len(HASH_MARK) - 64 - 3


@settings(max_examples=200, deadline=None)
@given(a=ids, b=ids)
def test_different_ids_give_different_keys(a: str, b: str) -> None:
    for limit in LIMITS:
        assert (table_key(a, limit) == table_key(b, limit)) == (a == b)


def test_ids_sharing_a_long_prefix_stay_apart() -> None:
    # Mosaic ids differ only at the end: the hash tells them apart.
    base = "sentinel-2-l2a/workflow-mosaic/" + "/".join(f"S2B_{n:05d}" for n in range(300))
    keys = {partition_key(f"{base}/{tail}") for tail in ("a", "b", "c")}
    assert len(keys) == 3


@pytest.mark.parametrize(
    ("limit", "derive"),
    [(DDB_MAX_PARTITION_KEY_BYTES, partition_key), (DDB_MAX_SORT_KEY_BYTES, sort_key)],
)
def test_the_bound_is_the_limit_itself(limit: int, derive: object) -> None:
    assert callable(derive)
    at = "a" * limit
    over = "a" * (limit + 1)
    assert derive(at) == at
    assert derive(over) != over
    assert utf8_size(derive(over)) <= limit
    # counted in UTF-8 bytes, not characters: 3-byte characters pass the limit sooner
    wide = "€" * (limit // 3 + 1)
    assert len(wide) < limit < utf8_size(wide)
    assert derive(wide) != wide
    assert utf8_size(derive(wide)) <= limit


def test_a_limit_without_room_for_the_digest_is_refused() -> None:
    with pytest.raises(ValueError, match="no room"):
        table_key("x" * 100, 50)


def test_the_public_join_row_key_is_unchanged() -> None:
    # The contract: a join's row is at payload_id = "join#<join_id>", waiter_id = "join",
    # for every join id the message pattern admits (at most 200 characters).
    longest = "j" * 200
    assert JOIN_ID_PATTERN.endswith("{1,200}$")
    assert partition_key(join_partition_for(longest)) == f"join#{longest}"
    assert sort_key(membership_id_for(longest)) == f"join#{longest}"
    assert sort_key(edge_id_for(membership_id_for(longest), "x" * 100_000)) == edge_id_for(
        membership_id_for(longest), "x" * 100_000
    )
    assert sort_key(edge_id_for(waiter_id_for("t" * 8192), "p")) == edge_id_for(
        waiter_id_for("t" * 8192), "p"
    )


def test_items_keep_the_whole_id_beside_a_derived_key() -> None:
    now = utcnow()
    long_id = "c/workflow-w/" + "é" * 2_000
    item = PayloadStateItem(
        payload_id=long_id,
        state=PayloadState.PROCESSING,
        workflow="w",
        created_at=now,
        updated_at=now,
    ).to_item()
    assert item["payload_id"] == {"S": partition_key(long_id)}
    assert item["full_payload_id"] == {"S": long_id}
    assert PayloadStateItem.from_item(item).payload_id == long_id
    short = PayloadStateItem(
        payload_id="c/workflow-w/a",
        state=PayloadState.PROCESSING,
        workflow="w",
        created_at=now,
        updated_at=now,
    ).to_item()
    assert short["payload_id"] == {"S": "c/workflow-w/a"}
    assert "full_payload_id" not in short


def test_rows_and_edges_round_trip_with_long_ids() -> None:
    now = utcnow()
    long_id = "x" * 3_000
    waiter = WaiterItem(
        payload_id=long_id,
        waiter_id=waiter_id_for("tok"),
        task_token="tok",
        waiter_payload_id=long_id + "-parent",
        created_at=now,
        updated_at=now,
    )
    item = waiter.to_item()
    assert utf8_size(item["payload_id"]["S"]) <= DDB_MAX_PARTITION_KEY_BYTES
    assert "full_waiter_id" not in item  # the token hash is short
    assert row_from_item(item) == waiter
    edge = EdgeItem(
        payload_id=edge_partition_for(long_id),
        waiter_id=edge_id_for(waiter.waiter_id, long_id),
        waiter_payload_id=long_id,
        depends_on=long_id,
        via=waiter.waiter_id,
        created_at=now,
        expiration_time=0,
    )
    edge_item = edge.to_item()
    # derived keys keep their kind's prefix: scans still tell edges apart
    assert edge_item["payload_id"]["S"].startswith("waits#")
    assert EdgeItem.from_item(edge_item) == edge


def test_a_long_sort_key_is_derived_and_restored() -> None:
    plain = {"payload_id": "p", "waiter_id": "w" * 5_000}
    key = key_attributes(**plain)
    assert key["payload_id"] == {"S": "p"}
    assert utf8_size(key["waiter_id"]["S"]) <= DDB_MAX_SORT_KEY_BYTES
    stored = {**{name: value["S"] for name, value in key.items()}, "full_waiter_id": "w" * 5_000}
    assert restore_keys(stored) == plain
    with pytest.raises(ValueError, match="not a key attribute"):
        key_attributes(state="x")


def test_a_join_with_long_member_ids_round_trips_through_its_store(aws: Aws) -> None:
    # Long member ids live in membership rows (derived key, whole id beside it) and in
    # chunk rows (key form); the summary's member list gives every whole id back.
    now = utcnow()
    over_name_limit = "m" * 70_000  # over the 64 KB a map key (attribute name) may be
    over_key_limit = "c/workflow-w/" + "é" * 1_100  # 2,213 bytes
    members = [over_name_limit, "short", over_key_limit]
    joins = JoinStore(aws.dynamodb, aws.dependencies.table_name)
    chunk_rows = aws.chunk_rows
    assert joins.create(
        JoinItem(
            payload_id=join_partition_for("j"),
            waiter_id="join",
            join_id="j",
            task_token="tok",
            quorum=1,
            created_at=now,
            updated_at=now,
        )
    )
    rows = [
        MembershipItem(
            payload_id=member,
            waiter_id=membership_id_for("j"),
            join_id="j",
            chunk=0,
            created_at=now,
            updated_at=now,
        )
        for member in members
    ]
    assert chunk_rows.register_members(rows) == [Registration.NEW] * 3
    chunk = ChunkItem.of("j", 0, members, [], now)
    assert [is_derived(key) for key in chunk.members] == [True, False, True]
    assert all(utf8_size(key) <= DDB_MAX_PARTITION_KEY_BYTES for key in chunk.members)
    assert chunk_rows.finish_chunk(chunk, chunks=1)
    failed = Resolution(state=PayloadState.FAILED, error="E")
    assert aws.dependencies.resolve(over_name_limit, membership_id_for("j"), failed)
    assert joins.count(rows[0], failed, retention_days=1)
    outcomes, duplicates = joins.members("j")
    assert [(m.payload_id, m.state, m.error) for m in outcomes] == [
        (over_name_limit, PayloadState.FAILED, "E"),
        ("short", None, None),
        (over_key_limit, None, None),
    ]
    assert duplicates == []
    assert joins.read("j")[1:] == (0, 1)


def test_a_lone_surrogate_does_not_break_the_derivation() -> None:
    # JSON admits "\ud800"; such an id is kept as before when short, and derived when long.
    short = "c/workflow-w/\ud800"
    assert partition_key(short) == short
    long = "x" * 1_974 + "\ud800" * 40
    key = partition_key(long)
    key.encode("utf-8")  # the prefix dropped the half character: the key is valid UTF-8
    assert is_derived(key)
    assert partition_key(long + "y") != key
