"""The runs of payloads: start one per attempt, and describe it when its lease runs out.

What settling a payload does is decided in payloads/settling.py, from the facts the
runner (payloads/runner.py) gathers; this module holds only operations on Step Functions:
the execution input, the start under a name derived from the payload id and attempt, and
the two questions a live attempt's facts need (is the workflow Express, what became of
the attempt's run). Standard starts are idempotent by name; Express starts are not, and Express
runs cannot be described.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.metrics import MetricUnit
from botocore.exceptions import ClientError

from dependency_tracker.core import naming
from dependency_tracker.core.backoff import is_throttled
from dependency_tracker.core.errors import (
    InvalidMessageError,
    StartDeferredError,
    TransitionConflictError,
    UnknownWorkflowError,
)
from dependency_tracker.core.observability import logger, metrics
from dependency_tracker.core.pacing import current_deadline

if TYPE_CHECKING:
    from mypy_boto3_stepfunctions import SFNClient
    from mypy_boto3_stepfunctions.type_defs import StartExecutionOutputTypeDef

    from dependency_tracker.core.backoff import Backoff
    from dependency_tracker.core.settings import Settings
    from dependency_tracker.payloads.bucket import PayloadBucket
    from dependency_tracker.payloads.model import ProcessPayload
    from dependency_tracker.payloads.state_table import StateTable
    from dependency_tracker.table.items import PayloadStateItem

# An Express run stops after five minutes at most; its report then crosses the status-report
# queue. Past this, an Express attempt without a final state lost its report (or never
# started): a new attempt runs.
EXPRESS_LEASE_SECONDS = 600
# Step Functions takes 256 KiB of input; leave room for the envelope.
MAX_INLINE_INPUT_BYTES = 250_000
# An Express run reports its own end with its input as an escaped JSON string (JSON escaping
# at most doubles it) in one SQS message of 256 KiB: inputs past this go by pointer.
MAX_EXPRESS_INLINE_INPUT_BYTES = 100_000
LARGE_INPUT_PREFIX = "payloads"


def lease_seconds(claim_lease_seconds: int, *, express: bool) -> int:
    """The lease of an attempt: the claim lease, at most EXPRESS_LEASE_SECONDS for Express."""
    return min(claim_lease_seconds, EXPRESS_LEASE_SECONDS) if express else claim_lease_seconds


class Runs:
    """Starts payload runs and answers what a lease asks about them."""

    def __init__(
        self,
        *,
        settings: Settings,
        states: StateTable,
        sfn: SFNClient,
        bucket: PayloadBucket,
        pacing: Backoff | None = None,
    ) -> None:
        self.settings = settings
        # How a throttled start waits for Step Functions' quota (core/pacing.py); None:
        # botocore's own retries only, then the start fails.
        self._pacing = pacing
        self.states = states
        self._sfn = sfn
        self._bucket = bucket
        # Per workflow, not per record: a state machine's type never changes, so what one
        # record found holds for every record (two threads may each ask once).
        self._express: dict[str, bool] = {}

    def is_express(self, workflow: str, seen: PayloadStateItem | None) -> bool:
        """Whether the workflow's runs are Express (not idempotent, not describable).

        The recorded run's ARN says so; a claim that has not started yet asks
        ``DescribeStateMachine`` once per workflow for this Lambda environment.
        """
        if seen is not None and seen.execution_arn is not None:
            return naming.is_express_arn(seen.execution_arn)
        express = self._express.get(workflow)
        if express is None:
            try:
                described = self._sfn.describe_state_machine(
                    stateMachineArn=self.settings.state_machine_arn(workflow)
                )
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") == "StateMachineDoesNotExist":
                    return False  # starting it reports the unknown workflow
                raise
            express = self._express[workflow] = described.get("type") == "EXPRESS"
        return express

    def describe_attempt(self, payload: ProcessPayload, attempt: int) -> dict[str, Any] | None:
        """``DescribeExecution`` of ``attempt``'s Standard run; None when there is no such run.

        The run is named from the payload id and attempt, not read from the item: an item
        may still name an older run. Express runs cannot be described.
        """
        arn = naming.execution_arn(
            self.settings.state_machine_arn(payload.workflow),
            naming.execution_name(payload.id, attempt),
        )
        try:
            described = dict(self._sfn.describe_execution(executionArn=arn))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ExecutionDoesNotExist":
                raise
            return None
        logger.info("lease expired", extra={"execution_arn": arn, "status": described["status"]})
        return described

    def check_startable(self, payload: ProcessPayload, task_token: str | None) -> None:
        """Refuse, before anything is written, a payload no execution could take."""
        if self._bucket.writable:
            return
        try:
            size = len(payload.execution_input().encode("utf-8"))
        except InvalidMessageError as exc:
            exc.task_token = exc.task_token or task_token
            raise
        # The Express limit too: past it, the start after the claim would fail with
        # nobody to tell.
        limit = self._inline_limit(payload, size)
        if size > limit:
            raise InvalidMessageError(
                f"payload {payload.id} exceeds the {limit}-byte execution "
                "input limit and no payload bucket is configured",
                task_token=task_token,
                payload_id=payload.id,
            )

    def _inline_limit(self, payload: ProcessPayload, size: int) -> int:
        """The largest execution input of ``payload`` that may go inline."""
        # Only a size between the two limits needs the workflow's type (a cached
        # DescribeStateMachine): nearly every start skips the question.
        if size > MAX_EXPRESS_INLINE_INPUT_BYTES and self.is_express(payload.workflow, None):
            return MAX_EXPRESS_INLINE_INPUT_BYTES
        return MAX_INLINE_INPUT_BYTES

    def input(self, payload: ProcessPayload, attempt: int) -> str:
        """The execution input: the payload, or an S3 pointer when it is too large.

        The pointer's key is derived from the payload id and attempt, so a
        retried start sends the same input (StartExecution stays idempotent).
        """
        text = payload.execution_input()
        size = len(text.encode("utf-8"))
        limit = self._inline_limit(payload, size)
        if size <= limit:
            return text
        if not self._bucket.writable:
            raise InvalidMessageError(
                f"payload {payload.id} exceeds the {limit}-byte execution "
                "input limit and no payload bucket is configured"
            )
        digest = hashlib.sha256(payload.id.encode("utf-8")).hexdigest()
        url = self._bucket.write(f"{LARGE_INPUT_PREFIX}/{digest}/{attempt}.json", text)
        logger.info("large payload passed by reference", extra={"url": url})
        return json.dumps({"url": url})

    def start(self, payload: ProcessPayload, attempt: int) -> None:
        """Start ``attempt`` of ``payload`` under its derived name and record it as running.

        Raises:
            UnknownWorkflowError: No state machine for the workflow (retryable).
        """
        state_machine_arn = self.settings.state_machine_arn(payload.workflow)
        name = naming.execution_name(payload.id, attempt)
        try:
            response = self._start(state_machine_arn, name, self.input(payload, attempt))
            execution_arn = response["executionArn"]
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code")
            if code == "ExecutionAlreadyExists":
                execution_arn = naming.execution_arn(state_machine_arn, name)
            elif code == "StateMachineDoesNotExist":
                metrics.add_metric(name="UnknownWorkflow", unit=MetricUnit.Count, value=1)
                raise UnknownWorkflowError(payload.workflow, state_machine_arn) from exc
            else:
                self._refused(payload, attempt, str(code))
                if self._pacing is not None and is_throttled(exc):
                    # The deadline came first: the work goes back to its queue, not failed.
                    raise StartDeferredError(payload.id, str(code)) from exc
                raise
        logger.info("execution started", extra={"execution_arn": execution_arn, "attempt": attempt})
        try:
            self.states.set_processing(payload.id, attempt, execution_arn)
        except TransitionConflictError:
            # Another invocation recorded it, or it already finished: both fine.
            logger.info("execution already recorded", extra={"execution_arn": execution_arn})

    def _start(self, arn: str, name: str, execution_input: str) -> StartExecutionOutputTypeDef:
        """One ``StartExecution``; throttled, it waits for the quota while the deadline allows."""

        def start() -> StartExecutionOutputTypeDef:
            return self._sfn.start_execution(stateMachineArn=arn, name=name, input=execution_input)

        if self._pacing is None:
            return start()
        return self._pacing.call(start, deadline=current_deadline(), retry_on=is_throttled)

    def _refused(self, payload: ProcessPayload, attempt: int, code: str) -> None:
        """AWS answered an Express ``StartExecution`` with an error: say so on the claim.

        An error answer means no run started, so the attempt may be started again under
        its name at once. Without the mark (a crash, a timeout: no answer) nobody can
        tell whether it started, and only its report or the lease settles it. Best
        effort: if the mark cannot be written, the attempt is simply unsettled.
        """
        try:
            if not self.is_express(payload.workflow, None):
                return
            marked = self.states.refuse_start(payload.id, attempt)
        except ClientError:
            logger.warning("could not mark a refused Express start", extra={"code": code})
            return
        logger.info(
            "express start refused", extra={"attempt": attempt, "code": code, "marked": marked}
        )
