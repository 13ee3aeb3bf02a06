"""Starts paced at Step Functions' ``StartExecution`` quota, within the invocation's deadline.

Step Functions refuses a ``StartExecution`` past its token bucket (per account and
region) with ``ThrottlingException``. botocore's standard retries ride out a blip;
a join's chunks, started side by side, meet the bucket for minutes. So a refused
start waits (:data:`START_PACING`: short, jittered waits, capped below the time the
bucket takes to refill, so no token goes unused) and tries again, for as long as
the invocation's deadline allows. What the deadline leaves unstarted goes back to
the queue (:class:`~dependency_tracker.core.errors.StartDeferredError`): the chunk is
sent again, a single message is reported as a batch item failure.

The deadline is the invocation's: the process handler sets it around each record
(:func:`deadline_scope`), and the start reads it (:func:`current_deadline`), so the
flows between them need not carry it. The figures the defaults are derived from
live in :mod:`dependency_tracker.core.quotas`.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING

from dependency_tracker.core.backoff import Backoff

if TYPE_CHECKING:
    from collections.abc import Iterator

# A refused start is tried again after at most 1 s: the bucket's refill (300 a second,
# 150 in the smaller regions) fills it from empty in 4.3 to 5.3 s, so callers that come
# back within a second never let a token go unused, and the jitter spreads concurrent
# chunks over the tokens as they come. The count only bounds a call with no deadline
# (a local run without a Lambda context): about a minute of waits.
START_PACING = Backoff(attempts=120, base_seconds=0.05, cap_seconds=1.0)

_deadline: ContextVar[float | None] = ContextVar("deptrack_deadline", default=None)


def current_deadline() -> float | None:
    """Monotonic time by which the current record must stop waiting (None: no deadline)."""
    return _deadline.get()


@contextmanager
def deadline_scope(deadline: float | None) -> Iterator[None]:
    """Make ``deadline`` the current record's for the duration of the block."""
    token = _deadline.set(deadline)
    try:
        yield
    finally:
        _deadline.reset(token)
