"""Process flow: register the waiter, then start, replay or leave the payload.

Ordering rule (see docs/architecture.md): the waiter row is written *before*
the payload state is read with strong consistency. update-state writes the
final state *before* it reads the waiter rows. Whichever side runs second
sees the other's write, so no waiter is left behind.

Who settles the payload once the waiter row is written is the runner it is given
(payloads/runner.py): the tracker's own, or, in cirrus mode, a cirrus-geo deployment
(cirrus/flow.py): the same waiter rows, another runner. Messages reach it parsed and
routed (intake/route.py): payloads and waits only; joins register in joins/.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_lambda_powertools.metrics import MetricUnit

from dependency_tracker.core.enums import DependencyError, utcnow
from dependency_tracker.core.observability import logger, metrics, redact_token
from dependency_tracker.payloads.actions import ProcessAction, count
from dependency_tracker.table.items import WaiterItem, waiter_id_for
from dependency_tracker.waits.messages import ProcessMessage, WaitMessage

if TYPE_CHECKING:
    from dependency_tracker.cycles.guard import Cycle, CycleGuard
    from dependency_tracker.payloads.runner import PayloadRunner
    from dependency_tracker.table.dependency_table import DependencyTable

__all__ = ["ProcessAction", "ProcessFlow"]


class ProcessFlow:
    """Handles one payload or wait message at a time."""

    def __init__(
        self, *, dependencies: DependencyTable, runner: PayloadRunner, cycles: CycleGuard
    ) -> None:
        self.dependencies = dependencies
        self.runner = runner
        self.cycles = cycles

    def handle(self, message: ProcessMessage | WaitMessage) -> ProcessAction:
        """Register who waits, then make sure each payload runs once.

        Raises:
            InvalidMessageError: A payload is too large to start and there is no
                bucket to pass it by.
            UnknownWorkflowError: No state machine for the workflow (retryable:
                it may be deployed later; the claim stays for the next try).
            TransitionConflictError: The item kept changing under us (retryable).
        """
        if isinstance(message, ProcessMessage):
            token = message.callback.task_token if message.callback else None
            self.runner.check_startable(message.payload, token)
        waiter_id = self._register(message)
        if waiter_id is not None and self._refuse_cycle(message, waiter_id):
            return ProcessAction.REFUSED
        if isinstance(message, WaitMessage):
            return self.runner.wait_only(message.payload_id, waiter_id)
        return self.runner.settle(message.payload, waiter_id, message_id=message.message_id)

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


def _cycle_cause(cycle: Cycle) -> str:
    return f"waiting would close a dependency cycle: {cycle.describe()}"
