"""Registering a join's members, a bounded chunk per invocation, fanned out in one hop.

A join message creates the join row and registers its first chunk of at most
``join_chunk_size`` members. When more follow, that same invocation finds where
every later chunk starts (one streamed read of the manifest, or the inline list
written to the payload bucket) and sends each chunk's ``join_chunk`` message
itself, ten to a ``SendMessageBatch``, before it registers the first chunk.
No chunk sends another: however long the list, a join is two hops of the same
function (message, then chunks), far below the chain Lambda's recursive-loop
detection stops (16 invocations), and chunks run side by side. Each chunk, in
its own invocation:

1. stops if the join is decided or the chunk was registered before;
2. writes its members' membership rows (conditional puts: an earlier chunk's
   row marks a duplicate), *then* reads their states (ordering rule) and
   starts, replays or leaves each member, as a single wait does;
3. records itself and adds its members to the join row in one transaction,
   exactly once; whichever chunk is recorded last (the last in the list makes
   the number of chunks known) makes ``n`` known and checks the decision.

A ``join_chunk`` message without ``chunks`` comes from the older chained
registration (each chunk sent the next): such a chunk still sends the next, so
a join in flight across an upgrade finishes.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING

from aws_lambda_powertools.metrics import MetricUnit
from botocore.exceptions import ClientError

from dependency_tracker.core.backoff import error_code
from dependency_tracker.core.enums import DependencyError, PayloadState, utcnow
from dependency_tracker.core.errors import InvalidMessageError
from dependency_tracker.core.limits import SQS_MAX_BATCH_ENTRIES
from dependency_tracker.core.observability import logger, metrics, redact_token
from dependency_tracker.core.tokens import PARENT_GONE_CODES, token_hash
from dependency_tracker.joins.counting import decide_if_settled
from dependency_tracker.joins.manifest import (
    ManifestReader,
    ObjectVersion,
    changed_cause,
    manifest_text,
)
from dependency_tracker.joins.messages import JoinChunk, JoinChunkMessage, JoinMessage, read_members
from dependency_tracker.joins.store import Registration
from dependency_tracker.table.items import (
    JOIN_ROW_KEY,
    MembershipItem,
    Resolution,
    join_partition_for,
    membership_id_for,
)
from dependency_tracker.table.join_items import ChunkItem, JoinItem

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_stepfunctions import SFNClient

    from dependency_tracker.cycles.guard import Cycle, CycleGuard
    from dependency_tracker.joins.store import JoinStore
    from dependency_tracker.payloads.bucket import PayloadBucket
    from dependency_tracker.payloads.model import ProcessPayload
    from dependency_tracker.payloads.runner import PayloadRunner
    from dependency_tracker.payloads.state_table import StateTable
    from dependency_tracker.table.dependency_table import DependencyTable

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


class JoinRegistration:
    """Creates joins and registers their members in bounded chunks."""

    def __init__(
        self,
        *,
        joins: JoinStore,
        dependencies: DependencyTable,
        states: StateTable,
        bucket: PayloadBucket,
        manifests: ManifestReader,
        cycles: CycleGuard,
        runner: PayloadRunner,
        chunk_size: int,
        sqs: SQSClient | None,
        queue_url: str | None,
        sfn: SFNClient | None = None,
    ) -> None:
        self.joins = joins
        self.dependencies = dependencies
        self.states = states
        self._bucket = bucket
        self._manifests = manifests
        self.cycles = cycles
        self._runner = runner
        self.chunk_size = chunk_size
        self._sqs = sqs
        self._queue_url = queue_url
        self._sfn = sfn  # to tell whether a join's parent still waits (adoption)

    # ------------------------------------------------------------------ entry

    def start(self, message: JoinMessage) -> bool:
        """Create the join and register its first chunk; False if it was refused (a cycle).

        Raises:
            InvalidMessageError: ``InvalidJoin`` (with the token) for a bad first
                chunk or manifest, or a ``join_id`` used by another token.
        """
        join_id, token = message.join_id, message.join.task_token
        logger.append_keys(join_id=join_id, token_hash=redact_token(token))
        # Reads the manifest (or writes the inline list under this token's own key):
        # nothing here touches what another token's join with this id wrote.
        payloads, rest, source = self._first_chunk(message)
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
            created_at=now,
            updated_at=now,
        )
        fresh = self.joins.create(row)
        if not fresh:
            existing = self.joins.get(join_id)
            if existing is not None and existing.task_token != token:
                existing = self._adopted(existing, row, payloads)
            if existing is not None and existing.task_token != token:
                raise InvalidMessageError(
                    f"join_id {join_id!r} is already used by another task token (a join_id"
                    " belongs to the first parent that sends it, and passes to a new token"
                    " only when that parent's task has closed and the same execution sends"
                    " the same join again: give each wait its own join_id)",
                    task_token=token,
                    error_name=DependencyError.INVALID_JOIN,
                )
            if existing is not None and existing.source_etag not in (None, row.source_etag):
                # A redelivery that read a manifest other than the one the join began with.
                seen = f"read again as ETag {row.source_etag}"
                self._finish_begun(existing, 0)
                self._invalid(existing, changed_cause(existing.source, existing.source_etag, seen))
                return True
            row = existing or row  # a redelivery: carry on, every step is idempotent
        # A join created just now has no chunk and no decision yet: nothing to check.
        return self._run(row, 0, payloads, rest, message.message_id, checked=fresh)

    def _adopted(
        self, existing: JoinItem, row: JoinItem, payloads: list[ProcessPayload]
    ) -> JoinItem | None:
        """The join handed to ``row``'s token when it is its own parent's retry; else unchanged.

        A Step Functions ``Retry`` of a ``sendMessage.waitForTaskToken`` task whose
        first send was delivered (the error came after it) sends the same join with
        a new token. It is the same wait when the same execution sends the same
        join (quorum, total, member list) and the first token's task has closed
        (``SendTaskHeartbeat`` answers ``TaskTimedOut``): the new token takes the
        join over. Anything else keeps the join with its owner.
        """
        same = (
            existing.parent_execution is not None
            and existing.parent_execution == row.parent_execution
            and (existing.quorum, existing.total) == (row.quorum, row.total)
            and existing.source_etag == row.source_etag
            and (existing.source == row.source or self._both_inline(existing.source, row.source))
            and self._same_first_chunk(existing, payloads)
        )
        if not same or self._sfn is None or self._task_open(existing.task_token):
            return existing
        adopted = self.joins.adopt(
            existing.join_id, old_token=existing.task_token, new_token=row.task_token
        )
        if adopted:
            logger.warning(
                "join adopted: its parent's task closed and the same execution sent it again",
                extra={"previous_token_hash": redact_token(existing.task_token)},
            )
            metrics.add_metric(name="JoinsAdopted", unit=MetricUnit.Count, value=1)
        return self.joins.get(existing.join_id)

    def _both_inline(self, first: str | None, second: str | None) -> bool:
        """Both lists are inline lists the tracker wrote (under each token's own key)."""
        inline = f"s3://{self._bucket.bucket_name}/{JOIN_MEMBERS_PREFIX}/"
        return all(url is not None and url.startswith(inline) for url in (first, second))

    def _same_first_chunk(self, existing: JoinItem, payloads: list[ProcessPayload]) -> bool:
        chunk = self.joins.chunk(existing.join_id, 0)
        return chunk is None or set(chunk.members) == {payload.id for payload in payloads}

    def _task_open(self, token: str) -> bool:
        """Whether a parent still waits on ``token`` (a heartbeat is refused once it closed)."""
        assert self._sfn is not None  # noqa: S101  (callers check)
        try:
            self._sfn.send_task_heartbeat(taskToken=token)
        except ClientError as exc:
            if error_code(exc) in PARENT_GONE_CODES:
                return False
            raise
        return True

    def resume(self, message: JoinChunkMessage) -> bool:
        """Register chunk ``index`` of a join from its member list; False if refused.

        Raises:
            InvalidMessageError: The join does not exist (not retryable), or a
                referenced payload cannot be read yet (retryable).
        """
        chunk = message.join_chunk
        logger.append_keys(join_id=chunk.join_id, chunk=chunk.index)
        join = self.joins.get(chunk.join_id)
        if join is None:
            raise InvalidMessageError(f"join_chunk of join {chunk.join_id!r}, which does not exist")
        if self._stopped(join, chunk.index):
            return True
        version = ObjectVersion(chunk.etag, chunk.version_id)
        if chunk.etag is None and chunk.version_id is None:
            version = ObjectVersion(join.source_etag, join.source_version)
        try:
            payloads, rest = self._read(
                join, chunk.index, Position(chunk.payloads_url, chunk.offset, version)
            )
        except InvalidMessageError as exc:
            if exc.retryable:
                raise
            self._finish_begun(join, chunk.index)
            self._invalid(join, exc.reason)
            return True
        return self._run(
            join,
            chunk.index,
            payloads,
            rest,
            message.message_id,
            checked=True,
            chained=chunk.chunks is None,
        )

    # ------------------------------------------------------------------ steps

    def _first_chunk(
        self, message: JoinMessage
    ) -> tuple[list[ProcessPayload], Position | None, Position | None]:
        """The first chunk's payloads, where the rest is (None: nothing follows), and the list.

        The list's position is its url and the version read (a manifest's, or the
        inline list's written copy); None for an inline list read whole.
        """
        token = message.join.task_token
        if message.payloads_url is not None:
            try:
                payloads, rest, version = self._read_at(Position(message.payloads_url, 0), 0, token)
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
        if not self._continues():
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

    def _read(
        self, join: JoinItem, index: int, position: Position
    ) -> tuple[list[ProcessPayload], Position | None]:
        payloads, rest, _ = self._read_at(position, index * self.chunk_size, join.task_token)
        return payloads, rest

    def _read_at(
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

    def _continues(self) -> bool:
        return self._bucket.writable and self._sqs is not None and self._queue_url is not None

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
        if not checked and self._stopped(join, index):
            # A redelivered join refused as a cycle is still a refusal.
            return join.error != DependencyError.CYCLE
        if rest is not None and self._continues():
            if chained:
                self._send_chunks(join, index + 1, [rest], chunks=None)
                return self._register(join, index, payloads, last=False, message_id=message_id)
            if index == 0:
                try:
                    starts = self._chunk_starts(join, rest)
                except InvalidMessageError as exc:
                    if exc.retryable:
                        raise
                    # A later entry is malformed or the list changed: no member runs.
                    self._invalid(join, exc.reason)
                    return True
                self._send_chunks(join, 1, starts, chunks=len(starts) + 1)
            # A fanned-out chunk is last when the list ends with it, whatever order they run in.
            return self._register(join, index, payloads, last=False, message_id=message_id)
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
            if not self._register(join, index, payloads, last=rest is None, message_id=message_id):
                return False
            if rest is None:
                return True
            index += 1
            try:
                payloads, rest = self._read(join, index, rest)
            except InvalidMessageError as exc:
                if exc.retryable:
                    raise
                self._invalid(join, exc.reason)
                return True
            if self._stopped(join, index):
                return join.error != DependencyError.CYCLE

    def _chunk_starts(self, join: JoinItem, rest: Position) -> list[Position]:
        """Where each chunk after the first starts: one pass over the rest of the list."""
        try:
            offsets = self._manifests.chunk_starts(
                rest.url, offset=rest.offset, limit=self.chunk_size, version=rest.version
            )
        except InvalidMessageError as exc:
            exc.task_token = exc.task_token or join.task_token
            raise
        return [Position(rest.url, offset, rest.version) for offset in offsets]

    def _stopped(self, join: JoinItem, index: int) -> bool:
        """True when chunk ``index`` has nothing left to do.

        A decided join registers no new chunk. A chunk it had begun (listed, maybe
        some membership rows written) is finished all the same: a membership row
        written is a promise to read its member's state (the ordering rule), or a
        member that had already ended would leave its row waiting for good.
        """
        chunk = self.joins.chunk(join.join_id, index)
        if chunk is not None and chunk.recorded:
            logger.info("chunk already registered", extra={"chunk": index})
            if join.total is None and join.workflow_state is PayloadState.PROCESSING:
                # Its delivery may have died between recording it and checking the decision.
                self._check_decision(join.join_id)
            return True
        if join.workflow_state is not PayloadState.PROCESSING and chunk is None:
            logger.info("join already decided: chunk not registered", extra={"chunk": index})
            metrics.add_metric(name="JoinChunksSkipped", unit=MetricUnit.Count, value=1)
            return True
        return False

    def _send_chunks(
        self, join: JoinItem, first: int, starts: list[Position], *, chunks: int | None
    ) -> None:
        """Send the ``join_chunk`` messages of chunks ``first``, ``first + 1``, ... (10 a call).

        A redelivered join message sends them again: each chunk is idempotent.
        """
        if self._sqs is None or self._queue_url is None:
            msg = "a join can only continue through the process queue"
            raise RuntimeError(msg)
        bodies = [
            json.dumps(
                {
                    "join_chunk": JoinChunk(
                        join_id=join.join_id,
                        index=first + number,
                        offset=start.offset,
                        payloads_url=start.url,
                        etag=start.version.etag if start.version else None,
                        version_id=start.version.version_id if start.version else None,
                        chunks=chunks,
                    ).model_dump(exclude_none=True)
                }
            )
            for number, start in enumerate(starts)
        ]
        for batch_start in range(0, len(bodies), SQS_MAX_BATCH_ENTRIES):
            batch = bodies[batch_start : batch_start + SQS_MAX_BATCH_ENTRIES]
            entries = {str(batch_start + number): body for number, body in enumerate(batch)}
            self._send_batch(self._sqs, self._queue_url, entries)
        logger.info(
            "join chunks sent",
            extra={"first_chunk": first, "sent": len(bodies), "chunks": chunks},
        )
        metrics.add_metric(name="JoinChunksSent", unit=MetricUnit.Count, value=len(bodies))

    @staticmethod
    def _send_batch(sqs: SQSClient, queue_url: str, entries: dict[str, str]) -> None:
        """One ``SendMessageBatch``; entries SQS failed are sent again once, then it raises."""
        pending = entries
        for attempt in range(2):
            response = sqs.send_message_batch(
                QueueUrl=queue_url,
                Entries=[{"Id": key, "MessageBody": body} for key, body in pending.items()],
            )
            failed = response.get("Failed", [])
            if not failed:
                return
            pending = {item["Id"]: entries[item["Id"]] for item in failed}
            if attempt == 1 or any(item.get("SenderFault") for item in failed):
                reasons = sorted({str(item.get("Code")) for item in failed})
                msg = f"{len(failed)} join_chunk message(s) not sent: {', '.join(reasons)}"
                # Retried with the whole join message: every chunk sent again is idempotent.
                raise RuntimeError(msg)

    def _register(
        self,
        join: JoinItem,
        index: int,
        payloads: list[ProcessPayload],
        *,
        last: bool,
        message_id: str | None,
    ) -> bool:
        """Register one chunk's members and run them; False when the join was refused."""
        for payload in payloads:
            try:
                self._runner.check_startable(payload, join.task_token)
            except InvalidMessageError as exc:
                # The join, not one wait, is refused: its parent catches InvalidJoin.
                raise InvalidMessageError(
                    exc.reason,
                    retryable=exc.retryable,
                    task_token=join.task_token,
                    payload_id=payload.id,
                    error_name=DependencyError.INVALID_JOIN,
                ) from exc
        distinct: dict[str, ProcessPayload] = {}
        repeated: list[str] = []
        for payload in payloads:
            if payload.id in distinct:
                repeated.append(payload.id)
            else:
                distinct[payload.id] = payload
        membership_id = membership_id_for(join.join_id)
        if join.waiter_payload_id is not None:
            cycle = self.cycles.admit(join.waiter_payload_id, list(distinct), via=membership_id)
            # Checked before this chunk writes anything: a refused join starts no
            # member of this chunk (earlier chunks' members may run already).
            if cycle is not None and self._refuse(join.join_id, cycle):
                return False
        now = utcnow()
        # Listed before any member is registered: a decision its members bring about
        # before the chunk is finished still names them in the summary.
        self.joins.start_chunk(ChunkItem.of(join.join_id, index, list(distinct), [], now))
        rows = [
            MembershipItem(
                payload_id=member,
                waiter_id=membership_id,
                join_id=join.join_id,
                chunk=index,
                created_at=now,
                updated_at=now,
            )
            for member in distinct
        ]
        found = self.joins.register_members(rows)
        own = [
            m for m, how in zip(distinct, found, strict=True) if how is not Registration.DUPLICATE
        ]
        repeated += [
            m for m, how in zip(distinct, found, strict=True) if how is Registration.DUPLICATE
        ]
        if repeated:
            logger.warning(
                "duplicate payloads in join",
                extra={"duplicates": repeated[:20], "count": len(repeated)},
            )
        # Every membership row of the chunk is written before any state is read.
        seen = self.states.batch_get(own)
        actions: dict[str, int] = {}
        for member in own:
            action = self._runner.settle(
                distinct[member], membership_id, message_id=message_id, seen=seen.get(member)
            ).value
            actions[action] = actions.get(action, 0) + 1
        recorded = self.joins.finish_chunk(
            ChunkItem.of(join.join_id, index, own, repeated, now),
            chunks=index + 1 if last else None,
        )
        logger.info(
            "join chunk registered" if recorded else "join chunk registered before",
            extra={"chunk": index, "members": len(own), "last": last, "actions": actions},
        )
        metrics.add_metric(name="JoinChunksRegistered", unit=MetricUnit.Count, value=1)
        if join.total is None and (last or recorded):
            # n is known once every chunk is recorded, by whichever is recorded last: each
            # reads the join row after its own transaction (the ordering rule). With n known
            # from the start, the counts decide alone.
            self._check_decision(join.join_id)
        return True

    def _check_decision(self, join_id: str) -> None:
        """After a chunk: write ``n`` once known, and decide a join ``n`` settles."""
        join, succeeded, failed = self.joins.read(join_id)
        if join is None or join.known_total is None:
            return
        if join.total is None:
            self.joins.set_total(join_id, join.known_total)
        decide_if_settled(
            self.dependencies,
            join,
            succeeded,
            failed,
            winner=None,
            may_succeed=join.quorum is None,
        )

    def _finish_begun(self, join: JoinItem, index: int) -> None:
        """Keep a begun chunk's promise when its list can no longer be read.

        Its membership rows are written (a delivery died after writing them) but
        the member list that names the payloads is gone or changed: read the
        states of those members now and resolve the rows of the ones that ended,
        so none is left waiting on a payload that has ended. Members still
        running are resolved by update-state, as any waiter.
        """
        chunk = self.joins.chunk(join.join_id, index)
        if chunk is None or chunk.recorded:
            return
        rows = [row for row in self.joins.chunk_rows(chunk) if not row.workflow_state.is_terminal]
        seen = self.states.batch_get([row.payload_id for row in rows])
        for row in rows:
            state = seen.get(row.payload_id)
            if state is not None and state.state.is_terminal:
                resolution = Resolution.of(state, replayed=True)
                self.dependencies.resolve(row.payload_id, row.waiter_id, resolution)

    def _invalid(self, join: JoinItem, reason: str) -> None:
        """A later chunk is unusable: the parent hears ``InvalidJoin`` with the reason."""
        logger.error("join member list unusable", extra={"reason": reason})
        metrics.add_metric(name="InvalidJoinChunks", unit=MetricUnit.Count, value=1)
        self.dependencies.decide_join(
            join.join_id, PayloadState.FAILED, error=DependencyError.INVALID_JOIN, cause=reason
        )

    def _refuse(self, join_id: str, cycle: Cycle) -> bool:
        """Decide a join ``DependencyCycle``; False if it was already decided otherwise."""
        if self.dependencies.decide_join(
            join_id, PayloadState.FAILED, error=DependencyError.CYCLE, cycle=list(cycle.path)
        ):
            logger.warning("wait refused: dependency cycle", extra={"cycle": cycle.describe()})
            metrics.add_metric(name="DependencyCycles", unit=MetricUnit.Count, value=1)
            return True
        existing = self.joins.get(join_id)
        return existing is not None and existing.error == DependencyError.CYCLE
