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

from dependency_tracker.core.enums import utcnow
from dependency_tracker.core.errors import StartUnsettledError, TransitionConflictError
from dependency_tracker.core.observability import logger
from dependency_tracker.payloads import settling
from dependency_tracker.payloads.actions import ProcessAction, count
from dependency_tracker.payloads.runs import lease_seconds
from dependency_tracker.payloads.settling import AttemptRun, Facts, Settle
from dependency_tracker.table.items import Resolution

if TYPE_CHECKING:
    from dependency_tracker.payloads.model import ProcessPayload
    from dependency_tracker.payloads.runs import Runs
    from dependency_tracker.payloads.state_table import StateTable
    from dependency_tracker.payloads.update_state import UpdateAction, UpdateStateFlow
    from dependency_tracker.table.dependency_table import DependencyTable
    from dependency_tracker.table.items import PayloadStateItem

# Each round re-reads after a lost conditional write; a few suffice, since a
# lost race always means the item moved forward.
MAX_ROUNDS = 5


class Unread:
    """Marker: the payload's state has not been read yet."""


UNREAD = Unread()

# The decisions that start a run, and what each is counted as.
STARTS = {
    Settle.START: ProcessAction.STARTED,
    Settle.TAKE_OVER: ProcessAction.TOOK_OVER,
    Settle.RESUME_START: ProcessAction.RESUMED_START,
    Settle.RESTART: ProcessAction.RESUMED_START,
}


class Reopener(Protocol):
    """Takes back the outcomes of a payload's earlier run that undecided joins counted."""

    def reopen(self, payload_id: str) -> int:
        """Before a later attempt of ``payload_id`` starts; how many were taken back."""
        ...


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
    """The tracker's own runner: claims on the state table, runs on Step Functions.

    Settling reads the payload's state, gathers the facts a live attempt needs, asks
    :func:`~dependency_tracker.payloads.settling.decide` and does what it answers.
    """

    def __init__(
        self,
        *,
        states: StateTable,
        dependencies: DependencyTable,
        runs: Runs,
        recorder: UpdateStateFlow,
        claim_lease_seconds: int,
        reopener: Reopener | None = None,
    ) -> None:
        self.states = states
        # A later attempt's joins count its outcome, not the earlier one's.
        self.reopener = reopener
        self.dependencies = dependencies
        self.runs = runs
        # A lease that finds the run ended records it as update-state would.
        self.recorder = recorder
        self.claim_lease_seconds = claim_lease_seconds

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
        """One round: gather the facts, decide once, do it."""
        facts = self._facts(payload, seen)
        settle = settling.decide(payload, message_id, seen, facts)
        if settle is Settle.RECORD:
            settle = settling.after_record(self._record(payload, facts))
        started = STARTS.get(settle)
        if started is None:
            return self._leave(settle, payload, seen, row_id)
        attempt = self._attempt(settle, payload, message_id, seen)
        if attempt > 1 and self.reopener is not None:
            # Claimed and not started yet: the run's end comes after this, so it
            # finds the rows taken back in PROCESSING (and a resumed start does it again).
            self.reopener.reopen(payload.id)
        self.runs.start(payload, attempt)
        return started

    def _attempt(
        self,
        settle: Settle,
        payload: ProcessPayload,
        message_id: str | None,
        seen: PayloadStateItem | None,
    ) -> int:
        """The attempt ``settle`` starts: claimed now, reclaimed after a refusal, or claimed."""
        if settle in (Settle.START, Settle.TAKE_OVER):
            return self.states.claim(payload, seen, message_id=message_id).attempt
        if seen is None:
            msg = f"{payload.id}: an unknown payload is claimed before it starts, not {settle}"
            raise ValueError(msg)
        if settle is Settle.RESTART:
            # Nothing ran under its name, so this is its first run; a new attempt would
            # leave the name unused and climb for nothing.
            return self.states.reclaim_refused(seen, message_id=message_id).attempt
        return seen.attempt

    def _leave(
        self,
        settle: Settle,
        payload: ProcessPayload,
        seen: PayloadStateItem | None,
        row_id: str | None,
    ) -> ProcessAction:
        """Do what ``settle`` says when it starts nothing."""
        if seen is None:
            msg = f"{payload.id}: an unknown payload is only started, not {settle}"
            raise ValueError(msg)
        match settle:
            case Settle.RECOVERED:
                return ProcessAction.RECOVERED
            case Settle.READ_AGAIN:
                raise TransitionConflictError(f"{payload.id}: a newer run was recorded")
            case Settle.WAIT:
                return ProcessAction.WAITING
            case Settle.UNSETTLED:
                raise StartUnsettledError(payload.id, seen.attempt)
            case Settle.REPLAY | Settle.SUPERSEDED:
                if settle is Settle.SUPERSEDED:
                    _log_superseded(payload, seen)
                if row_id is not None:
                    resolution = Resolution.of(seen, replayed=True)
                    self.dependencies.resolve(payload.id, row_id, resolution)
                return ProcessAction.REPLAYED
        msg = f"{payload.id}: {settle} is not a decision that starts nothing"
        raise ValueError(msg)

    def _facts(self, payload: ProcessPayload, seen: PayloadStateItem | None) -> Facts:
        """What :func:`settling.decide` needs beyond ``seen``; AWS is asked only for a live one.

        An expired Standard attempt's run is described; an Express one cannot be.
        """
        if seen is None or seen.state.is_terminal:
            return Facts()
        express = self.runs.is_express(payload.workflow, seen)
        expired = settling.lease_expired(
            seen,
            lease_seconds=lease_seconds(self.claim_lease_seconds, express=express),
            now=utcnow(),
        )
        run = None
        if expired and not express:
            run = AttemptRun(self.runs.describe_attempt(payload, seen.attempt))
        return Facts(express=express, lease_expired=expired, run=run)

    def _record(self, payload: ProcessPayload, facts: Facts) -> UpdateAction:
        """Record the ended run ``facts`` described, exactly as update-state would."""
        described = facts.run.description if facts.run is not None else None
        if described is None:
            msg = f"{payload.id}: only a described run's end is recorded"
            raise ValueError(msg)
        return self.recorder.record_described(described)


def _log_superseded(payload: ProcessPayload, seen: PayloadStateItem) -> None:
    """Say why a rerun replays: the outcome it was sent to replace was replaced first."""
    expected = payload.replace_if
    if expected is None:  # only a rerun is superseded
        return
    logger.info(
        "rerun superseded: the payload moved on",
        extra={
            "expected_state": expected.state.value,
            "expected_attempt": expected.attempt,
            "state": seen.state.value,
            "attempt": seen.attempt,
        },
    )
