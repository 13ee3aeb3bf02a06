"""Process flow: register the waiter, then start, replay or leave the payload.

Ordering rule (see docs/architecture.md): the waiter row is written *before*
the payload state is read with strong consistency. update-state writes the
final state *before* it reads the waiter rows. Whichever side runs second
sees the other's write, so no waiter is left behind.
"""

from __future__ import annotations

import hashlib
from datetime import timedelta
from enum import StrEnum, unique
from typing import TYPE_CHECKING, Self

from aws_lambda_powertools.metrics import MetricUnit
from botocore.exceptions import ClientError

from dependency_tracker import naming
from dependency_tracker.clients import client
from dependency_tracker.errors import (
    InvalidMessageError,
    TransitionConflictError,
    UnknownWorkflowError,
)
from dependency_tracker.flows._text import clip
from dependency_tracker.models import (
    InvalidMessageItem,
    PayloadState,
    ProcessMessage,
    Resolution,
    WaiterItem,
    utcnow,
    waiter_id_for,
)
from dependency_tracker.observability import logger, metrics, redact_token
from dependency_tracker.stores import DependencyTable, PayloadBucket, StateTable

if TYPE_CHECKING:
    from mypy_boto3_stepfunctions import SFNClient

    from dependency_tracker.models import PayloadStateItem
    from dependency_tracker.settings import Settings

# Each round re-reads after a lost conditional write; a few suffice, since a
# lost race always means the item moved forward.
MAX_ROUNDS = 5
INVALID_MESSAGE_PREFIX = "invalid-message/"
MAX_BODY_EXCERPT = 16 * 1024


@unique
class ProcessAction(StrEnum):
    """What the process flow did with a message."""

    STARTED = "started"  # claimed a new attempt and started its execution
    RESUMED_START = "resumed_start"  # finished starting a claim another invocation left
    WAITING = "waiting"  # an execution is live; update-state will resolve the waiter
    REPLAYED = "replayed"  # already finished: the waiter was resolved from the stored state
    INVALID = "invalid"  # the message was recorded as invalid

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
    ) -> None:
        self.settings = settings
        self.states = states
        self.dependencies = dependencies
        self._sfn = sfn
        self._bucket = bucket

    @classmethod
    def from_settings(cls, settings: Settings) -> Self:
        """Flow wired to the default boto3 clients."""
        dynamodb = client("dynamodb")
        return cls(
            settings=settings,
            states=StateTable(dynamodb, settings.state_table),
            dependencies=DependencyTable(dynamodb, settings.dependency_table),
            sfn=client("stepfunctions"),
            bucket=PayloadBucket(client("s3")),
        )

    def parse(self, body: str, *, message_id: str | None = None) -> ProcessMessage:
        """Turn a queue body into a message, reading S3 pointers.

        Raises:
            InvalidMessageError: See :meth:`ProcessMessage.from_body`.
        """
        return ProcessMessage.from_body(body, message_id=message_id, load_url=self._bucket.read_url)

    def handle(self, message: ProcessMessage) -> ProcessAction:
        """Register the message's waiter, then make sure the payload runs once.

        Raises:
            UnknownWorkflowError: No state machine for the workflow (retryable:
                it may be deployed later; the claim stays for the next try).
            TransitionConflictError: The item kept changing under us (retryable).
        """
        payload_id = message.payload_id
        waiter_id = self._register(message)
        for _ in range(MAX_ROUNDS):
            seen = self.states.get(payload_id)
            try:
                action = self._advance(message, seen, waiter_id)
            except TransitionConflictError as exc:
                logger.info("lost a race, reading again", extra={"reason": str(exc)})
                continue
            logger.info("processed", extra={"action": action.value})
            metrics.add_metric(name=action.metric_name, unit=MetricUnit.Count, value=1)
            return action
        raise TransitionConflictError(f"{payload_id} kept changing for {MAX_ROUNDS} rounds")

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
                body_excerpt=body[:MAX_BODY_EXCERPT],
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
                )
            )
        return ProcessAction.INVALID

    # ------------------------------------------------------------------ steps

    def _register(self, message: ProcessMessage) -> str | None:
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

    def _advance(
        self, message: ProcessMessage, seen: PayloadStateItem | None, waiter_id: str | None
    ) -> ProcessAction:
        if seen is None or self._should_run(message, seen):
            claimed = self.states.claim(message.payload, seen, message_id=message.message_id)
            self._start(message, claimed.attempt)
            return ProcessAction.STARTED
        if seen.state is PayloadState.CLAIMED:
            # The claimer may have died before StartExecution; the name is
            # deterministic, so starting again is harmless if it did not.
            self._start(message, seen.attempt)
            return ProcessAction.RESUMED_START
        if seen.state is PayloadState.PROCESSING:
            return ProcessAction.WAITING
        if waiter_id is not None:
            self.dependencies.resolve(
                message.payload_id, waiter_id, Resolution.of(seen, replayed=True)
            )
        return ProcessAction.REPLAYED

    @staticmethod
    def _should_run(message: ProcessMessage, seen: PayloadStateItem) -> bool:
        if not seen.state.is_terminal:
            return False
        if message.message_id is not None and seen.claim_message_id == message.message_id:
            # A redelivery of the message that started the last attempt is not
            # a new submission: it must not run the payload again.
            return False
        return seen.state.reruns or message.payload.replace

    def _start(self, message: ProcessMessage, attempt: int) -> None:
        payload = message.payload
        state_machine_arn = self.settings.state_machine_arn(payload.workflow)
        name = naming.execution_name(payload.id, attempt)
        try:
            response = self._sfn.start_execution(
                stateMachineArn=state_machine_arn, name=name, input=payload.execution_input()
            )
            execution_arn = response["executionArn"]
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code")
            if code == "ExecutionAlreadyExists":
                execution_arn = naming.execution_arn(state_machine_arn, name)
            elif code == "StateMachineDoesNotExist":
                metrics.add_metric(name="UnknownWorkflow", unit=MetricUnit.Count, value=1)
                raise UnknownWorkflowError(payload.workflow, state_machine_arn) from exc
            else:
                raise
        logger.info("execution started", extra={"execution_arn": execution_arn, "attempt": attempt})
        try:
            self.states.set_processing(payload.id, attempt, execution_arn)
        except TransitionConflictError:
            # Another invocation recorded it, or it already finished: both fine.
            logger.info("execution already recorded", extra={"execution_arn": execution_arn})
