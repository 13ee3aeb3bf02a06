"""Callback flow: tell a parent how its dependency ended, once.

Send first, mark second: a crash in between re-sends on redelivery, which
Step Functions refuses harmlessly (``InvalidToken``/``TaskTimedOut``), while
marking first could lose the wake-up for good.

A throttled or 5xx ``SendTask*`` is retried here, with backoff
(:class:`~dependency_tracker.core.backoff.Backoff`), before the caller is told
to retry: the stream's event source mapping retries a failed record only a few
times and then discards it. A row whose record was discarded anyway stays
terminal and un-notified; the sweeper (:mod:`dependency_tracker.sweeper.flow`)
finds it and sends it through this same flow.

A send Step Functions refuses with ``AccessDeniedException`` (the callback role
may not answer the parent's state machine: it is not in the stack's
``ExtraParentStateMachineArns``) is not retried: no retry fixes it until the
grant is fixed. It is logged at ERROR with the fix, counted
(``CallbackRefused``) and recorded on the row, once (``notify_refused``); the row
stays un-notified, so the sweeper sends it again and, once the grant is fixed,
the parent gets its answer.
"""

from __future__ import annotations

import hashlib
import json
from enum import StrEnum, unique
from typing import TYPE_CHECKING

from aws_lambda_powertools.metrics import MetricUnit
from botocore.exceptions import ClientError

from dependency_tracker.core import naming
from dependency_tracker.core.backoff import Backoff, error_code, is_transient
from dependency_tracker.core.enums import DependencyError, PayloadState
from dependency_tracker.core.errors import CallbackDeliveryError
from dependency_tracker.core.limits import SFN_MAX_CAUSE_CHARS, SFN_MAX_ERROR_CHARS, utf8_size
from dependency_tracker.core.observability import (
    log_keys,
    logger,
    metrics,
    redact_token,
    set_correlation_id,
)
from dependency_tracker.core.tokens import (
    PARENT_GONE_CODES,
    PARENT_GRANT_PARAMETER,
    SEND_REFUSED_CODES,
)
from dependency_tracker.joins.outputs import MAX_JOIN_OUTPUT_BYTES
from dependency_tracker.joins.rows import MAX_JOIN_TOKENS, JoinItem, typed_row
from dependency_tracker.joins.summary import invalid_join_cause, read_summary
from dependency_tracker.table.items import MembershipItem, Resolution, WaiterItem
from dependency_tracker.waits.outputs import (
    CALLBACK_OUTPUTS_PREFIX,
    MAX_WAIT_OUTPUT_BYTES,
    CallbackFailure,
    CallbackSuccess,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from mypy_boto3_stepfunctions import SFNClient

    from dependency_tracker.core.settings import Settings
    from dependency_tracker.joins.counting import JoinCounting
    from dependency_tracker.joins.rows import Row
    from dependency_tracker.joins.store import JoinStore
    from dependency_tracker.payloads.bucket import PayloadBucket
    from dependency_tracker.table.dependency_table import DependencyTable

# The parent finished, timed out or was already resumed: nobody to tell.

# How a refused send is passed to the row's record (REFUSED:<code>); never a notify_outcome.
REFUSED_OUTCOME = "REFUSED:"


@unique
class CallbackAction(StrEnum):
    """What the callback flow did with a waiter row."""

    SENT = "sent"
    PARENT_GONE = "parent_gone"
    ALREADY_NOTIFIED = "already_notified"
    NOT_READY = "not_ready"
    RECORDED = "recorded"  # a join member's outcome was added to its join
    REFUSED = "refused"  # Step Functions refused the send (the grant): left for the sweeper

    @property
    def metric_name(self) -> str:
        """CloudWatch metric counting this action, e.g. ``CallbackSent``."""
        return "Callback" + self.value.title().replace("_", "")


class CallbackFlow:
    """Sends ``SendTaskSuccess``/``SendTaskFailure`` for terminal waiter rows."""

    def __init__(
        self,
        *,
        settings: Settings,
        dependencies: DependencyTable,
        sfn: SFNClient,
        joins: JoinStore,
        counting: JoinCounting,
        bucket: PayloadBucket | None = None,
        backoff: Backoff | None = None,
    ) -> None:
        self.settings = settings
        self.dependencies = dependencies
        self._sfn = sfn
        self._bucket = bucket
        # Retries of a throttled or 5xx SendTask* before the record is failed.
        self.backoff = backoff or Backoff()
        self.joins = joins
        self.counting = counting

    @property
    def sfn(self) -> SFNClient:
        """The Step Functions client the sends go through."""
        return self._sfn

    def handle(self, image: Row, *, deadline: float | None = None) -> CallbackAction:
        """Act on one dependency-table row from the stream (its new image).

        A task-token waiter or a join that turned terminal: tell the parent.
        A join membership that turned terminal: record it on the join, which
        turns terminal itself once its quorum is decided.

        ``deadline`` (on :attr:`backoff`'s monotonic clock) is when the caller
        must be done: no retry of a refused send waits past it.

        Raises:
            CallbackDeliveryError: Step Functions refused for a reason that a
                retry may fix (throttling, 5xx) and the retries here ran out;
                the stream record is retried. A refusal no retry fixes
                (:data:`SEND_REFUSED_CODES`) is recorded on the row instead
                (:attr:`CallbackAction.REFUSED`).
        """
        set_correlation_id(image.payload_id)
        if isinstance(image, MembershipItem):
            log_keys(join_id=image.join_id)
            action = self._record_membership(image)
        else:
            log_keys(token_hash=redact_token(image.task_token))
            action = self._notify(image, deadline)
        logger.info("callback handled", extra={"action": action.value})
        metrics.add_metric(name=action.metric_name, unit=MetricUnit.Count, value=1)
        return action

    def _current(self, image: Row) -> tuple[Row, Resolution] | None:
        """The row as stored now and its resolution, or None if nothing is left to do."""
        if image.resolution is None or image.notified_at is not None:
            return None
        # Streams deliver at least once: check the row, not just the image.
        current = self.dependencies.get_row(image.payload_id, image.waiter_id)
        if current is None or current.notified_at is not None or current.resolution is None:
            return None
        return typed_row(current), current.resolution

    def _notify(self, image: WaiterItem | JoinItem, deadline: float | None) -> CallbackAction:
        if image.resolution is None:
            return CallbackAction.NOT_READY
        found = self._current(image)
        if found is None:
            return CallbackAction.ALREADY_NOTIFIED
        current, resolution = found
        if isinstance(current, JoinItem):
            return self._notify_join(current, deadline)
        if not isinstance(current, WaiterItem):
            return CallbackAction.ALREADY_NOTIFIED
        action, outcome = self._send_waiter(current, resolution, deadline)
        if action is CallbackAction.REFUSED:
            self._record_refusal(current, outcome)
            return action
        self.dependencies.mark_notified(
            current.payload_id,
            current.waiter_id,
            outcome=outcome,
            retention_days=self.settings.waiter_retention_days,
        )
        return action

    def _notify_join(self, join: JoinItem, deadline: float | None) -> CallbackAction:
        """Answer every token of a decided join not answered yet, then mark the row told.

        A token added while this runs (the parent's send, retried) makes the
        final mark fail: the row is read again and the new token answered too.
        """
        action = CallbackAction.ALREADY_NOTIFIED
        # What the row records as told: a SENT answer over a refused one (every token may
        # have been answered already, by a delivery that died before its final mark).
        outcome = max(join.answered.values(), key=_told, default="")
        answer: tuple[DependencyError | None, str] | None = None
        for _ in range(MAX_JOIN_TOKENS + 1):
            pending = list(join.unanswered().values())
            if pending and answer is None:
                answer = self._join_answer(join)
            last: tuple[str, str] | None = None
            for token in pending:
                assert answer is not None  # noqa: S101  (built just above)
                sent, told = self._send_join(token, join.workflow_state, answer, deadline)
                if sent is CallbackAction.REFUSED:
                    # Every token is the same parent's: the others would be refused too.
                    self._record_refusal(join, told)
                    return sent
                outcome = max((outcome, told), key=_told) if outcome else told
                if token == pending[-1]:
                    last = (token, told)  # recorded with the final mark: one write
                else:
                    self.joins.mark_answered(join.join_id, token, told)
                if sent is CallbackAction.SENT or action is CallbackAction.ALREADY_NOTIFIED:
                    action = sent
            if self.joins.finish_answering(
                join,
                outcome=outcome,
                retention_days=self.settings.waiter_retention_days,
                last=last,
            ):
                return action
            if last is not None:
                self.joins.mark_answered(join.join_id, *last)
            current = self.joins.get(join.join_id)
            if current is None or current.notified_at is not None:
                return action
            join = current
        return action

    def _record_refusal(self, row: WaiterItem | JoinItem, outcome: str) -> None:
        """Log, and record on the row once, that Step Functions refused the row's answer.

        The row's write is a stream record the callback's filter passes: its delivery
        is refused again and writes nothing (the condition), so no loop follows.
        """
        code = outcome.removeprefix(REFUSED_OUTCOME)
        execution = row.parent_execution
        machine = None if execution is None else naming.state_machine_of(execution)
        extra = {
            "code": code,
            "parent_execution": execution,
            "parent_state_machine": machine,
            "join_id": row.join_id if isinstance(row, JoinItem) else None,
        }
        first = self.dependencies.mark_refused(row.payload_id, row.waiter_id, code=code)
        if not first:
            logger.warning("parent still may not be answered (refused before)", extra=extra)
            return
        logger.error(
            f"Step Functions refused to take the answer of parent {execution or '(unknown)'} "
            f"({code}): the tracker may not answer state machine {machine or '(unknown)'}; "
            f"add the parent's state machine ARN to the stack's {PARENT_GRANT_PARAMETER} parameter "
            "(the sweeper sends the answer again once the grant allows it)",
            extra=extra,
        )

    def _record_membership(self, image: MembershipItem) -> CallbackAction:
        if image.resolution is None:
            return CallbackAction.NOT_READY
        current = self.dependencies.get_row(image.payload_id, image.waiter_id)
        if not isinstance(current, MembershipItem) or current.resolution is None:
            return CallbackAction.ALREADY_NOTIFIED
        # Counted rows are checked too: the delivery that counted may have died
        # before deciding the join, and counting again is refused by the store.
        if not self.counting.record(current, current.resolution):
            return CallbackAction.ALREADY_NOTIFIED
        return CallbackAction.RECORDED

    def _send_waiter(
        self, waiter: WaiterItem, resolution: Resolution, deadline: float | None
    ) -> tuple[CallbackAction, str]:
        if resolution.state is PayloadState.SUCCEEDED:
            success = CallbackSuccess(
                payload_id=waiter.payload_id,
                execution_arn=resolution.execution_arn,
                replayed=resolution.replayed,
                result=json.loads(resolution.result_json) if resolution.result_json else None,
            )
            output = self._bounded(
                success.to_json(),
                key=_output_key("wait", waiter.payload_id, waiter.waiter_id),
                reference=success.reference,
                limit=MAX_WAIT_OUTPUT_BYTES,
            )
            return self._send(waiter.task_token, resolution.state, deadline=deadline, output=output)
        failure = CallbackFailure(
            error=waiter.error_name or DependencyError.for_state(resolution.state),
            payload_id=waiter.payload_id,
            state=resolution.state,
            execution_arn=resolution.execution_arn,
            payload_error=resolution.error,
            payload_cause=resolution.cause,
        )
        return self._send(
            waiter.task_token,
            resolution.state,
            deadline=deadline,
            error=failure.error,
            cause=failure.cause_json(),
        )

    def join_output(self, join: JoinItem) -> str:
        """What a decided join sends: its summary, or a reference past the bound.

        The same text is the success output and the ``QuorumUnreachable`` cause:
        at most :data:`MAX_JOIN_OUTPUT_BYTES`, which fits both limits. Past it the
        full summary is written to the payload bucket first.
        """
        summary = read_summary(self.joins, join)
        return self._bounded(
            summary.to_json(),
            key=_output_key("join", join.payload_id, join.waiter_id),
            reference=summary.reference,
            limit=MAX_JOIN_OUTPUT_BYTES,
        )

    def _join_answer(self, join: JoinItem) -> tuple[DependencyError | None, str]:
        """What every token of a decided join hears: (error or None, output or cause)."""
        error = DependencyError(join.error) if join.error else DependencyError.QUORUM_UNREACHABLE
        if error is DependencyError.INVALID_JOIN:
            # Decided while registering (a bad manifest chunk, a quorum over n): the
            # reason is the news, not the members.
            return error, invalid_join_cause(join)
        text = self.join_output(join)
        if join.workflow_state is PayloadState.SUCCEEDED:
            return None, text
        return error, text

    def _send_join(
        self,
        token: str,
        state: PayloadState,
        answer: tuple[DependencyError | None, str],
        deadline: float | None,
    ) -> tuple[CallbackAction, str]:
        error, text = answer
        if error is None:
            return self._send(token, state, deadline=deadline, output=text)
        return self._send(token, state, deadline=deadline, error=error, cause=text)

    def _bounded(
        self, full: str, *, key: str, reference: Callable[[str | None], str], limit: int
    ) -> str:
        """``full`` if it fits in ``limit`` bytes, else a reference to it in the bucket.

        The key is derived from the row, so a redelivered record writes the same
        object. Without a bucket the reference says ``truncated`` and names none:
        an output over the limit is never sent.
        """
        size = utf8_size(full)
        if size <= limit:
            return full
        if self._bucket is None or not self._bucket.writable:
            logger.warning(
                "callback output over its bound and no payload bucket: sent truncated",
                extra={"bytes": size, "bound": limit},
            )
            metrics.add_metric(name="CallbackOutputsTruncated", unit=MetricUnit.Count, value=1)
            return reference(None)
        url = self._bucket.write(key, full)
        logger.info("callback output stored", extra={"bytes": size, "bound": limit, "url": url})
        metrics.add_metric(name="CallbackOutputsStored", unit=MetricUnit.Count, value=1)
        return reference(url)

    def _send(
        self,
        task_token: str,
        state: PayloadState,
        *,
        deadline: float | None,
        output: str | None = None,
        error: DependencyError | None = None,
        cause: str | None = None,
    ) -> tuple[CallbackAction, str]:
        def send() -> None:
            if error is None:
                self._sfn.send_task_success(taskToken=task_token, output=output or "{}")
            else:
                # Both are bounded upstream (error names are short, causes are
                # fitted JSON); the cut is the last guard against AWS's refusal.
                self._sfn.send_task_failure(
                    taskToken=task_token,
                    error=error.value[:SFN_MAX_ERROR_CHARS],
                    cause=(cause or "")[:SFN_MAX_CAUSE_CHARS],
                )

        try:
            self.backoff.call(send, deadline=deadline, on_retry=_count_retry)
        except ClientError as exc:
            code = error_code(exc)
            if code in PARENT_GONE_CODES:
                logger.info("parent no longer waits", extra={"code": code})
                return CallbackAction.PARENT_GONE, f"PARENT_GONE:{code}"
            if code in SEND_REFUSED_CODES:
                return CallbackAction.REFUSED, f"{REFUSED_OUTCOME}{code}"
            if is_transient(exc):
                # Retried here as long as allowed: the stream retries the record next,
                # then discards it, and the sweeper sends what it left behind.
                logger.warning("callback still refused after retries", extra={"code": code})
                metrics.add_metric(name="CallbackSendsExhausted", unit=MetricUnit.Count, value=1)
            raise CallbackDeliveryError(code, redact_token(task_token) or "") from exc
        return CallbackAction.SENT, f"SENT:{state.value}"


def _told(outcome: str) -> bool:
    """Orders a join row's answers: one that reached a parent first."""
    return outcome.startswith("SENT:")


def _count_retry(exc: ClientError, retry: int, wait: float) -> None:
    """Log and count one retry of a refused send (the wait it is about to take)."""
    logger.info(
        "callback refused, retrying",
        extra={"code": error_code(exc), "retry": retry, "wait_seconds": round(wait, 3)},
    )
    metrics.add_metric(name="CallbackSendRetries", unit=MetricUnit.Count, value=1)


def _output_key(kind: str, payload_id: str, waiter_id: str) -> str:
    """Key of a row's stored callback output: the same for every delivery of the row."""
    digest = hashlib.sha256(f"{payload_id}\n{waiter_id}".encode()).hexdigest()
    return f"{CALLBACK_OUTPUTS_PREFIX}/{kind}/{digest}.json"
