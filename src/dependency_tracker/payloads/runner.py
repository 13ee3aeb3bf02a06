"""Who runs a payload once its waiter row is written: one interface, two runners.

The process flow and join registration ask a :class:`PayloadRunner` to settle a
payload (start, replay or leave it) and never know which runner they have: the
tracker's own (:class:`TrackerRunner`, on the state table and Step Functions), or
cirrus's (:class:`~dependency_tracker.cirrus.flow.CirrusRuns`, in cirrus mode).
The composition root (:mod:`dependency_tracker.app`) picks one.

Ordering rule (docs/architecture.md): the waiter row is written *before* the
payload state is read with strong consistency; update-state writes the final state
*before* it reads the waiter rows. Whichever side runs second sees the other's write.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from dependency_tracker.core.enums import PayloadState
from dependency_tracker.core.errors import StartUnsettledError, TransitionConflictError
from dependency_tracker.core.observability import logger
from dependency_tracker.payloads.actions import ProcessAction, count
from dependency_tracker.table.items import Resolution

if TYPE_CHECKING:
    from dependency_tracker.payloads.model import ProcessPayload
    from dependency_tracker.payloads.runs import Runs
    from dependency_tracker.payloads.state_table import StateTable
    from dependency_tracker.table.dependency_table import DependencyTable
    from dependency_tracker.table.items import PayloadStateItem

# Each round re-reads after a lost conditional write; a few suffice, since a
# lost race always means the item moved forward.
MAX_ROUNDS = 5


class Unread:
    """Marker: the payload's state has not been read yet."""


UNREAD = Unread()


class PayloadRunner(Protocol):
    """Settles payloads whose waiter rows are written."""

    def check_startable(self, payload: ProcessPayload, task_token: str | None) -> None:
        """Refuse, before anything is written, a payload no run could take.

        Raises:
            InvalidMessageError: The payload can never run.
        """

    def settle(
        self,
        payload: ProcessPayload,
        row_id: str | None,
        *,
        message_id: str | None = None,
        seen: PayloadStateItem | Unread | None = UNREAD,
    ) -> ProcessAction:
        """Start, replay or leave ``payload``; ``row_id`` is its waiter's row, if any.

        ``seen`` is its state when the caller read it already (a join's batch read).
        """

    def wait_only(self, payload_id: str, row_id: str | None) -> ProcessAction:
        """Resolve a wait-only waiter if its payload already ended; never start it."""


class TrackerRunner:
    """The tracker's own runner: claims on the state table, runs on Step Functions."""

    def __init__(self, *, states: StateTable, dependencies: DependencyTable, runs: Runs) -> None:
        self.states = states
        self.dependencies = dependencies
        self.runs = runs

    def check_startable(self, payload: ProcessPayload, task_token: str | None) -> None:
        """See :meth:`PayloadRunner.check_startable`."""
        self.runs.check_startable(payload, task_token)

    def settle(
        self,
        payload: ProcessPayload,
        row_id: str | None,
        *,
        message_id: str | None = None,
        seen: PayloadStateItem | Unread | None = UNREAD,
    ) -> ProcessAction:
        """Start, replay or leave one payload; re-read after every lost race."""
        for _ in range(MAX_ROUNDS):
            if isinstance(seen, Unread):
                seen = self.states.get(payload.id)
            try:
                action = self._advance(payload, message_id, seen, row_id)
            except TransitionConflictError as exc:
                logger.info("lost a race, reading again", extra={"reason": str(exc)})
                seen = UNREAD
                continue
            return count(action, payload.id)
        raise TransitionConflictError(f"{payload.id} kept changing for {MAX_ROUNDS} rounds")

    def wait_only(self, payload_id: str, row_id: str | None) -> ProcessAction:
        """See :meth:`PayloadRunner.wait_only`."""
        seen = self.states.get(payload_id)
        if row_id is None or seen is None or not seen.state.is_terminal:
            action = ProcessAction.WAITING
        else:
            self.dependencies.resolve(payload_id, row_id, Resolution.of(seen, replayed=True))
            action = ProcessAction.REPLAYED
        return count(action, payload_id, wait_only=True)

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
                return after
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
        if seen.start_refused_at is not None:
            # AWS answered its StartExecution with an error: nothing runs under its name,
            # so any message starts it now (conditionally: once), under the same name.
            return self.runs.restart(payload, message_id, seen)
        if message_id is not None and seen.claim_message_id == message_id:
            # The claimer's own message again, and nothing says its start was refused: the
            # claimer may have died after StartExecution (or before it), its set_processing
            # may have failed, or a twin delivery may be starting it now. Starting anything,
            # under this name or a new attempt's, could make two live runs. The message
            # comes back until the run's report ends the attempt or the Express lease runs
            # out (the lease check above then claims a new attempt).
            raise StartUnsettledError(payload.id, seen.attempt)
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
        expected = payload.replace_if
        if expected is not None:
            # A rerun replaces only the outcome its sender saw. Found otherwise, another
            # submission replaced it first (a second operator, a retried send): this one is
            # a duplicate, answered from what is stored. The claim that follows a match is
            # conditional on that same state and attempt, so of two such reruns one starts.
            if expected.holds(seen.state, seen.attempt):
                return True
            logger.info(
                "rerun superseded: the payload moved on",
                extra={
                    "expected_state": expected.state.value,
                    "expected_attempt": expected.attempt,
                    "state": seen.state.value,
                    "attempt": seen.attempt,
                },
            )
            return False
        return seen.state.reruns or payload.replace
