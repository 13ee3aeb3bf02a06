"""Bounded retries with full jitter, for calls a throttled or failing service refused.

botocore's ``standard`` retry mode already retries a throttled or 5xx call
(3 attempts in all, waits of ``rand() * 2**i`` seconds). That rides out a blip,
not a storm: its retry quota drains after a few dozen refusals and it knows
nothing of the Lambda deadline. :class:`Backoff` is the outer loop for the one
call whose loss matters (``SendTask*``): a few more tries, each wait drawn from
``[0, min(cap, base * 2**retry)]`` ("full jitter", so concurrent callers spread
out), and never a wait that would run past the caller's deadline.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from botocore.exceptions import ClientError

if TYPE_CHECKING:
    from collections.abc import Callable

T = TypeVar("T")

# Error codes AWS uses for "too fast": botocore's own list (retries/standard.py),
# plus the Step Functions and API Gateway spellings.
THROTTLING_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottledException",
        "TooManyRequestsException",
        "ProvisionedThroughputExceededException",
        "TransactionInProgressException",
        "RequestLimitExceeded",
        "BandwidthLimitExceeded",
        "LimitExceededException",
        "RequestThrottled",
        "SlowDown",
        "EC2ThrottledException",
    }
)
# Server-side failures that name themselves when the status is not at hand.
SERVER_ERROR_CODES = frozenset(
    {
        "InternalServerError",
        "InternalServerException",
        "InternalFailure",
        "InternalError",
        "ServiceUnavailable",
        "ServiceUnavailableException",
        "ServiceException",
        "RequestTimeout",
        "RequestTimeoutException",
    }
)


def error_code(exc: ClientError) -> str:
    """The AWS error code of a refusal (``Unknown`` when it has none)."""
    return str(exc.response.get("Error", {}).get("Code") or "Unknown")


def is_throttled(exc: ClientError) -> bool:
    """True when the service refused the call for its rate alone (a quota's bucket was empty)."""
    return error_code(exc) in THROTTLING_CODES


def is_transient(exc: ClientError) -> bool:
    """True for throttling and 5xx: the same call may succeed a little later."""
    code = error_code(exc)
    if code in THROTTLING_CODES or code in SERVER_ERROR_CODES:
        return True
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return isinstance(status, int) and status >= 500


@dataclass(frozen=True)
class Backoff:
    """How often and how long to retry a transient refusal.

    Attributes:
        attempts: Tries in all, the first included.
        base_seconds: Upper bound of the first wait.
        cap_seconds: Upper bound of any one wait.
        sleep: Waits (injected in tests, which must not sleep).
        random: A number in ``[0, 1)`` per wait (injected for exact bounds).
        clock: Monotonic seconds, the clock deadlines are read on.
    """

    attempts: int = 6
    base_seconds: float = 0.2
    cap_seconds: float = 5.0
    sleep: Callable[[float], None] = field(default=time.sleep, repr=False)
    random: Callable[[], float] = field(default=random.random, repr=False)
    clock: Callable[[], float] = field(default=time.monotonic, repr=False)

    @property
    def max_total_wait(self) -> float:
        """The longest the waits of one call can add up to (every draw at its bound)."""
        return float(sum(self.bound(retry) for retry in range(self.attempts - 1)))

    def bound(self, retry: int) -> float:
        """Upper bound of the wait before retry ``retry`` (0 for the first retry)."""
        return float(min(self.cap_seconds, self.base_seconds * 2**retry))

    def call(
        self,
        operation: Callable[[], T],
        *,
        deadline: float | None = None,
        on_retry: Callable[[ClientError, int, float], None] | None = None,
        retry_on: Callable[[ClientError], bool] = is_transient,
    ) -> T:
        """Run ``operation``, retrying the refusals ``retry_on`` accepts (transient ones).

        Stops retrying after :attr:`attempts` tries, or when the next wait
        would end past ``deadline`` (on :attr:`clock`); the last refusal is
        raised then. Any other error is raised at once.
        """
        retry = 0
        while True:
            try:
                return operation()
            except ClientError as exc:
                if not retry_on(exc) or retry + 1 >= self.attempts:
                    raise
                wait = self.random() * self.bound(retry)
                if deadline is not None and self.clock() + wait > deadline:
                    raise
                if on_retry is not None:
                    on_retry(exc, retry + 1, wait)
                self.sleep(wait)
                retry += 1
