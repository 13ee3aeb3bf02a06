"""Process flow: register the waiter, then start, replay or leave the payload.

Ordering rule (see docs/architecture.md): the waiter row is written *before*
the payload state is read with strong consistency. update-state writes the
final state *before* it reads the waiter rows. Whichever side runs second
sees the other's write, so no waiter is left behind.

How a payload is started, and what an attempt's expired lease leads to, is in
flows/runs.py; joins are in flows/joins/. In cirrus mode a cirrus-geo deployment
runs the payloads instead (flows/cirrus.py): the same waiter rows, another runner.
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import timedelta
from enum import StrEnum, unique
from typing import TYPE_CHECKING, Self

from aws_lambda_powertools.metrics import MetricUnit

from dependency_tracker.clients import client
from dependency_tracker.errors import (
    InvalidMessageError,
    TransitionConflictError,
)
from dependency_tracker.flows.cirrus import CirrusRuns
from dependency_tracker.flows.cycles import Cycle, CycleGuard
from dependency_tracker.flows.joins.registration import JoinRegistration
from dependency_tracker.flows.runs import Runs
from dependency_tracker.flows.update_state import UpdateStateFlow
from dependency_tracker.models import (
    DependencyError,
    InvalidMessageItem,
    JoinChunkMessage,
    JoinMessage,
    PayloadState,
    ProcessMessage,
    ProcessPayload,
    Resolution,
    WaiterItem,
    WaitMessage,
    join_partition_for,
    read_message,
    utcnow,
    waiter_id_for,
)
from dependency_tracker.models.payload import utf8_problem
from dependency_tracker.observability import logger, metrics, redact_token
from dependency_tracker.stores import DependencyTable, PayloadBucket, StateTable
from dependency_tracker.stores.joins import JoinStore
from dependency_tracker.stores.wait_edges import WaitEdges
from dependency_tracker.text import clip

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_stepfunctions import SFNClient

    from dependency_tracker.models import PayloadStateItem
    from dependency_tracker.settings import Settings
    from dependency_tracker.stores.manifest import ManifestReader

# Each round re-reads after a lost conditional write; a few suffice, since a
# lost race always means the item moved forward.
MAX_ROUNDS = 5
INVALID_MESSAGE_PREFIX = "invalid-message/"
MAX_BODY_EXCERPT = 16 * 1024


class _Unread:
    """Marker: the payload's state has not been read yet."""


_UNREAD = _Unread()


@unique
class ProcessAction(StrEnum):
    """What the process flow did with a message."""

    STARTED = "started"  # claimed a new attempt and started its execution
    RESUMED_START = "resumed_start"  # finished starting a claim another invocation left
    WAITING = "waiting"  # an execution is live; update-state will resolve the waiter
    TOOK_OVER = "took_over"  # the lease ran out on a dead execution: a new attempt started
    RECOVERED = "recovered"  # the lease ran out on an ended run whose status never came: recorded
    REPLAYED = "replayed"  # already finished: the waiter was resolved from the stored state
    INVALID = "invalid"  # the message was recorded as invalid
    JOINED = "joined"  # a join was registered and each member started, replayed or left
    REFUSED = "refused"  # the wait would close a dependency cycle: DependencyCycle sent
    FORWARDED = "forwarded"  # cirrus mode: sent to cirrus's process queue to run
    ANSWERED = "answered"  # cirrus mode: a redelivery whose waiter had its answer already

    @property
    def metric_name(self) -> str:
        """CloudWatch metric counting this action, e.g. ``ProcessStarted``."""
        return "Process" + self.value.title().replace("_", "")


class ProcessFlow:
    """Handles one process-queue message at a time."""

    def __init__(
        self,
        *,
        settings: Settings,
        states: StateTable,
        dependencies: DependencyTable,
        sfn: SFNClient,
        bucket: PayloadBucket,
        cycles: CycleGuard | None = None,
        sqs: SQSClient | None = None,
        manifests: ManifestReader | None = None,
        cirrus: CirrusRuns | None = None,
    ) -> None:
        self.settings = settings
        self.cirrus = cirrus
        self.states = states
        self.dependencies = dependencies
        self._bucket = bucket
        self.cycles = cycles or CycleGuard(
            states=states,
            edges=WaitEdges(
                dependencies.client,
                dependencies.table_name,
                retention_days=settings.waiter_retention_days,
            ),
            max_length=settings.cycle_depth,
        )
        self.runs = Runs(
            settings=settings,
            states=states,
            sfn=sfn,
            bucket=bucket,
            recorder=UpdateStateFlow(
                settings=settings,
                states=states,
                dependencies=dependencies,
                sfn=sfn,
                bucket=bucket,
                sqs=sqs,
            ),
        )
        self.joins = JoinRegistration(
            joins=JoinStore(dependencies.client, dependencies.table_name),
            dependencies=dependencies,
            states=states,
            bucket=bucket,
            manifests=manifests,
            cycles=self.cycles,
            starter=self,
            chunk_size=settings.join_chunk_size,
            sqs=sqs,
            queue_url=settings.join_queue_url or settings.process_queue_url,
            sfn=sfn,
        )

    @classmethod
    def from_settings(cls, settings: Settings) -> Self:
        """Flow wired to the default boto3 clients."""
        dynamodb = client("dynamodb")
        dependencies = DependencyTable(dynamodb, settings.dependency_table)
        return cls(
            settings=settings,
            states=StateTable(dynamodb, settings.state_table),
            dependencies=dependencies,
            sfn=client("stepfunctions"),
            bucket=PayloadBucket(client("s3"), settings.payload_bucket),
            sqs=client("sqs"),
            cirrus=(
                CirrusRuns.from_settings(settings, dependencies) if settings.cirrus_mode else None
            ),
        )

    def parse(
        self, body: str, *, message_id: str | None = None
    ) -> ProcessMessage | JoinMessage | JoinChunkMessage | WaitMessage:
        """Turn a queue body into a message, reading S3 pointers.

        Raises:
            InvalidMessageError: See :func:`dependency_tracker.models.read_message`.
        """
        return read_message(body, message_id=message_id, load_url=self._bucket.read_url)

    def handle(
        self, message: ProcessMessage | JoinMessage | JoinChunkMessage | WaitMessage
    ) -> ProcessAction:
        """Register who waits, then make sure each payload runs once.

        Raises:
            InvalidMessageError: A join reuses a ``join_id`` of another token, or a
                payload is too large to start and there is no bucket to pass it by.
            UnknownWorkflowError: No state machine for the workflow (retryable:
                it may be deployed later; the claim stays for the next try).
            TransitionConflictError: The item kept changing under us (retryable).
        """
        if isinstance(message, JoinMessage | JoinChunkMessage):
            return self._join(message)
        if isinstance(message, ProcessMessage):
            token = message.callback.task_token if message.callback else None
            self.check_startable(message.payload, token)
        waiter_id = self._register(message)
        if waiter_id is not None and self._refuse_cycle(message, waiter_id):
            return ProcessAction.REFUSED
        if isinstance(message, WaitMessage):
            return self._wait_only(message.payload_id, waiter_id)
        return self._settle(message.payload, message.message_id, waiter_id)

    def _join(self, message: JoinMessage | JoinChunkMessage) -> ProcessAction:
        """Create a join or carry on registering it (flows/joins/registration.py)."""
        if isinstance(message, JoinMessage):
            registered = self.joins.start(message)
        else:
            registered = self.joins.resume(message)
        action = ProcessAction.JOINED if registered else ProcessAction.REFUSED
        self._count(action, join_partition_for(message.join_id))
        return action

    def settle_member(
        self,
        payload: ProcessPayload,
        message_id: str | None,
        row_id: str,
        seen: PayloadStateItem | None,
    ) -> str:
        """Start, replay or leave one join member whose membership row is written."""
        return self._settle(payload, message_id, row_id, seen).value

    def _wait_only(self, payload_id: str, waiter_id: str | None) -> ProcessAction:
        """Resolve a wait-only waiter if its payload already ended; never start it."""
        if self.cirrus is not None:
            action = ProcessAction(self.cirrus.wait_only(payload_id, waiter_id).value)
            self._count(action, payload_id)
            return action
        seen = self.states.get(payload_id)
        if waiter_id is None or seen is None or not seen.state.is_terminal:
            action = ProcessAction.WAITING
        else:
            self.dependencies.resolve(payload_id, waiter_id, Resolution.of(seen, replayed=True))
            action = ProcessAction.REPLAYED
        logger.info("processed", extra={"action": action.value, "wait_only": True})
        metrics.add_metric(name=action.metric_name, unit=MetricUnit.Count, value=1)
        return action

    def record_invalid(
        self, error: InvalidMessageError, *, body: str, message_id: str | None
    ) -> ProcessAction:
        """Keep an invalid message (and tell its parent, if a token is readable).

        The message is stored as an ``INVALID`` item in the state table under
        ``invalid-message/{message_id}``; when the message carried a task token,
        an ``INVALID`` waiter row for that item makes the callback handler send
        ``DependencyInvalid`` to the parent instead of leaving it to time out.
        """
        key = message_id or hashlib.sha256(body.encode("utf-8")).hexdigest()
        record_id = f"{INVALID_MESSAGE_PREFIX}{key}"
        logger.error(
            "invalid message",
            extra={
                "message_id": message_id,
                "reason": error.reason,
                "payload_id": error.payload_id,
                "token_hash": redact_token(error.task_token),
            },
        )
        metrics.add_metric(name="InvalidMessages", unit=MetricUnit.Count, value=1)
        now = utcnow()
        expires = now + timedelta(days=self.settings.waiter_retention_days)
        self.states.record_invalid(
            InvalidMessageItem(
                payload_id=record_id,
                created_at=now,
                updated_at=now,
                finished_at=now,
                last_error=clip(error.reason),
                message_id=message_id,
                claimed_payload_id=error.payload_id,
                body_excerpt=redact_tokens(body, error.task_token)[:MAX_BODY_EXCERPT],
                expiration_time=int(expires.timestamp()),
            )
        )
        if error.task_token is not None:
            self.dependencies.register(
                WaiterItem(
                    payload_id=record_id,
                    waiter_id=waiter_id_for(error.task_token),
                    task_token=error.task_token,
                    workflow_state=PayloadState.INVALID,
                    created_at=now,
                    updated_at=now,
                    resolved_at=now,
                    error="InvalidMessage",
                    cause=clip(error.reason),
                    error_name=DependencyError(error.error_name),
                    parent_execution=_parent_execution_of(body),
                )
            )
        return ProcessAction.INVALID

    def answer_last_receive(
        self,
        *,
        body: str,
        message_id: str | None,
        message: ProcessMessage | JoinMessage | JoinChunkMessage | WaitMessage | None,
        reason: str,
        receive_count: int,
        task_token: str | None = None,
    ) -> bool:
        """Tell the parent of a message failing its last receive why; False if none can be told.

        The message still goes to the DLQ (the caller raises): this only makes
        sure its parent is not left to its callback timeout. A join is decided
        ``FAILED``/``InvalidJoin`` (a ``join_chunk`` carries no token: the join
        row does); a payload or wait is answered ``DependencyInvalid`` through an
        invalid-message record, as :meth:`record_invalid` does. ``message`` is
        None when the body could not be parsed; the token is then read from the
        body if it can be (or given, ``task_token``).
        """
        cause = (
            f"{reason} (failed on receive {receive_count}, the last the process queue "
            "allows: the message is kept in its dead-letter queue)"
        )
        if isinstance(message, JoinChunkMessage):
            return self._fail_join(message.join_id, cause, token=None)
        token: str | None
        if isinstance(message, JoinMessage):
            token, error = message.join.task_token, DependencyError.INVALID_JOIN
            if self._fail_join(message.join_id, cause, token=token):
                return True
        elif message is not None and message.callback is not None:
            token, error = message.callback.task_token, DependencyError.INVALID
        else:
            found, error = _token_in(body)
            token = task_token or found
        if token is None:
            logger.error("last receive failed: no parent to answer", extra={"reason": reason})
            return False
        # The reason may quote the body (an AWS error's message): no token is kept as text.
        cause = redact_tokens(cause, token)
        payload_id = (
            message.payload_id if isinstance(message, ProcessMessage | WaitMessage) else None
        )
        self.record_invalid(
            InvalidMessageError(cause, task_token=token, payload_id=payload_id, error_name=error),
            body=body,
            message_id=message_id,
        )
        metrics.add_metric(name="LastReceiveAnswers", unit=MetricUnit.Count, value=1)
        return True

    def _fail_join(self, join_id: str, cause: str, *, token: str | None) -> bool:
        """Decide a registering join ``InvalidJoin``; False if it is not there or not ``token``'s.

        An already decided join was answered before: True, nothing more to do.
        """
        join = self.dependencies.get_join(join_id)
        if join is None or (token is not None and join.task_token != token):
            return False
        cause = redact_tokens(cause, join.task_token)
        if self.dependencies.decide_join(
            join_id, PayloadState.FAILED, error=DependencyError.INVALID_JOIN, cause=cause
        ):
            logger.error("join failed on its last receive", extra={"reason": cause})
            metrics.add_metric(name="LastReceiveAnswers", unit=MetricUnit.Count, value=1)
        return True

    # ------------------------------------------------------------------ steps

    def _count(self, action: ProcessAction, subject: str) -> None:
        logger.info("processed", extra={"action": action.value, "payload_id": subject})
        metrics.add_metric(name=action.metric_name, unit=MetricUnit.Count, value=1)

    def _refuse_cycle(self, message: ProcessMessage | WaitMessage, waiter_id: str) -> bool:
        """Turn the wait down with ``DependencyCycle`` if it closes a cycle.

        False when the wait stands: no cycle, or the row was resolved by its
        payload's end before the refusal could land (then it is not waiting).
        """
        waiter = message.callback.waiter_payload_id if message.callback else None
        if waiter is None:
            return False
        cycle = self.cycles.admit(waiter, [message.payload_id], via=waiter_id)
        if cycle is None:
            return False
        cause = _cycle_cause(cycle)
        if self.dependencies.refuse(message.payload_id, waiter_id, DependencyError.CYCLE, cause):
            self._refused(message.payload_id, cycle)
            return True
        row = self.dependencies.get(message.payload_id, waiter_id)
        if row is not None and row.error_name is DependencyError.CYCLE:
            self._count(ProcessAction.REFUSED, message.payload_id)  # a redelivery
            return True
        return False

    def _refused(self, subject: str, cycle: Cycle) -> None:
        logger.warning("wait refused: dependency cycle", extra={"cycle": cycle.describe()})
        metrics.add_metric(name="DependencyCycles", unit=MetricUnit.Count, value=1)
        self._count(ProcessAction.REFUSED, subject)

    def _register(self, message: ProcessMessage | WaitMessage) -> str | None:
        if message.callback is None:
            return None
        callback = message.callback
        now = utcnow()
        waiter = WaiterItem(
            payload_id=message.payload_id,
            waiter_id=waiter_id_for(callback.task_token),
            task_token=callback.task_token,
            created_at=now,
            updated_at=now,
            parent_execution=callback.parent_execution,
            waiter_payload_id=callback.waiter_payload_id,
        )
        fresh = self.dependencies.register(waiter)
        logger.info(
            "waiter registered" if fresh else "waiter already registered",
            extra={
                "token_hash": redact_token(callback.task_token),
                "parent_execution": callback.parent_execution,
            },
        )
        return waiter.waiter_id

    def _settle(
        self,
        payload: ProcessPayload,
        message_id: str | None,
        row_id: str | None,
        seen: PayloadStateItem | _Unread | None = _UNREAD,
    ) -> ProcessAction:
        """Start, replay or leave one payload; re-read after every lost race."""
        if self.cirrus is not None:
            # cirrus claims and runs it; its own conditional claim settles the races.
            action = ProcessAction(self.cirrus.settle(payload, row_id).value)
            self._count(action, payload.id)
            return action
        for _ in range(MAX_ROUNDS):
            if isinstance(seen, _Unread):
                seen = self.states.get(payload.id)
            try:
                action = self._advance(payload, message_id, seen, row_id)
            except TransitionConflictError as exc:
                logger.info("lost a race, reading again", extra={"reason": str(exc)})
                seen = _UNREAD
                continue
            logger.info("processed", extra={"action": action.value, "payload_id": payload.id})
            metrics.add_metric(name=action.metric_name, unit=MetricUnit.Count, value=1)
            return action
        raise TransitionConflictError(f"{payload.id} kept changing for {MAX_ROUNDS} rounds")

    def _advance(
        self,
        payload: ProcessPayload,
        message_id: str | None,
        seen: PayloadStateItem | None,
        row_id: str | None,
    ) -> ProcessAction:
        if seen is None or self._should_run(payload, message_id, seen):
            claimed = self.states.claim(payload, seen, message_id=message_id)
            self.runs.start(payload, claimed.attempt)
            return ProcessAction.STARTED
        if self.runs.lease_expired(payload, seen):
            after = self.runs.after_lease(payload, message_id, seen)
            if after is not None:
                return ProcessAction(after.value)
        if seen.state is PayloadState.CLAIMED:
            return self._claimed(payload, message_id, seen)
        if seen.state is PayloadState.PROCESSING:
            return ProcessAction.WAITING
        if row_id is not None:
            self.dependencies.resolve(payload.id, row_id, Resolution.of(seen, replayed=True))
        return ProcessAction.REPLAYED

    def _claimed(
        self, payload: ProcessPayload, message_id: str | None, seen: PayloadStateItem
    ) -> ProcessAction:
        """A live claim whose start may or may not have happened."""
        if not self.runs.is_express(payload.workflow, seen):
            # The claimer may have died before StartExecution; the name is
            # deterministic, so starting again is harmless if it did not.
            self.runs.start(payload, seen.attempt)
            return ProcessAction.RESUMED_START
        if message_id is not None and seen.claim_message_id == message_id:
            # The claimer's own message again: its start failed or it died around it. A
            # second start of this attempt could be a second run of it; a new attempt,
            # under a new name, cannot run this one twice.
            return ProcessAction(self.runs.take_over(payload, message_id, seen).value)
        # An Express start is not idempotent: only the claimer (or its redelivery) starts;
        # if neither comes back, the lease starts a new attempt.
        return ProcessAction.WAITING

    @staticmethod
    def _should_run(
        payload: ProcessPayload, message_id: str | None, seen: PayloadStateItem
    ) -> bool:
        if not seen.state.is_terminal:
            return False
        if message_id is not None and seen.claim_message_id == message_id:
            # A redelivery of the message that started the last attempt is not
            # a new submission: it must not run the payload again.
            return False
        return seen.state.reruns or payload.replace

    def check_startable(self, payload: ProcessPayload, task_token: str | None) -> None:
        """Refuse, before anything is written, a payload no execution could take."""
        if self.cirrus is not None:
            self.cirrus.check_runnable(payload, task_token)
            return
        self.runs.check_startable(payload, task_token)


# A "task_token" field, plain or inside an SNS envelope's escaped JSON; tokens are
# base64-like, so the value ends at the first quote or backslash.
_TOKEN_FIELD = re.compile(r'(\\?"task_token\\?"\s*:\s*\\?")([^"\\]*)')


def redact_tokens(body: str, task_token: str | None) -> str:
    """The body with every task token replaced by its hash (tokens are never stored as text)."""
    if task_token:
        body = body.replace(task_token, redact_token(task_token) or "")
    return _TOKEN_FIELD.sub(lambda m: m.group(1) + (redact_token(m.group(2)) or ""), body)


def _cycle_cause(cycle: Cycle) -> str:
    return f"waiting would close a dependency cycle: {cycle.describe()}"


def _token_in(body: str) -> tuple[str | None, DependencyError]:
    """Best effort: the task token of a body that could not be parsed, and what its parent hears.

    ``{"join": {"task_token": ...}}`` is a join's (``InvalidJoin``); a ``callback``'s,
    top-level or beside ``payload``, a single wait's (``DependencyInvalid``).
    """
    try:
        document = json.loads(body)
    except (json.JSONDecodeError, TypeError, RecursionError):
        return None, DependencyError.INVALID
    if isinstance(document, dict) and document.get("Type") == "Notification":
        return _token_in(str(document.get("Message", "")))
    if not isinstance(document, dict):
        return None, DependencyError.INVALID
    for key, error in (
        ("join", DependencyError.INVALID_JOIN),
        ("callback", DependencyError.INVALID),
    ):
        holder = document.get(key)
        token = holder.get("task_token") if isinstance(holder, dict) else None
        # A token with no UTF-8 form cannot be sent back: the parent is unreachable.
        if isinstance(token, str) and token and utf8_problem(token) is None:
            return token, error
    return None, DependencyError.INVALID


def _parent_execution_of(body: str) -> str | None:
    """Best effort: the parent named in a broken message, so operators can find it."""
    try:
        document = json.loads(body)
    except (json.JSONDecodeError, TypeError, RecursionError):
        return None
    if isinstance(document, dict) and document.get("Type") == "Notification":
        return _parent_execution_of(str(document.get("Message", "")))
    if not isinstance(document, dict):
        return None
    for key in ("callback", "join"):
        waiter = document.get(key)
        if isinstance(waiter, dict) and isinstance(waiter.get("parent_execution"), str):
            # Escaped: a lone surrogate could not be stored, and the parent must still be told.
            return str(waiter["parent_execution"]).encode("utf-8", "backslashreplace").decode()
    return None
