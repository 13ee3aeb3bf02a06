"""A join's rows in the dependency table: its header, count shards and registration chunks.

A join is one task token waiting on k of n member payloads. Its rows keep a
constant size whatever n is:

* the **join row** (``join#<join_id>`` / ``join``): the token, the quorum, how
  many members are registered, and the decision once made;
* **count shards** (``join#<join_id>#counts#<k>`` / ``counts``,
  :data:`JOIN_COUNT_SHARDS` of them, each its own partition): how many members
  succeeded and failed, added to once per member in the same transaction that
  marks the member's membership row counted;
* **chunk rows** (``join#<join_id>`` / ``chunk#<index>``): written once per
  registered chunk of at most ``join_chunk_size`` members, naming them; with the
  membership rows (one per member, under the member's own partition) they are
  the record of who belongs and how each ended.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from enum import StrEnum, unique
from typing import Any, Self

from pydantic import BaseModel, Field

from dependency_tracker.core.enums import DependencyError, PayloadState
from dependency_tracker.core.limits import (
    DDB_MAX_ITEM_BYTES,
    DDB_MAX_PARTITION_KEY_BYTES,
    KIB,
    utf8_size,
)
from dependency_tracker.core.settings import MAX_JOIN_CHUNK_SIZE
from dependency_tracker.core.tokens import token_hash
from dependency_tracker.table import rows as table_rows
from dependency_tracker.table.items import (
    DependencyRow,
    MembershipItem,
    TableItem,
    WaiterItem,
    join_partition_for,
)
from dependency_tracker.table.keys import partition_key
from dependency_tracker.table.prefixes import (
    CHUNK_KEY_PREFIX,
    COUNT_PARTITION_MARK,
    COUNT_SHARD_KEY,
    JOIN_ROW_KEY,
)

# Count shards per join. Counting a member is a transaction of two items (its
# membership row and one shard), 2 write units per item on AWS; a partition takes
# 1,000 write units a second, so one shard counts 500 members a second and four
# count 2,000 (docs/performance.md, "Joins at scale").
JOIN_COUNT_SHARDS = 4
# Task tokens one join row holds: its parent's first send and the sends its Retry made
# (each token up to 2,048 characters: the row stays far below DynamoDB's 400 KB).
MAX_JOIN_TOKENS = 25
# Successes a join with a deadline needs at the deadline when ``min_succeeded`` is not given.
DEFAULT_MIN_SUCCEEDED = 1


@unique
class ParentGone(StrEnum):
    """What happens to a join's members when its parent is gone (``join.on_parent_gone``)."""

    KEEP = "keep"  # members run on (the default)
    CANCEL = "cancel"  # members nobody else waits on are stopped (joins/cancellation.py)


# The whole ids a chunk row keeps beside its member keys take what is left of DynamoDB's
# 400 KB item once the keys and the duplicates' keys recording the chunk may add (at
# most one per entry of the chunk, MAX_JOIN_CHUNK_SIZE entries of at most 2 KiB) are
# counted, less this margin for the other attributes and their names.
CHUNK_ROW_MARGIN_BYTES = 8 * KIB


def count_partition_for(join_id: str, shard: int) -> str:
    """Partition key of one of a join's count shards."""
    return f"{join_partition_for(join_id)}{COUNT_PARTITION_MARK}{shard}"


def shard_of(member: str) -> int:
    """The count shard a member's outcome is added to (stable, spread by hash)."""
    digest = hashlib.sha256(partition_key(member).encode("utf-8")).digest()
    return int.from_bytes(digest[:4], "big") % JOIN_COUNT_SHARDS


def chunk_id_for(index: int) -> str:
    """Sort key of a join's registration chunk (zero-padded: they sort in order)."""
    return f"{CHUNK_KEY_PREFIX}{index:08d}"


class JoinCounts(BaseModel):
    """How many members of a join succeeded, failed and are pending."""

    succeeded: int
    failed: int
    pending: int


class JoinItem(DependencyRow):
    """One task token waiting on k of n payloads: the join's own row, of constant size.

    ``total`` is known once every member is registered (at once for an inline
    list of payloads, after the manifest's last chunk otherwise); until then a
    decision is taken only where it cannot depend on members not read yet.
    """

    join_id: str
    task_token: str
    quorum: int | None = None  # k; None: every member must succeed
    total: int | None = None  # distinct members, once all are registered
    registered: int = 0  # distinct members registered so far
    chunks: int | None = None  # chunks of the member list, once its end was read
    registered_chunks: int = 0
    duplicates: int = 0  # entries naming a member listed before
    source: str | None = None  # where the members are read from (a manifest url)
    source_etag: str | None = None  # the version of ``source`` the join reads, and only it
    source_version: str | None = None
    winner: str | None = None
    parent_execution: str | None = None
    waiter_payload_id: str | None = None
    cycle: list[str] | None = None  # set when the join was refused with DependencyCycle
    # The same wait sent again by its own parent execution (a Retry of the send): each
    # later token by its hash. Every token is answered, once; a closed one refuses harmlessly.
    retry_tokens: dict[str, str] = Field(default_factory=dict)
    # Token hash -> how that token was answered (SENT:<state>, PARENT_GONE:<code>, RELEASED:..).
    answered: dict[str, str] = Field(default_factory=dict)
    # An inline member list's digest: with the quorum and the parent, what makes a send "the
    # same wait" (a manifest is named by its url and ETag instead).
    members_digest: str | None = None
    # Set by an operator's release while no token of the join is left unanswered.
    released_at: datetime | None = None
    # Member outcomes taken back for a rerun (joins/reopening.py); a decision holds only
    # for the count it read, so a take-back between its read and its write refuses it.
    reopened: int = 0
    # The deadline (joins/deadlines.py): when the join is decided with what has succeeded,
    # the fewest successes it may end with, and whether the deadline decided it.
    deadline_at: datetime | None = None
    min_succeeded: int | None = None
    decided_by: str | None = None
    # Keys of the deadlines index while undecided (sparse: a decision removes them).
    deadline_shard: str | None = None
    deadline_epoch: int | None = None
    # Set once by the writer of the final results manifest (joins/results.py).
    results_final_at: datetime | None = None
    # "cancel": once the parent is gone (gone_at, gone_cause), the members nobody else
    # waits on are stopped (joins/cancellation.py); None or "keep": they run on.
    on_parent_gone: ParentGone | None = None
    gone_at: datetime | None = None
    gone_cause: str | None = None

    def tokens(self) -> dict[str, str]:
        """Every task token the join answers, by hash: the first send's, then its retries'."""
        return {token_hash(self.task_token): self.task_token} | self.retry_tokens

    def holds(self, token: str) -> bool:
        """Whether ``token`` is one of the join's own (a redelivery of a send it took)."""
        return token_hash(token) in self.tokens()

    def unanswered(self) -> dict[str, str]:
        """The tokens not answered yet (``notified_at`` means every token was)."""
        if self.notified_at is not None:
            return {}
        return {key: token for key, token in self.tokens().items() if key not in self.answered}

    @property
    def waiting(self) -> bool:
        """A parent still waits: undecided, not released since its last send, not gone."""
        return (
            self.workflow_state is PayloadState.PROCESSING
            and self.released_at is None
            and self.gone_at is None
        )

    @property
    def known_total(self) -> int | None:
        """n, once every chunk is registered; None while members are still being read."""
        if self.total is not None:
            return self.total
        if self.chunks is not None and self.registered_chunks >= self.chunks:
            return self.registered
        return None

    @property
    def needed(self) -> int | None:
        """k, when known: the quorum given, or n for an all-of join once n is known."""
        return self.quorum if self.quorum is not None else self.known_total

    def decision(
        self, succeeded: int, failed: int
    ) -> tuple[PayloadState, DependencyError | None] | None:
        """Whether the join is decided by these counts, and how.

        Only what no later member can change: ``k`` successes (``k`` given, or
        ``n`` known); one failure of an all-of join; more than ``n - k``
        failures once ``n`` is known; a quorum over ``n`` (``InvalidJoin``).
        """
        total, needed = self.known_total, self.needed
        if total is not None and needed is not None and needed > total:
            return PayloadState.FAILED, DependencyError.INVALID_JOIN
        if total is not None and self.least > total:
            return PayloadState.FAILED, DependencyError.INVALID_JOIN
        if needed is not None and succeeded >= needed:
            return PayloadState.SUCCEEDED, None
        if self.deadline_at is None and self.quorum is None and failed > 0:
            return PayloadState.FAILED, DependencyError.QUORUM_UNREACHABLE
        if total is not None and failed > total - self.least:
            return PayloadState.FAILED, DependencyError.QUORUM_UNREACHABLE
        return None

    @property
    def least(self) -> int:
        """The fewest successes the join can still end well with.

        k (or n) without a deadline; with one, ``min_succeeded`` (1 unless given),
        since the deadline succeeds with that many: the join fails early only once
        even those are out of reach.
        """
        if self.deadline_at is not None:
            return DEFAULT_MIN_SUCCEEDED if self.min_succeeded is None else self.min_succeeded
        needed = self.needed
        return 1 if needed is None else needed

    def at_deadline(self, succeeded: int) -> tuple[PayloadState, DependencyError | None]:
        """How the deadline decides the join with ``succeeded`` members succeeded."""
        if succeeded >= self.least:
            return PayloadState.SUCCEEDED, None
        return PayloadState.FAILED, DependencyError.DEADLINE_EXCEEDED

    def counts(self, succeeded: int, failed: int) -> JoinCounts:
        """Counts with ``pending`` = registered (or n) minus those that ended."""
        base = self.known_total if self.known_total is not None else self.registered
        return JoinCounts(
            succeeded=succeeded, failed=failed, pending=max(0, base - succeeded - failed)
        )


class CountShardItem(TableItem):
    """One of a join's count shards: members of the join that ended, by outcome."""

    payload_id: str  # count_partition_for(join_id, shard)
    waiter_id: str = COUNT_SHARD_KEY
    join_id: str | None = None
    succeeded: int = 0
    failed: int = 0


class ChunkItem(TableItem):
    """A chunk of a join's members: listed before they are registered, recorded once after.

    ``members`` are the partition keys of the chunk's distinct members in
    manifest order, written before any of them is registered (a member another
    chunk registered first may appear in both; readers keep the first listing);
    with the join id they name the membership rows. ``full_members`` are the
    whole ids of the members whose key is derived (ids over 2,048 bytes), in
    order, as many as the item has room for (:meth:`of`): they name a member
    whose membership row is not written yet. A member past the bound is named
    by its membership row alone. ``recorded`` is set, once, in
    the transaction that adds the chunk's members to the join's counts.
    """

    payload_id: str  # join_partition_for(join_id)
    waiter_id: str  # chunk_id_for(index)
    join_id: str
    index: int
    members: list[str] = Field(default_factory=list)
    full_members: list[str] = Field(default_factory=list)  # whole ids of long members
    duplicates: list[str] = Field(default_factory=list)  # key forms too
    recorded: bool = False  # its members are counted on the join row
    created_at: datetime

    @classmethod
    def of(
        cls, join_id: str, index: int, members: list[str], duplicates: list[str], now: datetime
    ) -> Self:
        """The chunk row for ``members`` (whole ids; stored in their key form).

        The whole ids of long members are kept beside the keys while the row,
        with the longest duplicates list recording the chunk may add to it,
        stays under 400 KB (:data:`CHUNK_ROW_MARGIN_BYTES` to spare).
        """
        keys = [partition_key(member) for member in members]
        room = (
            DDB_MAX_ITEM_BYTES
            - CHUNK_ROW_MARGIN_BYTES
            - MAX_JOIN_CHUNK_SIZE * (DDB_MAX_PARTITION_KEY_BYTES + 1)
            - sum(utf8_size(key) + 1 for key in keys)
        )
        full: list[str] = []
        for member, key in zip(members, keys, strict=True):
            if key == member:
                continue
            size = utf8_size(member) + 1
            if size > room:
                continue
            full.append(member)
            room -= size
        return cls(
            payload_id=join_partition_for(join_id),
            waiter_id=chunk_id_for(index),
            join_id=join_id,
            index=index,
            members=keys,
            full_members=full,
            duplicates=[partition_key(member) for member in duplicates],
            created_at=now,
        )

    def names(self) -> dict[str, str]:
        """Whole ids of the long members this row keeps, by their key form."""
        return {partition_key(member): member for member in self.full_members}


# Read back by the table's generic decoding (stream images, scans) as a JoinItem.
table_rows.register_row_kind(JOIN_ROW_KEY, JoinItem)

# Every row of the dependency table a reader acts on, by its kind: the table decodes
# each as one of these (table/rows.py), and the join row is a kind of the joins.
Row = WaiterItem | MembershipItem | JoinItem


def typed_row(row: DependencyRow) -> Row:
    """``row`` as the kind it is: what the table decodes is always one of :data:`Row`."""
    if isinstance(row, WaiterItem | MembershipItem | JoinItem):
        return row
    msg = f"not a dependency-table row kind: {type(row).__name__}"
    raise TypeError(msg)


def row_from_plain(plain: dict[str, Any]) -> Row:
    """The typed row for a deserialized dependency-table item (or stream image)."""
    return typed_row(table_rows.row_from_plain(plain))


def row_from_item(item: dict[str, Any]) -> Row:
    """The typed row for an attribute-value map."""
    return typed_row(table_rows.row_from_item(item))


__all__ = [
    "CHUNK_KEY_PREFIX",
    "CHUNK_ROW_MARGIN_BYTES",
    "COUNT_SHARD_KEY",
    "JOIN_COUNT_SHARDS",
    "JOIN_ROW_KEY",
    "MAX_JOIN_TOKENS",
    "ChunkItem",
    "CountShardItem",
    "JoinCounts",
    "JoinItem",
    "Row",
    "chunk_id_for",
    "count_partition_for",
    "row_from_item",
    "row_from_plain",
    "shard_of",
    "typed_row",
]
