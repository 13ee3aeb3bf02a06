"""A join's member list, read a chunk at a time from a position in it.

A join message names a manifest (``payloads_url``) or lists its members inline.
A manifest is read ``chunk_size`` entries at a time from a byte offset
(joins/manifest.py). An inline list longer than one chunk is written once to
the payload bucket, under a key of the join and its owner's token, and read
back the same way: every chunk after the first starts at a :class:`Position`.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

from dependency_tracker.core.errors import InvalidMessageError
from dependency_tracker.core.tokens import token_hash
from dependency_tracker.joins.manifest import ObjectVersion, manifest_text
from dependency_tracker.joins.messages import read_members

if TYPE_CHECKING:
    from dependency_tracker.joins.manifest import ManifestReader
    from dependency_tracker.joins.messages import JoinMessage
    from dependency_tracker.joins.rows import JoinItem
    from dependency_tracker.payloads.bucket import PayloadBucket
    from dependency_tracker.payloads.model import ProcessPayload

# Key prefix, in the payload bucket, of inline member lists too long for one chunk.
JOIN_MEMBERS_PREFIX = "joins"


class Position:
    """Where the rest of a member list is read from: a url, a byte offset and the version read."""

    def __init__(self, url: str, offset: int, version: ObjectVersion | None = None) -> None:
        self.url = url
        self.offset = offset
        self.version = version


def members_key(join_id: str, task_token: str) -> str:
    """Bucket key of a join's inline member list: the join's, and its owner's alone.

    Keyed by the owner's token as well as the join id: another parent's message
    reusing the join id writes its list elsewhere and never touches this one.
    """
    digest = hashlib.sha256(join_id.encode("utf-8")).hexdigest()
    return f"{JOIN_MEMBERS_PREFIX}/{digest}/{token_hash(task_token)}/members.jsonl"


class MemberLists:
    """Reads a join's member list a chunk of ``chunk_size`` entries at a time."""

    def __init__(
        self, *, bucket: PayloadBucket, manifests: ManifestReader, chunk_size: int
    ) -> None:
        self._bucket = bucket
        self._manifests = manifests
        self.chunk_size = chunk_size

    @property
    def writable(self) -> bool:
        """Whether an inline list can be written to the bucket, for later chunks to read."""
        return self._bucket.writable

    def first_chunk(
        self, message: JoinMessage, *, apart: bool
    ) -> tuple[list[ProcessPayload], Position | None, Position | None]:
        """The first chunk's payloads, where the rest is (None: nothing follows), and the list.

        The list's position is its url and the version read (a manifest's, or the
        inline list's written copy); None for an inline list read whole.
        ``apart``: later chunks run in invocations of their own (else this one
        reads every member of an inline list).
        """
        token = message.join.task_token
        if message.payloads_url is not None:
            try:
                payloads, rest, version = self.read_at(Position(message.payloads_url, 0), 0, token)
            except InvalidMessageError as exc:
                exc.task_token = exc.task_token or token
                raise
            return payloads, rest, Position(message.payloads_url, 0, version)
        entries = message.entries
        head = entries[: self.chunk_size]
        payloads = read_members(
            head, first_index=0, where="payloads", load_url=self._bucket.read_url, task_token=token
        )
        if len(entries) <= self.chunk_size:
            return payloads, None, None
        if not apart:
            # No bucket or queue to carry on from: this invocation registers them all.
            others = read_members(
                entries[self.chunk_size :],
                first_index=self.chunk_size,
                where="payloads",
                load_url=self._bucket.read_url,
                task_token=token,
            )
            return payloads + others, None, None
        # Written once: a redelivery finds its own object and the ETag it had.
        url, etag = self._bucket.write_once(
            members_key(message.join_id, token), manifest_text(entries)
        )
        version = ObjectVersion(etag)
        offset = len(manifest_text(head).encode("utf-8"))
        return payloads, Position(url, offset, version), Position(url, 0, version)

    def read(
        self, join: JoinItem, index: int, position: Position
    ) -> tuple[list[ProcessPayload], Position | None]:
        """Chunk ``index`` of ``join``'s list, from ``position``: its payloads and the rest."""
        payloads, rest, _ = self.read_at(position, index * self.chunk_size, join.task_token)
        return payloads, rest

    def read_at(
        self, position: Position, first_index: int, token: str | None
    ) -> tuple[list[ProcessPayload], Position | None, ObjectVersion]:
        """One chunk from ``position``: its payloads, the rest, and the version read."""
        piece = self._manifests.read(
            position.url, offset=position.offset, limit=self.chunk_size, version=position.version
        )
        payloads = read_members(
            piece.entries,
            first_index=first_index,
            where=position.url,
            load_url=self._bucket.read_url,
            task_token=token,
        )
        rest = None if piece.end else Position(position.url, piece.next_offset, piece.version)
        return payloads, rest, piece.version
