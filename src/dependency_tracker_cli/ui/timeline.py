"""A join over time, for its page: members ended (succeeded, failed), the rate, when it is decided.

Read at a glance: two step lines of members ended since the join began, the
quorum as a line to reach, the deadline if it has one; below them the rate over
the last :data:`RATE_WINDOW` and when the join is decided at that rate (its
deadline, when that comes first).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from dependency_tracker.core.enums import PayloadState

if TYPE_CHECKING:
    from collections.abc import Sequence

    from dependency_tracker.joins.outputs import MemberOutcome
    from dependency_tracker.joins.rows import JoinItem
    from dependency_tracker_cli.ui.joins import JoinProgress

# How far back the rate looks.
RATE_WINDOW = timedelta(minutes=10)
# The picture's size in SVG units (it scales to the page's width).
WIDTH, HEIGHT, MARGIN = 640, 180, 28


@dataclass(frozen=True)
class Timeline:
    """What the picture draws and says."""

    start: datetime
    end: datetime
    total: int
    needed: int
    succeeded: list[datetime]
    failed: list[datetime]
    per_minute: float
    window: timedelta  # what the rate looks back over: RATE_WINDOW, or the join's age
    decided_at: datetime | None
    deadline: datetime | None
    eta: datetime | None

    def x(self, at: datetime) -> float:
        """The horizontal position of ``at``."""
        span = max((self.end - self.start).total_seconds(), 1.0)
        seconds = min(max((at - self.start).total_seconds(), 0.0), span)
        return round(MARGIN + (WIDTH - 2 * MARGIN) * seconds / span, 1)

    def y(self, count: int) -> float:
        """The vertical position of ``count`` members."""
        return round(HEIGHT - MARGIN - (HEIGHT - 2 * MARGIN) * count / max(self.total, 1), 1)

    def steps(self, ended: Sequence[datetime]) -> str:
        """An SVG polyline's points: a step up at each end, flat to the picture's end."""
        points = [(self.x(self.start), self.y(0))]
        for count, at in enumerate(ended, start=1):
            points += [(self.x(at), self.y(count - 1)), (self.x(at), self.y(count))]
        points.append((self.x(self.end), self.y(len(ended))))
        return " ".join(f"{x},{y}" for x, y in points)

    @property
    def summary(self) -> str:
        """``12.0 members/min over the last 10 min; decided at this rate in ~4 min (06:12 UTC)``."""
        rate = f"{self.per_minute:.1f} members/min over the last {_minutes(self.window)}"
        if self.decided_at is not None:
            return f"{rate}; decided {self.decided_at:%Y-%m-%d %H:%M:%S} UTC"
        if self.eta is None and self.deadline is None:
            return f"{rate}; no decision in sight at this rate"
        if self.deadline is not None and (self.eta is None or self.deadline <= self.eta):
            return f"{rate}; its deadline decides it at {self.deadline:%Y-%m-%d %H:%M} UTC"
        assert self.eta is not None  # noqa: S101  (the branch above takes eta None)
        wait = max(self.eta - self.end, timedelta(0))
        return f"{rate}; decided at this rate in ~{_minutes(wait)} ({self.eta:%H:%M} UTC)"


def timeline(
    row: JoinItem, progress: JoinProgress, members: Sequence[MemberOutcome], now: datetime
) -> Timeline:
    """The timeline of a join from its members' ends (each member once, as the page read them)."""
    ended = sorted(
        (member.ended_at, member.state is PayloadState.SUCCEEDED)
        for member in members
        if member.ended_at is not None and member.state is not None
    )
    decided = row.resolved_at if progress.decided else None
    end = max([now if decided is None else decided, *(at for at, _ in ended)])
    recent = [at for at, _ in ended if at >= end - RATE_WINDOW]
    window = min(RATE_WINDOW, max(end - row.created_at, timedelta(seconds=1)))
    per_minute = len(recent) / (window.total_seconds() / 60)
    eta = None if decided is not None else _eta(progress, ended, end, window)
    total = progress.total if progress.total is not None else max(progress.registered, 1)
    return Timeline(
        start=row.created_at,
        end=end,
        total=total,
        needed=progress.to_succeed,
        succeeded=[at for at, ok in ended if ok],
        failed=[at for at, ok in ended if not ok],
        per_minute=per_minute,
        window=window,
        decided_at=decided,
        deadline=row.deadline_at,
        eta=eta,
    )


def _eta(
    progress: JoinProgress, ended: list[tuple[datetime, bool]], end: datetime, window: timedelta
) -> datetime | None:
    """When the successes or the failures still needed arrive at the recent rates (None: never)."""
    minutes = window.total_seconds() / 60
    times = []
    for wanted, count in (
        (progress.to_succeed - progress.succeeded, True),
        ((progress.failures_to_decide or 0) - progress.failed, False),
    ):
        rate = sum(1 for at, ok in ended if ok is count and at >= end - window) / minutes
        if wanted > 0 and rate > 0:
            times.append(end + timedelta(minutes=wanted / rate))
    return min(times, default=None)


def _minutes(span: timedelta) -> str:
    """``10 min``, ``90 s`` (a part of a minute counts as one)."""
    seconds = math.ceil(span.total_seconds())
    return f"{seconds} s" if seconds < 120 else f"{math.ceil(seconds / 60)} min"
