"""A join's members read back: the chunk rows' member lists and their membership rows' outcomes."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

from dependency_tracker.core.limits import DDB_MAX_BATCH_GET_KEYS
from dependency_tracker.core.threads import ContextExecutor
from dependency_tracker.joins.outputs import MemberOutcome
from dependency_tracker.joins.rows import ChunkItem
from dependency_tracker.table.items import (
    MEMBERSHIP_KEY_PREFIX,
    MembershipItem,
    join_partition_for,
    key_attributes,
    membership_id_for,
)
from dependency_tracker.table.keys import partition_key
from dependency_tracker.table.prefixes import CHUNK_KEY_PREFIX

if TYPE_CHECKING:
    from collections.abc import Iterator

    from dependency_tracker.joins.row_access import RowAccess


def member_outcomes(access: RowAccess, join_id: str) -> tuple[list[MemberOutcome], list[str]]:
    """Each member the chunk rows name, once, with its outcome (manifest order); duplicates.

    One ``Query`` page per ~1 MB of chunk rows, then one ``BatchGetItem`` per
    100 members: read once, when the decided join's summary is sent (its
    counts and lists both come from this read). A member whose row is not
    written yet, or not terminal, is pending.

    Every id is whole: the chunk rows list members and duplicates by their
    key form, and a key form is named by the member's membership row (which
    keeps the whole id), else by the chunk row's ``full_members``. Only a long
    member with neither (its row not written yet, and past the chunk's bound)
    keeps its key form.
    """
    keys: list[str] = []
    duplicates: list[str] = []
    seen: set[str] = set()
    names: dict[str, str] = {}
    for chunk in _chunks(access, join_id):
        # A chunk lists its members before it knows which are duplicates of another
        # chunk's: the first listing wins.
        keys.extend(key for key in chunk.members if key not in seen)
        seen.update(chunk.members)
        duplicates.extend(chunk.duplicates)
        names.update(chunk.names())
    found = _membership_rows(access, join_id, keys)
    names.update((key, row.payload_id) for key, row in found.items())
    outcomes = []
    for key in keys:
        row = found.get(key)
        if row is None:
            outcomes.append(MemberOutcome(payload_id=names.get(key, key)))
            continue
        done = row.workflow_state.is_terminal
        outcomes.append(
            MemberOutcome(
                payload_id=row.payload_id,
                state=row.workflow_state if done else None,
                error=row.error if done else None,
                ended_at=row.resolved_at if done else None,
            )
        )
    return outcomes, [names.get(key, key) for key in duplicates]


# Chunk rows per Query page when streaming: a page is then at most 1,000 members' keys.
CHUNKS_PER_PAGE = 10


def member_pages(
    access: RowAccess, join_id: str
) -> Iterator[list[tuple[str, MembershipItem | None]]]:
    """Each member the chunk rows name, once, with its membership row (None: not written yet).

    One page per chunk row, in manifest order (one ``BatchGetItem`` of at most 100
    keys each): what the results manifest streams, holding one chunk at a time.
    Members already listed are remembered by a 16-byte digest of their key, not
    the key (about 100 bytes a member, whatever the id's length), and chunk rows
    are read :data:`CHUNKS_PER_PAGE` at a time, not a 1 MB ``Query`` page.
    """
    seen: set[bytes] = set()
    for chunk in _chunks(access, join_id, limit=CHUNKS_PER_PAGE):
        keys = []
        for key in chunk.members:
            digest = hashlib.sha256(key.encode("utf-8")).digest()[:16]
            if digest not in seen:
                seen.add(digest)
                keys.append(key)
        if not keys:
            continue
        found = _membership_rows(access, join_id, keys)
        names = chunk.names()
        yield [
            (found[key].payload_id if key in found else names.get(key, key), found.get(key))
            for key in keys
        ]


def chunk_rows(access: RowAccess, chunk: ChunkItem) -> list[MembershipItem]:
    """The membership rows ``chunk`` wrote (not those of members another chunk listed first)."""
    rows = _membership_rows(access, chunk.join_id, chunk.members).values()
    return [row for row in rows if row.chunk == chunk.index]


def _membership_rows(access: RowAccess, join_id: str, keys: list[str]) -> dict[str, MembershipItem]:
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
        return list(access.batch_get(batch))

    with ContextExecutor(max_workers=access.concurrency) as pool:
        for items in pool.map(fetch, requests):
            for item in items:
                found[item["payload_id"]["S"]] = MembershipItem.from_item(item)
    return found


def chunk_indexes(access: RowAccess, join_id: str) -> list[int]:
    """The indexes of the join's chunk rows, read by key alone (a chunk row is up to 400 KB)."""
    partition = key_attributes(payload_id=join_partition_for(join_id))["payload_id"]["S"]
    prefix = len(CHUNK_KEY_PREFIX)
    return [
        int(item["waiter_id"]["S"][prefix:])
        for item in access.rows_under(partition, CHUNK_KEY_PREFIX, projection="waiter_id")
    ]


def _chunks(access: RowAccess, join_id: str, limit: int | None = None) -> Iterator[ChunkItem]:
    """The join's chunk rows in order; ``limit``: at most that many per ``Query`` page."""
    partition = key_attributes(payload_id=join_partition_for(join_id))["payload_id"]["S"]
    for item in access.rows_under(partition, CHUNK_KEY_PREFIX, limit=limit):
        yield ChunkItem.from_item(item)


def memberships_of(access: RowAccess, payload_id: str) -> Iterator[MembershipItem]:
    """Every join's membership row under ``payload_id``: one consistent ``Query`` per page."""
    for item in access.rows_under(partition_key(payload_id), MEMBERSHIP_KEY_PREFIX):
        yield MembershipItem.from_item(item)
