"""Callback flow: one dependency-table row, from the stream or the sweeper, to the flow of its kind.

A waiter row (a parent's own token) goes to the waits
(:class:`~dependency_tracker.waits.callback.WaiterNotifier`); a join's membership
row and the join row itself go to the joins
(:class:`~dependency_tracker.joins.notify.JoinNotifier`). Neither knows the other:
both answer tokens through one :class:`~dependency_tracker.answers.parent.ParentAnswers`.
Every row is logged and counted here, once (``Callback<Action>``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_lambda_powertools.metrics import MetricUnit

from dependency_tracker.answers.actions import CallbackAction
from dependency_tracker.core.observability import (
    log_keys,
    logger,
    metrics,
    redact_token,
    set_correlation_id,
)
from dependency_tracker.table.items import MembershipItem, WaiterItem

if TYPE_CHECKING:
    from mypy_boto3_stepfunctions import SFNClient

    from dependency_tracker.answers.parent import ParentAnswers
    from dependency_tracker.core.backoff import Backoff
    from dependency_tracker.joins.notify import JoinNotifier
    from dependency_tracker.joins.rows import Row
    from dependency_tracker.waits.callback import WaiterNotifier


class CallbackFlow:
    """Hands each terminal row to the waits or the joins; tells the caller what was done."""

    def __init__(
        self, *, answers: ParentAnswers, waiters: WaiterNotifier, joins: JoinNotifier
    ) -> None:
        self.answers = answers
        self.waiters = waiters
        self.joins = joins

    @property
    def sfn(self) -> SFNClient:
        """The Step Functions client the answers go through."""
        return self.answers.sfn

    @property
    def backoff(self) -> Backoff:
        """How a throttled or 5xx send is retried (the answers' own)."""
        return self.answers.backoff

    @backoff.setter
    def backoff(self, backoff: Backoff) -> None:
        self.answers.backoff = backoff

    def handle(self, image: Row, *, deadline: float | None = None) -> CallbackAction:
        """Act on one dependency-table row from the stream (its new image).

        A task-token waiter or a join that turned terminal: tell the parent.
        A join membership that turned terminal: record it on the join, which
        turns terminal itself once its quorum is decided. A row of any kind
        not terminal yet: :attr:`CallbackAction.NOT_READY`.

        ``deadline`` (on :attr:`backoff`'s monotonic clock) is when the caller
        must be done: no retry of a refused send waits past it.

        Raises:
            CallbackDeliveryError: Step Functions refused for a reason that a
                retry may fix (throttling, 5xx) and the retries ran out; the
                stream record is retried. A refusal no retry fixes (the grant)
                is recorded on the row instead (:attr:`CallbackAction.REFUSED`).
        """
        set_correlation_id(image.payload_id)
        if isinstance(image, MembershipItem):
            log_keys(join_id=image.join_id)
        else:
            log_keys(token_hash=redact_token(image.task_token))
        if image.resolution is None:
            action = CallbackAction.NOT_READY
        elif isinstance(image, MembershipItem):
            action = self.joins.record_member(image)
        elif isinstance(image, WaiterItem):
            action = self.waiters.notify(image, deadline=deadline)
        else:
            action = self.joins.notify(image, deadline=deadline)
        logger.info("callback handled", extra={"action": action.value})
        metrics.add_metric(name=action.metric_name, unit=MetricUnit.Count, value=1)
        return action
