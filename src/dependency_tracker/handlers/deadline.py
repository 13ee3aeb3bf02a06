"""When a handler must stop retrying: the invocation's deadline less a reserve."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext

# Kept back from the function's timeout: one more call with botocore's own retries (about
# 3 s when throttled), the writes that follow it, and the response, before Lambda stops
# the invocation.
DEADLINE_RESERVE_SECONDS = 15.0
# A process-queue record is started only with this much of the invocation left: the
# reserve, plus 5 s for the record's own calls (a payload message makes about ten, each
# tens of milliseconds on AWS; a join message handed to the join queue one SendMessage).
# A throttled start inside it waits only until the reserve (core/pacing.py), so a record
# started in time ends in time; the records after it go back to the queue untouched.
RECORD_START_SECONDS = DEADLINE_RESERVE_SECONDS + 5.0


def deadline_of(context: LambdaContext | None) -> float | None:
    """Monotonic time by which retries must have stopped (None without a context)."""
    if context is None:
        return None
    remaining = context.get_remaining_time_in_millis() / 1000
    return time.monotonic() + max(0.0, remaining - DEADLINE_RESERVE_SECONDS)
