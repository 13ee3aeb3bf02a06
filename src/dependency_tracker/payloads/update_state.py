"""Update-state flow: record how an execution ended, then resolve its waiters.

Writes the final state first and reads the waiter rows second (the ordering
rule in docs/architecture.md), so a waiter registered concurrently is seen
either here or by the process flow.
"""

from __future__ import annotations

import json
from enum import StrEnum, unique
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.metrics import MetricUnit
from pydantic import ValidationError

from dependency_tracker.core import naming
from dependency_tracker.core.errors import (
    ConfigurationError,
    InvalidMessageError,
    TransitionConflictError,
)
from dependency_tracker.core.limits import utf8_size
from dependency_tracker.core.observability import (
    drop_log_keys,
    log_keys,
    logger,
    metrics,
    set_correlation_id,
)
from dependency_tracker.core.settings import ENV_PAYLOAD_BUCKET
from dependency_tracker.core.text import clip
from dependency_tracker.payloads.bucket import MAX_INLINE_MESSAGE_BYTES, goes_by_reference
from dependency_tracker.payloads.chaining import ChainError, chained_key, next_payload
from dependency_tracker.payloads.events import StatusChange
from dependency_tracker.payloads.model import ProcessPayload
from dependency_tracker.payloads.results import build_result
from dependency_tracker.table.items import Resolution

if TYPE_CHECKING:
    from collections.abc import Callable

    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_stepfunctions import SFNClient

    from dependency_tracker.core.settings import Settings
    from dependency_tracker.payloads.bucket import PayloadBucket
    from dependency_tracker.payloads.state_table import StateTable
    from dependency_tracker.table.dependency_table import DependencyTable


# Where an Express workflow writes the output its report names (simulate-express.asl.json);
# the update-state role reads it there.
EXPRESS_OUTPUTS_PREFIX = "express-outputs"


@unique
class UpdateAction(StrEnum):
    """What the update-state flow did with a status change."""

    RECORDED = "recorded"  # final state written, waiters resolved
    REPEATED = "repeated"  # same result already stored; waiters resolved again (idempotent)
    STALE = "stale"  # an older attempt or a foreign run while an attempt is live
    NOT_TERMINAL = "not_terminal"  # the execution still runs
    NOT_MANAGED = "not_managed"  # not a {prefix}-* state machine
    UNKNOWN_INPUT = "unknown_input"  # the execution input is not a process payload

    @property
    def metric_name(self) -> str:
        """CloudWatch metric counting this action, e.g. ``StatusRecorded``."""
        return "Status" + self.value.title().replace("_", "")


class _Execution:
    """The execution of one status change, described at most once: a per-call value.

    EventBridge leaves out inputs and outputs over 248 KiB, and a large execution
    may need both from one ``DescribeExecution`` (a stopped execution no longer
    changes). Built for each status change and handed down, never kept on the
    flow: the flow is built once and shared by every record (and by the local
    stack's threads), so a description kept there could reach another record.
    """

    def __init__(self, sfn: SFNClient, arn: str, described: dict[str, Any] | None = None) -> None:
        self._sfn = sfn
        self.arn = arn
        self._described = described

    def describe(self) -> dict[str, Any]:
        """``DescribeExecution`` of this execution, asked once."""
        if self._described is None:
            self._described = dict(self._sfn.describe_execution(executionArn=self.arn))
        return self._described


class UpdateStateFlow:
    """Handles one execution status change.

    Built once and shared by every record: it keeps no state of a record between
    calls (what one record needs, such as its execution's description, is passed down).
    """

    def __init__(
        self,
        *,
        settings: Settings,
        states: StateTable,
        dependencies: DependencyTable,
        sfn: SFNClient,
        bucket: PayloadBucket | None = None,
        sqs: SQSClient | None = None,
        parent_ended: Callable[[str, str], int] | None = None,
    ) -> None:
        self.settings = settings
        # Joins that cancel with their parent (joins/cancellation.py), told of every end:
        # any execution may be a join's parent, a payload's own workflow included.
        self._parent_ended = parent_ended
        self.states = states
        self.dependencies = dependencies
        self._sfn = sfn
        self._bucket = bucket
        self._sqs = sqs

    def handle(self, change: StatusChange) -> UpdateAction:
        """Record ``change`` on the payload and resolve the payload's waiters.

        An execution that ended is also a parent gone, for the joins linked to it.
        """
        if self._parent_ended is not None and change.final_state is not None:
            cancelled = self._parent_ended(change.execution_arn, change.status.value)
            if cancelled:
                logger.info("parent gone: its joins cancelled", extra={"joins": cancelled})
        return self._record(change, _Execution(self._sfn, change.execution_arn))

    def _record(self, change: StatusChange, execution: _Execution) -> UpdateAction:
        log_keys(execution_arn=change.execution_arn)
        action, resolved = self._handle(change, execution)
        logger.info("status change handled", extra={"action": action.value, "resolved": resolved})
        metrics.add_metric(name=action.metric_name, unit=MetricUnit.Count, value=1)
        if resolved:
            metrics.add_metric(name="WaitersResolved", unit=MetricUnit.Count, value=resolved)
        return action

    def _handle(self, change: StatusChange, execution: _Execution) -> tuple[UpdateAction, int]:
        final = change.final_state
        if final is None:
            return UpdateAction.NOT_TERMINAL, 0
        workflow = self.settings.workflow_of(change.state_machine_name)
        if workflow is None:
            return UpdateAction.NOT_MANAGED, 0
        payload = self._payload_of(change, execution)
        if payload is None:
            return UpdateAction.UNKNOWN_INPUT, 0
        set_correlation_id(payload.id)
        error = change.failure_error if not final.is_success else None
        cause = clip(change.cause) if not final.is_success else None
        attempt = naming.attempt_of(change.name, payload.id)
        result_json = (
            build_result(payload.id, attempt, self._output_of(change, execution), self._bucket)
            if final.is_success
            else None
        )
        try:
            item = self.states.set_final(
                payload_id=payload.id,
                workflow=workflow,
                state=final,
                execution_arn=change.execution_arn,
                attempt=attempt,
                error=error,
                cause=cause,
                result_json=result_json,
                run_rank=change.run_rank,
            )
            action = UpdateAction.RECORDED
        except TransitionConflictError:
            current = self.states.get(payload.id)
            if (
                current is None
                or current.execution_arn != change.execution_arn
                or current.state is not final
            ):
                return UpdateAction.STALE, 0
            # A repeat: the first delivery may have died before resolving everyone.
            item, action = current, UpdateAction.REPEATED
        resolved = self.dependencies.resolve_all(payload.id, Resolution.of(item, replayed=False))
        if final.is_success:
            # Also on a repeat: the first delivery may have died before publishing.
            self._chain(payload, change, execution)
        return action, resolved

    def _chain(self, payload: ProcessPayload, change: StatusChange, execution: _Execution) -> None:
        if len(payload.process) < 2:
            return
        try:
            body = next_payload(payload, self._output_of(change, execution))
        except ChainError as exc:
            logger.error("cannot chain to the next step", extra={"reason": str(exc)})
            metrics.add_metric(name="ChainFailed", unit=MetricUnit.Count, value=1)
            return
        if body is None:
            logger.info("chain stops: nothing selected for the next step")
            metrics.add_metric(name="ChainEmpty", unit=MetricUnit.Count, value=1)
            return
        if self._sqs is None or self.settings.process_queue_url is None:
            logger.error("cannot chain: no process queue is configured")
            metrics.add_metric(name="ChainFailed", unit=MetricUnit.Count, value=1)
            return
        message = json.dumps(body)
        if goes_by_reference(message):
            message = self._by_reference(body, message)
        # Runs after the waiters were resolved, and raises on any AWS error: the
        # status change is retried (then kept in the DLQ), the repeat finds the
        # same result (action repeated) and publishes again; the next payload's id
        # makes a second publication harmless.
        self._sqs.send_message(QueueUrl=self.settings.process_queue_url, MessageBody=message)
        logger.info("chained", extra={"next_workflow": body["process"][0]["workflow"]})
        metrics.add_metric(name="Chained", unit=MetricUnit.Count, value=1)

    def _by_reference(self, body: dict[str, Any], message: str) -> str:
        """``{"url": ...}`` naming the next step's body, written to the payload bucket.

        Raises:
            ConfigurationError: No payload bucket is configured; retrying cannot
                send the body, so the event lands in the DLQ for a redrive.
        """
        if self._bucket is None or not self._bucket.writable:
            metrics.add_metric(name="ChainFailed", unit=MetricUnit.Count, value=1)
            raise ConfigurationError(
                ENV_PAYLOAD_BUCKET,
                f"is needed to chain a next step of {utf8_size(message)} bytes "
                f"(over {MAX_INLINE_MESSAGE_BYTES} inline)",
            )
        reference = self._bucket.reference(chained_key(body), message)
        logger.info(
            "next step sent by reference", extra={"bytes": utf8_size(message), "body": reference}
        )
        return reference

    def _output_of(self, change: StatusChange, execution: _Execution) -> str | None:
        if change.output_url is not None:
            if self._bucket is None:
                raise ConfigurationError(
                    ENV_PAYLOAD_BUCKET, f"is needed to read the output at {change.output_url}"
                )
            # Raises when S3 cannot serve it: the report is retried, then kept in its DLQ.
            return self._bucket.read_url(change.output_url)
        if change.output_details.included:
            return change.output
        # EventBridge leaves out outputs over 248 KiB; ask Step Functions.
        output = execution.describe().get("output")
        return None if output is None else str(output)

    def record_described(self, described: dict[str, Any]) -> UpdateAction:
        """Record a run's end found by ``DescribeExecution`` (its event never came).

        The same path as an event: the runner, settling a payload past its lease
        (payloads/settling.py), uses it for a run that ended while its status event
        was lost or is still being retried, so nothing runs twice and every waiter
        is answered.
        """
        execution = _Execution(self._sfn, str(described["executionArn"]), described)
        try:
            return self._record(StatusChange.from_description(described), execution)
        finally:
            drop_log_keys("execution_arn")  # the caller's log lines are not about it

    def _payload_of(self, change: StatusChange, execution: _Execution) -> ProcessPayload | None:
        text = change.input
        if text is None or not change.input_details.included:
            # EventBridge leaves out inputs over 248 KiB; ask Step Functions.
            text = execution.describe().get("input")
        try:
            document = json.loads(text or "")
        except json.JSONDecodeError:
            document = None
        if isinstance(document, dict) and set(document) == {"url"} and self._bucket is not None:
            # A payload too large for the execution input travelled by reference.
            try:
                document = json.loads(self._bucket.read_url(str(document["url"])))
            except InvalidMessageError as exc:
                if exc.retryable:
                    # Missing or forbidden now (IAM propagation, an eventually consistent
                    # read): raise, so the change is retried and then kept in the DLQ,
                    # rather than dropped with the waiters never answered.
                    raise
                logger.error("cannot read the execution's payload", extra={"reason": str(exc)})
                return None
            except json.JSONDecodeError as exc:
                logger.error("cannot read the execution's payload", extra={"reason": str(exc)})
                return None
        try:
            return ProcessPayload.model_validate(document)
        except ValidationError as exc:
            # Expected for managed machines that are not payload workflows
            # (a parent such as wait-for-dependencies): nothing waits on them.
            logger.info(
                "execution input is not a process payload",
                extra={"error_count": exc.error_count()},
            )
            return None
