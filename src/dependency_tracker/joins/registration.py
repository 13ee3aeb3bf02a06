"""Registering a join's members, a bounded chunk per invocation, fanned out in one hop.

A join message creates the join row and registers its first chunk of at most
``join_chunk_size`` members. When more follow, that same invocation sends every
later chunk's ``join_chunk`` message itself (:class:`ChunkFanOut`,
joins/fan_out.py) before it registers the first chunk; each chunk then
registers in its own invocation (:class:`ChunkRegistrar`, joins/chunks.py),
reading its members from the list's position (:class:`MemberLists`,
joins/member_list.py). A join already created by another token takes this one
too only when its own parent sent the same wait again (:class:`JoinAdoption`,
joins/adoption.py). With no bucket or queue to carry on through, one invocation
registers every chunk. The composition root builds each part and hands it here.

A ``join_chunk`` message without ``chunks`` comes from the older chained
registration (each chunk sent the next): such a chunk still sends the next, so
a join in flight across an upgrade finishes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_lambda_powertools.metrics import MetricUnit

from dependency_tracker.core.enums import DependencyError, PayloadState, utcnow
from dependency_tracker.core.errors import InvalidMessageError, StartDeferredError
from dependency_tracker.core.observability import log_keys, logger, metrics, redact_token
from dependency_tracker.joins.adoption import members_digest
from dependency_tracker.joins.deadlines import deadline_fields
from dependency_tracker.joins.manifest import ObjectVersion, changed_cause
from dependency_tracker.joins.member_list import Position
from dependency_tracker.joins.rows import JoinItem, ParentGone
from dependency_tracker.table.items import JOIN_ROW_KEY, join_partition_for

if TYPE_CHECKING:
    from dependency_tracker.joins.adoption import JoinAdoption
    from dependency_tracker.joins.cancellation import JoinCancellation
    from dependency_tracker.joins.chunks import ChunkRegistrar
    from dependency_tracker.joins.fan_out import ChunkFanOut
    from dependency_tracker.joins.member_list import MemberLists
    from dependency_tracker.joins.messages import JoinChunkMessage, JoinMessage
    from dependency_tracker.joins.store import JoinStore
    from dependency_tracker.payloads.model import ProcessPayload


class JoinRegistration:
    """Creates joins and registers their members in bounded chunks, from the parts it is given."""

    def __init__(
        self,
        *,
        joins: JoinStore,
        lists: MemberLists,
        fan_out: ChunkFanOut,
        adoption: JoinAdoption,
        registrar: ChunkRegistrar,
        cancellation: JoinCancellation | None = None,
    ) -> None:
        self.joins = joins
        self.cancellation = cancellation
        self.lists = lists
        self.fan_out = fan_out
        self.adoption = adoption
        self.registrar = registrar

    # ------------------------------------------------------------------ entry

    def start(self, message: JoinMessage) -> bool:
        """Create the join and register its first chunk; False if it was refused (a cycle).

        Raises:
            InvalidMessageError: ``InvalidJoin`` (with the token) for a bad first
                chunk or manifest, or a ``join_id`` used by another token.
        """
        join_id, token = message.join_id, message.join.task_token
        log_keys(join_id=join_id, token_hash=redact_token(token))
        if message.join.on_parent_gone == ParentGone.CANCEL and self.cancellation is None:
            raise InvalidMessageError(
                "join.on_parent_gone 'cancel' is not available in cirrus mode: cirrus runs the "
                "members, and the tracker does not stop its executions (leave it out, or 'keep')",
                task_token=token,
                error_name=DependencyError.INVALID_JOIN,
            )
        # Reads the manifest (or writes the inline list under this token's own key):
        # nothing here touches what another token's join with this id wrote.
        payloads, rest, source = self.lists.first_chunk(message, apart=self._continues())
        now = utcnow()
        row = JoinItem(
            payload_id=join_partition_for(join_id),
            waiter_id=JOIN_ROW_KEY,
            join_id=join_id,
            task_token=token,
            quorum=message.quorum,
            total=message.total,
            source=source.url if source is not None else None,
            source_etag=source.version.etag if source and source.version else None,
            source_version=source.version.version_id if source and source.version else None,
            parent_execution=message.join.parent_execution,
            waiter_payload_id=message.join.waiter_payload_id,
            on_parent_gone=message.join.on_parent_gone,
            members_digest=None if message.payloads_url else members_digest(message.entries),
            created_at=now,
            updated_at=now,
            **deadline_fields(join_id, message.join.deadline, message.join.min_succeeded, now),
        )
        fresh = self.joins.create(row)
        if not fresh:
            existing = self.joins.get(join_id)
            if existing is not None and not existing.holds(token):
                # Refused (InvalidJoin to this token) unless it is the same wait, sent again.
                existing = self.adoption.adopt(existing, row)
            if (
                existing is not None
                and existing.members_digest is None
                and existing.source_etag not in (None, row.source_etag)
            ):
                # A redelivery that read a manifest other than the one the join began with.
                seen = f"read again as ETag {row.source_etag}"
                self.registrar.finish_begun(existing, 0)
                self._invalid(existing, changed_cause(existing.source, existing.source_etag, seen))
                return True
            row = existing or row  # a redelivery: carry on, every step is idempotent
        if self.cancellation is not None and self.cancellation.watch(row):
            return True  # its parent is gone already: nothing registers
        # A join created just now has no chunk and no decision yet: nothing to check.
        return self._run(row, 0, payloads, rest, message.message_id, checked=fresh)

    def resume(self, message: JoinChunkMessage) -> bool:
        """Register chunk ``index`` of a join from its member list; False if refused.

        Raises:
            InvalidMessageError: The join does not exist (not retryable), or a
                referenced payload cannot be read yet (retryable).
        """
        chunk = message.join_chunk
        log_keys(join_id=chunk.join_id, chunk=chunk.index)
        join = self.joins.get(chunk.join_id)
        if join is None:
            raise InvalidMessageError(f"join_chunk of join {chunk.join_id!r}, which does not exist")
        if self.registrar.stopped(join, chunk.index):
            return True
        version = ObjectVersion(chunk.etag, chunk.version_id)
        if chunk.etag is None and chunk.version_id is None:
            version = ObjectVersion(join.source_etag, join.source_version)
        start = Position(chunk.payloads_url, chunk.offset, version)
        try:
            payloads, rest = self.lists.read(join, chunk.index, start)
        except InvalidMessageError as exc:
            if exc.retryable:
                raise
            self.registrar.finish_begun(join, chunk.index)
            self._invalid(join, exc.reason)
            return True
        try:
            return self._run(
                join,
                chunk.index,
                payloads,
                rest,
                message.message_id,
                checked=True,
                chained=chunk.chunks is None,
            )
        except StartDeferredError as exc:
            if not self._continues():
                raise
            # Step Functions' quota outlasted this invocation: the rest of the chunk goes
            # back to the join queue at once (no visibility timeout, no receive spent).
            logger.info("join chunk deferred: sent again", extra={"reason": str(exc)})
            self.send_chunk_again(join, chunk.index, start, chunk.chunks)
            return True

    # ------------------------------------------------------------------ steps

    def _run(
        self,
        join: JoinItem,
        index: int,
        payloads: list[ProcessPayload],
        rest: Position | None,
        message_id: str | None,
        *,
        checked: bool = False,
        chained: bool = False,
    ) -> bool:
        """Register chunk ``index``; the first one sends every later chunk's message first.

        ``chained``: a chunk of the older chained registration, which sends the next.
        """
        if not checked and self.registrar.stopped(join, index):
            # A redelivered join refused as a cycle is still a refusal.
            return join.error != DependencyError.CYCLE
        if rest is not None and self._continues():
            if chained:
                self.fan_out.send_chunks(join, index + 1, [rest], chunks=None)
                return self.registrar.register(
                    join, index, payloads, last=False, message_id=message_id
                )
            if index == 0:
                try:
                    starts = self.fan_out.chunk_starts(join, rest)
                except InvalidMessageError as exc:
                    if exc.retryable:
                        raise
                    # A later entry is malformed or the list changed: no member runs.
                    self._invalid(join, exc.reason)
                    return True
                self.fan_out.send_chunks(join, 1, starts, chunks=len(starts) + 1)
            # A fanned-out chunk is last when the list ends with it, whatever order they run in.
            return self.registrar.register(join, index, payloads, last=False, message_id=message_id)
        return self._register_here(join, index, payloads, rest, message_id)

    def _register_here(
        self,
        join: JoinItem,
        index: int,
        payloads: list[ProcessPayload],
        rest: Position | None,
        message_id: str | None,
    ) -> bool:
        """Register this chunk and, with no queue to carry on through, every later one here."""
        while True:
            if not self.registrar.register(
                join, index, payloads, last=rest is None, message_id=message_id
            ):
                return False
            if rest is None:
                return True
            index += 1
            try:
                payloads, rest = self.lists.read(join, index, rest)
            except InvalidMessageError as exc:
                if exc.retryable:
                    raise
                self._invalid(join, exc.reason)
                return True
            if self.registrar.stopped(join, index):
                return join.error != DependencyError.CYCLE

    def hand_off(self, body: str, message_id: str | None) -> None:
        """Send a join message, as it came, to the join queue (:meth:`ChunkFanOut.hand_off`)."""
        self.fan_out.hand_off(body, message_id)

    def send_chunk_again(
        self, join: JoinItem, index: int, start: Position, chunks: int | None
    ) -> None:
        """Send chunk ``index``'s message again (:meth:`ChunkFanOut.send_chunk_again`)."""
        self.fan_out.send_chunk_again(join, index, start, chunks)

    def _continues(self) -> bool:
        """Whether later chunks can run apart: a bucket to write the list to, a queue to send."""
        return self.lists.writable and self.fan_out.available

    def _invalid(self, join: JoinItem, reason: str) -> None:
        """A later chunk is unusable: the parent hears ``InvalidJoin`` with the reason."""
        logger.error("join member list unusable", extra={"reason": reason})
        metrics.add_metric(name="InvalidJoinChunks", unit=MetricUnit.Count, value=1)
        self.joins.decide_join(
            join.join_id, PayloadState.FAILED, error=DependencyError.INVALID_JOIN, cause=reason
        )
