"""What settling a payload does: one decision, from facts gathered before it.

:class:`~dependency_tracker.payloads.runner.TrackerRunner` reads the payload's state, gathers
the :class:`Facts` a live attempt needs (the workflow's type, its lease, its run described),
asks :func:`decide`, and carries the answer out with the state table's and
:class:`~dependency_tracker.payloads.runs.Runs`' operations. Nothing here reads or writes:
the rules of docs/idempotency.md ("States and what a new submission does", "Leases") are
spelled here once.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum, unique
from typing import TYPE_CHECKING, Any

from dependency_tracker.core.enums import PayloadState
from dependency_tracker.payloads.update_state import UpdateAction

if TYPE_CHECKING:
    from datetime import datetime

    from dependency_tracker.payloads.model import ProcessPayload
    from dependency_tracker.table.items import PayloadStateItem

# DescribeExecution statuses of a run that may still end on its own.
LIVE_STATUSES = frozenset({"RUNNING", "PENDING_REDRIVE"})


@unique
class Settle(StrEnum):
    """What to do with a payload, as :func:`decide` (or :func:`after_record`) answers."""

    START = "start"  # claim the next attempt (the first, or a rerun) and start it
    TAKE_OVER = "take_over"  # past the lease: claim the next attempt and start it
    RESUME_START = "resume_start"  # start the claimed attempt again under its own name
    RESTART = "restart"  # AWS refused the claimed start: reclaim it (once), start it again
    RECORD = "record"  # past the lease, the described run ended: record it as update-state
    RECOVERED = "recovered"  # the recorded end settled the payload
    READ_AGAIN = "read_again"  # a newer run was recorded meanwhile
    WAIT = "wait"  # a run is live: update-state resolves the waiter
    UNSETTLED = "unsettled"  # an Express start may have happened: fail the message for now
    REPLAY = "replay"  # settled: answer the waiter from the stored state
    SUPERSEDED = "superseded"  # a rerun of an outcome already replaced: replay, and say so


@dataclass(frozen=True)
class AttemptRun:
    """``DescribeExecution``'s answer about the attempt's run."""

    description: dict[str, Any] | None  # None: no execution under the attempt's name

    @property
    def status(self) -> str | None:
        """The run's status; None when it does not exist."""
        return None if self.description is None else str(self.description["status"])


@dataclass(frozen=True)
class Facts:
    """What is known of a live attempt beyond its state item (nothing for the others).

    Attributes:
        express: The workflow's runs are Express (not idempotent, not describable).
        lease_expired: The attempt went without a final state for longer than its lease.
        run: The attempt's run described: asked only when a Standard attempt's lease expired.
    """

    express: bool = False
    lease_expired: bool = False
    run: AttemptRun | None = None


def lease_expired(seen: PayloadStateItem, *, lease_seconds: int, now: datetime) -> bool:
    """Whether a live attempt has gone without a final state for longer than its lease."""
    if seen.state.is_terminal or seen.claimed_at is None:
        return False
    return (now - seen.claimed_at).total_seconds() > lease_seconds


def decide(
    payload: ProcessPayload,
    message_id: str | None,
    seen: PayloadStateItem | None,
    facts: Facts,
) -> Settle:
    """What ``message_id``'s submission of ``payload`` does, found in state ``seen``.

    Raises:
        ValueError: A Standard attempt's lease expired and ``facts`` has no described run.
    """
    if seen is None:
        return Settle.START
    if seen.state.is_terminal:
        return _after_end(payload, message_id, seen)
    if facts.lease_expired:
        after = _after_lease(seen, facts)
        if after is not None:
            return after
    if seen.state is PayloadState.CLAIMED:
        return _claimed(message_id, seen, facts)
    return Settle.WAIT


def after_record(recorded: UpdateAction) -> Settle:
    """What follows recording, as update-state would, a run found ended past its lease."""
    if recorded in (UpdateAction.RECORDED, UpdateAction.REPEATED):
        return Settle.RECOVERED
    if recorded is UpdateAction.STALE:
        return Settle.READ_AGAIN
    # Its input is no payload of ours (cannot happen for runs we started): run again.
    return Settle.TAKE_OVER


def _after_end(payload: ProcessPayload, message_id: str | None, seen: PayloadStateItem) -> Settle:
    """A settled payload: replay it, or rerun it."""
    if message_id is not None and seen.claim_message_id == message_id:
        # A redelivery of the message that started the last attempt is not
        # a new submission: it must not run the payload again.
        return Settle.REPLAY
    expected = payload.replace_if
    if expected is not None:
        # A rerun replaces only the outcome its sender saw. Found otherwise, another
        # submission replaced it first (a second operator, a retried send): this one is
        # a duplicate, answered from what is stored. The claim that follows a match is
        # conditional on that same state and attempt, so of two such reruns one starts.
        return Settle.START if expected.holds(seen.state, seen.attempt) else Settle.SUPERSEDED
    return Settle.START if seen.state.reruns or payload.replace else Settle.REPLAY


def _after_lease(seen: PayloadStateItem, facts: Facts) -> Settle | None:
    """The lease ran out with no final state: what became of the run; None to decide as live.

    None while the run lives, or when a ``CLAIMED`` attempt's run never started (the
    ``CLAIMED`` rules then start it under its deterministic name).
    """
    if facts.express:
        # An Express run lasts at most five minutes and cannot be described: past
        # the lease it is over and its report was lost. A new attempt has a new
        # name, so it never runs the lost attempt twice.
        return Settle.TAKE_OVER
    if facts.run is None:
        msg = f"attempt {seen.attempt} of {seen.payload_id}: its lease expired, its run unasked"
        raise ValueError(msg)
    status = facts.run.status
    if status is None:
        if seen.state is PayloadState.CLAIMED:
            return None  # never started: start it under the same name
        # Recorded as started, yet gone (its history expired): nothing to wait for.
        return Settle.TAKE_OVER
    if status in LIVE_STATUSES:
        return None
    # It ended, and its status has not reached update-state: lost, or still being
    # retried by EventBridge (for up to 24 hours). Record it exactly as update-state
    # would; starting again would run a payload that may have succeeded.
    return Settle.RECORD


def _claimed(message_id: str | None, seen: PayloadStateItem, facts: Facts) -> Settle:
    """A live claim whose start may or may not have happened."""
    if not facts.express:
        # The claimer may have died before StartExecution; the name is
        # deterministic, so starting again is harmless if it did not.
        return Settle.RESUME_START
    if seen.start_refused_at is not None:
        # AWS answered its StartExecution with an error: nothing runs under its name,
        # so any message starts it now (conditionally: once), under the same name.
        return Settle.RESTART
    if message_id is not None and seen.claim_message_id == message_id:
        # The claimer's own message again, and nothing says its start was refused: the
        # claimer may have died after StartExecution (or before it), its set_processing
        # may have failed, or a twin delivery may be starting it now. Starting anything,
        # under this name or a new attempt's, could make two live runs. The message
        # comes back until the run's report ends the attempt or the Express lease runs
        # out (the lease check then claims a new attempt).
        return Settle.UNSETTLED
    # An Express start is not idempotent: only the claimer (or its redelivery) starts;
    # if neither comes back, the lease starts a new attempt.
    return Settle.WAIT
