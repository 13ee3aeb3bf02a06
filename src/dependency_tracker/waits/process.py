"""Process flow: register the waiter, then start, replay or leave the payload.

Ordering rule (see docs/architecture.md): the waiter row is written *before*
the payload state is read with strong consistency. update-state writes the
final state *before* it reads the waiter rows. Whichever side runs second
sees the other's write, so no waiter is left behind.

Who settles the payload once the waiter row is written is the runner it is given
(payloads/runner.py): the tracker's own, or, in cirrus mode, a cirrus-geo deployment
(cirrus/flow.py): the same waiter rows, another runner. Joins are in joins/.
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import timedelta
from typing import TYPE_CHECKING

from aws_lambda_powertools.metrics import MetricUnit

from dependency_tracker.core.enums import DependencyError, PayloadState, utcnow
from dependency_tracker.core.errors import InvalidMessageError
from dependency_tracker.core.observability import logger, metrics, redact_token
from dependency_tracker.core.text import clip
from dependency_tracker.joins.messages import JoinChunkMessage, JoinMessage
from dependency_tracker.payloads.actions import ProcessAction, count
from dependency_tracker.payloads.model import utf8_problem
from dependency_tracker.table.items import (
    InvalidMessageItem,
    WaiterItem,
    join_partition_for,
    waiter_id_for,
)
from dependency_tracker.table.prefixes import INVALID_MESSAGE_PREFIX
from dependency_tracker.waits.messages import ProcessMessage, WaitMessage, read_message

if TYPE_CHECKING:
    from dependency_tracker.core.settings import Settings
    from dependency_tracker.cycles.guard import Cycle, CycleGuard
    from dependency_tracker.joins.registration import JoinRegistration
    from dependency_tracker.payloads.bucket import PayloadBucket
    from dependency_tracker.payloads.runner import PayloadRunner
    from dependency_tracker.payloads.state_table import StateTable
    from dependency_tracker.table.dependency_table import DependencyTable

__all__ = ["INVALID_MESSAGE_PREFIX", "ProcessAction", "ProcessFlow", "redact_tokens"]

MAX_BODY_EXCERPT = 16 * 1024


class ProcessFlow:
    """Handles one process-queue message at a time."""

    def __init__(
        self,
        *,
        settings: Settings,
        states: StateTable,
        dependencies: DependencyTable,
        bucket: PayloadBucket,
        runner: PayloadRunner,
        cycles: CycleGuard,
        joins: JoinRegistration,
    ) -> None:
        self.settings = settings
        self.states = states
        self.dependencies = dependencies
        self._bucket = bucket
        self.runner = runner
        self.cycles = cycles
        self.joins = joins

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
            self.runner.check_startable(message.payload, token)
        waiter_id = self._register(message)
        if waiter_id is not None and self._refuse_cycle(message, waiter_id):
            return ProcessAction.REFUSED
        if isinstance(message, WaitMessage):
            return self.runner.wait_only(message.payload_id, waiter_id)
        return self.runner.settle(message.payload, waiter_id, message_id=message.message_id)

    def hand_off_join(self, body: str, message_id: str | None) -> None:
        """Send a join message to the join queue, to register there alone (joins/fan_out.py)."""
        self.joins.hand_off(body, message_id)

    def _join(self, message: JoinMessage | JoinChunkMessage) -> ProcessAction:
        """Create a join or carry on registering it (joins/registration.py)."""
        if isinstance(message, JoinMessage):
            registered = self.joins.start(message)
        else:
            registered = self.joins.resume(message)
        action = ProcessAction.JOINED if registered else ProcessAction.REFUSED
        count(action, join_partition_for(message.join_id))
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
        join = self.joins.joins.get(join_id)
        if join is None or (token is not None and not join.holds(token)):
            return False
        cause = redact_tokens(cause, join.task_token)
        if self.joins.joins.decide_join(
            join_id, PayloadState.FAILED, error=DependencyError.INVALID_JOIN, cause=cause
        ):
            logger.error("join failed on its last receive", extra={"reason": cause})
            metrics.add_metric(name="LastReceiveAnswers", unit=MetricUnit.Count, value=1)
        return True

    # ------------------------------------------------------------------ steps

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
            count(ProcessAction.REFUSED, message.payload_id)  # a redelivery
            return True
        return False

    def _refused(self, subject: str, cycle: Cycle) -> None:
        logger.warning("wait refused: dependency cycle", extra={"cycle": cycle.describe()})
        metrics.add_metric(name="DependencyCycles", unit=MetricUnit.Count, value=1)
        count(ProcessAction.REFUSED, subject)

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
