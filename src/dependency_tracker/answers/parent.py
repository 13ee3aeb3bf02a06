"""Answer one parent's task token: the send both callback paths (waiters, joins) share.

A throttled or 5xx ``SendTask*`` is retried here, with backoff
(:class:`~dependency_tracker.core.backoff.Backoff`), before the caller is told
to retry: the stream's event source mapping retries a failed record only a few
times and then discards it (the sweeper finds what it left).

A send Step Functions refuses with ``AccessDeniedException`` (the callback role
may not answer the parent's state machine: it is not in the stack's
``ExtraParentStateMachineArns``) is not retried: no retry fixes it until the
grant is fixed. The caller records it on the row with :meth:`ParentAnswers.record_refusal`:
logged at ERROR with the fix, once (``notify_refused``); the row stays
un-notified, so the sweeper sends it again and, once the grant is fixed, the
parent gets its answer.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Protocol, TypeVar

from aws_lambda_powertools.metrics import MetricUnit
from botocore.exceptions import ClientError

from dependency_tracker.answers.actions import REFUSED_OUTCOME, SENT_OUTCOME, CallbackAction
from dependency_tracker.core import naming
from dependency_tracker.core.backoff import Backoff, error_code, is_transient
from dependency_tracker.core.errors import CallbackDeliveryError
from dependency_tracker.core.limits import SFN_MAX_CAUSE_CHARS, SFN_MAX_ERROR_CHARS, utf8_size
from dependency_tracker.core.observability import logger, metrics, redact_token
from dependency_tracker.core.tokens import (
    PARENT_GONE_CODES,
    PARENT_GONE_OUTCOME,
    PARENT_GRANT_PARAMETER,
    SEND_REFUSED_CODES,
)
from dependency_tracker.table.items import DependencyRow

if TYPE_CHECKING:
    from collections.abc import Callable

    from mypy_boto3_stepfunctions import SFNClient

    from dependency_tracker.core.enums import DependencyError, PayloadState
    from dependency_tracker.payloads.bucket import PayloadBucket
    from dependency_tracker.table.dependency_table import DependencyTable
    from dependency_tracker.table.items import Resolution

# Key prefix, in the payload bucket, of outputs past their bound.
CALLBACK_OUTPUTS_PREFIX = "callback-outputs"

_Row = TypeVar("_Row", bound=DependencyRow)


class Answerable(Protocol):
    """A row that holds a parent's token: a waiter or a join."""

    @property
    def payload_id(self) -> str:
        """The row's partition key (a join's is its join partition)."""
        ...

    @property
    def waiter_id(self) -> str:
        """The row's sort key."""
        ...

    @property
    def parent_execution(self) -> str | None:
        """The parent's execution ARN, when its message named it."""
        ...


class ParentAnswers:
    """Sends ``SendTaskSuccess``/``SendTaskFailure`` to a parent's token, and what goes with it."""

    def __init__(
        self,
        *,
        sfn: SFNClient,
        dependencies: DependencyTable,
        bucket: PayloadBucket | None = None,
        backoff: Backoff | None = None,
    ) -> None:
        self._sfn = sfn
        self.dependencies = dependencies
        self._bucket = bucket
        # Retries of a throttled or 5xx SendTask* before the record is failed.
        self.backoff = backoff or Backoff()

    @property
    def sfn(self) -> SFNClient:
        """The Step Functions client the sends go through."""
        return self._sfn

    def pending(self, image: _Row) -> tuple[_Row, Resolution] | None:
        """The row as stored now and its resolution, if it is terminal and not told yet.

        Streams deliver at least once: the row is checked, not just the image.
        """
        if image.resolution is None or image.notified_at is not None:
            return None
        current = self.dependencies.get_row(image.payload_id, image.waiter_id)
        if not isinstance(current, type(image)):
            return None
        if current.notified_at is not None or current.resolution is None:
            return None
        return current, current.resolution

    def send(
        self,
        task_token: str,
        state: PayloadState,
        *,
        deadline: float | None,
        output: str | None = None,
        error: DependencyError | None = None,
        cause: str | None = None,
    ) -> tuple[CallbackAction, str]:
        """Answer ``task_token``: success with ``output``, or failure with ``error``/``cause``.

        Returns what happened and how the row records it (``SENT:<state>``,
        ``PARENT_GONE:<code>``, or ``REFUSED:<code>``, which is never a ``notify_outcome``).
        ``deadline`` (on :attr:`backoff`'s monotonic clock): no retry waits past it.

        Raises:
            CallbackDeliveryError: Step Functions refused for a reason that a
                retry may fix (throttling, 5xx) and the retries here ran out, or
                for a reason nobody here can fix; the stream record is retried.
        """

        def attempt() -> None:
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
            self.backoff.call(attempt, deadline=deadline, on_retry=_count_retry)
        except ClientError as exc:
            code = error_code(exc)
            if code in PARENT_GONE_CODES:
                logger.info("parent no longer waits", extra={"code": code})
                return CallbackAction.PARENT_GONE, f"{PARENT_GONE_OUTCOME}{code}"
            if code in SEND_REFUSED_CODES:
                return CallbackAction.REFUSED, f"{REFUSED_OUTCOME}{code}"
            if is_transient(exc):
                # Retried here as long as allowed: the stream retries the record next,
                # then discards it, and the sweeper sends what it left behind.
                logger.warning("callback still refused after retries", extra={"code": code})
                metrics.add_metric(name="CallbackSendsExhausted", unit=MetricUnit.Count, value=1)
            raise CallbackDeliveryError(code, redact_token(task_token) or "") from exc
        return CallbackAction.SENT, f"{SENT_OUTCOME}{state.value}"

    def record_refusal(self, row: Answerable, outcome: str, *, join_id: str | None = None) -> None:
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
            "join_id": join_id,
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

    def bounded(
        self,
        full: str,
        *,
        row: Answerable,
        kind: str,
        reference: Callable[[str | None], str],
        limit: int,
    ) -> str:
        """``full`` if it fits in ``limit`` bytes, else a reference to it in the bucket.

        The key is derived from the row (``kind``: ``wait`` or ``join``), so a
        redelivered record writes the same object. Without a bucket the reference
        says ``truncated`` and names none: an output over the limit is never sent.
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
        url = self._bucket.write(output_key(kind, row.payload_id, row.waiter_id), full)
        logger.info("callback output stored", extra={"bytes": size, "bound": limit, "url": url})
        metrics.add_metric(name="CallbackOutputsStored", unit=MetricUnit.Count, value=1)
        return reference(url)


def output_key(kind: str, payload_id: str, waiter_id: str) -> str:
    """Key of a row's stored callback output: the same for every delivery of the row."""
    digest = hashlib.sha256(f"{payload_id}\n{waiter_id}".encode()).hexdigest()
    return f"{CALLBACK_OUTPUTS_PREFIX}/{kind}/{digest}.json"


def _count_retry(exc: ClientError, retry: int, wait: float) -> None:
    """Log and count one retry of a refused send (the wait it is about to take)."""
    logger.info(
        "callback refused, retrying",
        extra={"code": error_code(exc), "retry": retry, "wait_seconds": round(wait, 3)},
    )
    metrics.add_metric(name="CallbackSendRetries", unit=MetricUnit.Count, value=1)
