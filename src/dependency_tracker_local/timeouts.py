"""Function timeouts in the platform model: an invocation past its ``Timeout`` fails.

Lambda stops an invocation when its function's ``Timeout`` runs out and reports it as
failed ("Task timed out after N seconds"): an SQS batch is not deleted (every record
returns after the queue's visibility timeout, counting a receive, even those the handler
had finished), a stream batch is retried, an asynchronous invocation counts as failed.
moto runs no Lambda, so locally nothing stopped a handler that ran too long.

Python cannot stop a thread: a pump lets the handler finish, then :func:`invoke`
discards its result, records the timeout in :attr:`FunctionTimeouts.timed_out`, logs a
warning and raises :class:`FunctionTimedOutError`, which each pump answers as its event
source answers a failed invocation. The clock starts when the handler starts
(:meth:`LocalContext.begin <dependency_tracker_local.context.LocalContext.begin>`),
not while a local invocation waits for another, and the handler's context reports the
time left from the same timeout.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dependency_tracker_local.context import LocalContext, StackStoppedError

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

_log = logging.getLogger(__name__)

# Lambda's timeout for a function that sets none.
LAMBDA_DEFAULT_TIMEOUT_SECONDS = 3.0
# What a pump gives a function the model has no figure for (as before the model).
FALLBACK_TIMEOUT_SECONDS = 60.0


class FunctionTimedOutError(RuntimeError):
    """The invocation ran past its function's timeout: Lambda stopped it."""

    def __init__(self, function: str, timeout_seconds: float) -> None:
        super().__init__(f"{function}: Task timed out after {timeout_seconds:.2f} seconds")
        self.function = function
        self.timeout_seconds = timeout_seconds


@dataclass(frozen=True)
class TimedOutInvocation:
    """An invocation that ran past its timeout, and how long it really ran."""

    function: str
    request_id: str
    timeout_seconds: float
    elapsed_seconds: float


@dataclass
class FunctionTimeouts:
    """Each function's timeout (by the pumps' function name) and what ran past one.

    ``seconds`` comes from the template's ``Timeout`` (SAM ``Globals`` merged);
    ``longest`` keeps the longest invocation seen per function, to show how close
    local runs come to their bounds.
    """

    seconds: Mapping[str, float] = field(default_factory=dict)
    clock: Callable[[], float] = time.monotonic
    timed_out: list[TimedOutInvocation] = field(default_factory=list)
    longest: dict[str, float] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def of(self, function: str, fallback: float = FALLBACK_TIMEOUT_SECONDS) -> float:
        """The timeout of ``function`` (``fallback`` for a function the model does not know)."""
        return float(self.seconds.get(function, fallback))

    def context(self, function: str, fallback: float = FALLBACK_TIMEOUT_SECONDS) -> LocalContext:
        """A context for one invocation of ``function``, on this model's clock."""
        return LocalContext(function, timeout_seconds=self.of(function, fallback), clock=self.clock)

    def finished(self, context: LocalContext) -> bool:
        """Note one finished invocation; True (recorded, warned) if it ran past its timeout."""
        elapsed = context.elapsed_seconds()
        function = context.function_name
        with self._lock:
            self.longest[function] = max(elapsed, self.longest.get(function, 0.0))
            if elapsed <= context.timeout_seconds:
                return False
            self.timed_out.append(
                TimedOutInvocation(
                    function, context.aws_request_id, context.timeout_seconds, elapsed
                )
            )
        _log.warning(
            "%s timed out: ran %.2f s past its %.2f s timeout; its result is discarded, "
            "as Lambda stops the invocation there",
            function,
            elapsed - context.timeout_seconds,
            context.timeout_seconds,
        )
        return True


def invoke(
    timeouts: FunctionTimeouts | None,
    function: str,
    handler: Callable[[dict[str, Any], Any], Any],
    event: dict[str, Any],
    *,
    fallback: float = FALLBACK_TIMEOUT_SECONDS,
) -> Any:
    """Invoke ``handler`` as ``function``; its response, bounded by the function's timeout.

    Without ``timeouts`` (the model off) the invocation is not bounded.

    Raises:
        FunctionTimedOutError: It ran past the timeout (whatever it returned or raised).
    """
    if timeouts is None:
        return handler(event, LocalContext(function, timeout_seconds=fallback))
    context = timeouts.context(function, fallback)
    try:
        response = handler(event, context)
    except StackStoppedError:
        raise  # never invoked: however long it waited, nothing ran
    except Exception as exc:
        # Past its timeout Lambda had stopped it before it could fail.
        if timeouts.finished(context):
            raise FunctionTimedOutError(function, context.timeout_seconds) from exc
        raise
    if timeouts.finished(context):
        raise FunctionTimedOutError(function, context.timeout_seconds)
    return response
