"""The Joins section's view models: which joins are listed, their names and progress.

A join is listed while its parent waits on it (its row holds a token not
answered yet), and once decided for :data:`DECIDED_WINDOW` after its decision
(its row is kept ``waiter_retention_days``, 7 by default, after the parent is
told, so it is still there to read): running joins first, oldest first, then
decided ones, newest decision first.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

from dependency_tracker.core.enums import DependencyError, PayloadState
from dependency_tracker_cli.ui.links import Execution, execution_link

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from datetime import datetime

    from dependency_tracker.joins.rows import JoinItem
    from dependency_tracker_cli.target import Target

# How long a decided join stays listed after its decision.
DECIDED_WINDOW = timedelta(hours=24)
# Hex digits of a join id its name shows (the whole id is in its title and on its page).
SHORT_ID = 8
ALL_OF, EITHER_OR, QUORUM = "all-of", "either-or", "quorum"


def short_id(join_id: str) -> str:
    """The first :data:`SHORT_ID` characters of a join id."""
    return join_id[:SHORT_ID]


def execution_name(arn: str | None) -> str | None:
    """The execution's own name, the last part of its ARN (None without an ARN)."""
    if not arn:
        return None
    return arn.rsplit(":", 1)[-1] or None


def join_name(join_id: str, parent_execution: str | None) -> str:
    """``mosaic-run-7 · join 3f2a9c1d``, or ``join 3f2a9c1d`` when no parent is known."""
    parent = execution_name(parent_execution)
    short = f"join {short_id(join_id)}"
    return short if parent is None else f"{parent} · {short}"


def is_running(row: JoinItem) -> bool:
    """Undecided with a token still to answer: what the page lists and counts as running."""
    return bool(row.unanswered()) and not row.workflow_state.is_terminal


def listed(rows: Sequence[JoinItem], now: datetime, window: timedelta) -> list[JoinItem]:
    """The join rows the page lists, in the order it lists them.

    Running (or decided with its parent not told yet, as the wait graph shows
    them) first, oldest first; then joins decided within ``window`` of ``now``,
    newest decision first.
    """
    since = now - window
    running = [row for row in rows if is_running(row)]
    decided = [
        row
        for row in rows
        if row.workflow_state.is_terminal
        and (row.unanswered() or (row.resolved_at is not None and row.resolved_at >= since))
    ]
    running.sort(key=lambda row: (row.created_at, row.join_id))
    decided.sort(key=lambda row: (row.resolved_at or row.updated_at, row.join_id), reverse=True)
    return running + decided


@dataclass(frozen=True)
class JoinProgress:
    """A join's counts against its quorum: what its row in the Joins section shows."""

    join_id: str
    state: str | None
    succeeded: int
    failed: int
    total: int | None
    needed: int | None
    registered: int
    execution: Execution | None
    quorum: int | None = None
    error: str | None = None
    cause: str | None = None
    decided_at: datetime | None = None

    @property
    def name(self) -> str:
        """The parent's execution name and the short id."""
        return join_name(self.join_id, None if self.execution is None else self.execution.arn)

    @property
    def short_id(self) -> str:
        """The first hex digits of the id."""
        return short_id(self.join_id)

    @property
    def kind(self) -> str:
        """``all-of`` (no quorum), ``either-or`` (quorum 1) or ``quorum`` (k of n)."""
        if self.quorum is None:
            return ALL_OF
        return EITHER_OR if self.quorum == 1 else QUORUM

    @property
    def counted(self) -> int:
        """Members whose outcome is counted."""
        return self.succeeded + self.failed

    @property
    def decided(self) -> bool:
        """True once the join is terminal."""
        return self.state is not None and PayloadState(self.state).is_terminal

    @property
    def to_succeed(self) -> int:
        """Successes the join needs: k, or every member (those registered while n is unknown)."""
        if self.needed is not None:
            return max(1, self.needed)
        return max(1, self.registered)

    @property
    def failures_to_decide(self) -> int | None:
        """Failures that decide the join failed: 1 (all-of), n - k + 1; None while n is unknown."""
        if self.quorum is None:
            return 1
        if self.total is None:
            return None
        return max(1, self.total - self.quorum + 1)

    @property
    def succeeded_fraction(self) -> float:
        """The green part of the bar: successes of those needed (0 to 1)."""
        return min(1.0, self.succeeded / self.to_succeed)

    @property
    def failed_fraction(self) -> float:
        """The red part: failures of those that decide the join (of members, n unknown)."""
        whole = self.failures_to_decide or self.registered
        return 0.0 if not whole else min(1.0, self.failed / whole)

    @property
    def succeeded_percent(self) -> float:
        """:attr:`succeeded_fraction` in percent, for a CSS width (never rounded up to full)."""
        return math.floor(self.succeeded_fraction * 1000) / 10

    @property
    def failed_percent(self) -> float:
        """:attr:`failed_fraction` in percent, for a CSS width."""
        return math.floor(self.failed_fraction * 1000) / 10

    @property
    def text(self) -> str:
        """``1 of 2 needed succeeded, 1 failed (1 more failure decides)``."""
        line = f"{self.succeeded} of {self.to_succeed} needed succeeded, {self.failed} failed"
        if self.needed is None:
            line = f"{self.succeeded} of {self.registered}+ (all) succeeded, {self.failed} failed"
        if self.decided:
            return line
        deciding = self.failures_to_decide
        if deciding is None:
            return f"{line} (members still being registered)"
        more = deciding - self.failed
        verb = "failure decides" if more == 1 else "failures decide"
        return f"{line} ({more} more {verb})"

    @property
    def outcome(self) -> str:
        """``running``, ``succeeded`` or ``failed: QuorumUnreachable``."""
        if not self.decided:
            return "running"
        if self.state == PayloadState.SUCCEEDED.value:
            return "succeeded"
        return f"failed: {self.error}" if self.error else "failed"

    @property
    def why(self) -> str | None:
        """The cause the row records, or, for an unreachable quorum, what made it so."""
        if self.cause:
            return self.cause
        if self.error != DependencyError.QUORUM_UNREACHABLE.value:
            return None
        if self.quorum is None:
            return f"{self.failed} member(s) failed; an all-of join needs every member to succeed"
        if self.total is None:
            return f"{self.failed} members failed: quorum {self.quorum} is out of reach"
        return (
            f"{self.failed} of {self.total} members failed; quorum {self.quorum} of "
            f"{self.total} allows at most {self.total - self.quorum} failed"
        )


def read_joins(
    target: Target, scanned: Sequence[JoinItem]
) -> tuple[list[JoinItem], dict[str, tuple[int, int]]]:
    """Each scanned join's row read again with its counts (one consistent read each).

    A join whose row is gone since the scan keeps its scanned row and no counts.
    """
    rows: list[JoinItem] = []
    counts: dict[str, tuple[int, int]] = {}
    for scanned_row in scanned:
        row, succeeded, failed = target.joins.read(scanned_row.join_id)
        rows.append(row or scanned_row)
        if row is not None:
            counts[row.join_id] = (succeeded, failed)
    return rows, counts


def join_progress(
    target: Target, rows: Sequence[JoinItem], counts: Mapping[str, tuple[int, int]]
) -> list[JoinProgress]:
    """Progress of the joins ``rows`` with the ``counts`` read with them."""
    return [progress_of(target, row.join_id, row, *counts.get(row.join_id, (0, 0))) for row in rows]


def progress_of(
    target: Target, join_id: str, row: JoinItem | None, succeeded: int, failed: int
) -> JoinProgress:
    """A join's progress from its row and counts (a missing row: counts alone)."""
    if row is None:
        return JoinProgress(join_id, None, succeeded, failed, None, None, 0, None)
    arn = row.parent_execution
    return JoinProgress(
        join_id=join_id,
        state=row.workflow_state.value,
        succeeded=succeeded,
        failed=failed,
        total=row.known_total,
        needed=row.needed,
        registered=row.registered,
        execution=None if arn is None else execution_link(target, arn),
        quorum=row.quorum,
        error=row.error,
        cause=row.cause,
        decided_at=row.resolved_at,
    )
