"""Waiter callbacks: tell a parent waiting with its own token how its dependency ended, once.

Send first, mark second: a crash in between re-sends on redelivery, which
Step Functions refuses harmlessly (``InvalidToken``/``TaskTimedOut``), while
marking first could lose the wake-up for good.

The send itself (its retries, a parent gone, a refused grant, an output past its
bound) is :class:`~dependency_tracker.answers.parent.ParentAnswers`'s, shared
with the joins' callbacks (:mod:`dependency_tracker.joins.notify`). A row whose
stream record was discarded stays terminal and un-notified; the sweeper
(:mod:`dependency_tracker.sweeper.flow`) finds it and sends it through the same
path (:class:`~dependency_tracker.callbacks.flow.CallbackFlow`).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from dependency_tracker.answers.actions import CallbackAction
from dependency_tracker.core.enums import DependencyError, PayloadState
from dependency_tracker.waits.outputs import MAX_WAIT_OUTPUT_BYTES, CallbackFailure, CallbackSuccess

if TYPE_CHECKING:
    from dependency_tracker.answers.parent import ParentAnswers
    from dependency_tracker.table.dependency_table import DependencyTable
    from dependency_tracker.table.items import Resolution, WaiterItem


class WaiterNotifier:
    """Sends ``SendTaskSuccess``/``SendTaskFailure`` for terminal waiter rows, then marks them."""

    def __init__(
        self, *, answers: ParentAnswers, dependencies: DependencyTable, retention_days: int
    ) -> None:
        self.answers = answers
        self.dependencies = dependencies
        self.retention_days = retention_days

    def notify(self, image: WaiterItem, *, deadline: float | None = None) -> CallbackAction:
        """Answer the parent of a terminal waiter row (its stream image) and mark the row told.

        Raises:
            CallbackDeliveryError: The send failed in a way a retry of the record may fix.
        """
        found = self.answers.pending(image)
        if found is None:
            return CallbackAction.ALREADY_NOTIFIED
        current, resolution = found
        action, outcome = self._send(current, resolution, deadline)
        if action is CallbackAction.REFUSED:
            self.answers.record_refusal(current, outcome)
            return action
        self.dependencies.mark_notified(
            current.payload_id,
            current.waiter_id,
            outcome=outcome,
            retention_days=self.retention_days,
        )
        return action

    def _send(
        self, waiter: WaiterItem, resolution: Resolution, deadline: float | None
    ) -> tuple[CallbackAction, str]:
        if resolution.state is PayloadState.SUCCEEDED:
            success = CallbackSuccess(
                payload_id=waiter.payload_id,
                execution_arn=resolution.execution_arn,
                replayed=resolution.replayed,
                result=json.loads(resolution.result_json) if resolution.result_json else None,
            )
            output = self.answers.bounded(
                success.to_json(),
                row=waiter,
                kind="wait",
                reference=success.reference,
                limit=MAX_WAIT_OUTPUT_BYTES,
            )
            return self.answers.send(
                waiter.task_token, resolution.state, deadline=deadline, output=output
            )
        failure = CallbackFailure(
            error=waiter.error_name or DependencyError.for_state(resolution.state),
            payload_id=waiter.payload_id,
            state=resolution.state,
            execution_arn=resolution.execution_arn,
            payload_error=resolution.error,
            payload_cause=resolution.cause,
        )
        return self.answers.send(
            waiter.task_token,
            resolution.state,
            deadline=deadline,
            error=failure.error,
            cause=failure.cause_json(),
        )
