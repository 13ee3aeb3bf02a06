"""Runs pumps in background threads and invokes handlers the way Lambda would."""

from __future__ import annotations

import builtins
import contextlib
import io
import logging
import threading
import time
from typing import IO, TYPE_CHECKING, Any

from dependency_tracker_local.context import StackStoppedError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from dependency_tracker_local.pumps import Handler, Pump

_log = logging.getLogger(__name__)


class ThreadRoutedStdout(io.TextIOBase):
    """``sys.stdout`` stand-in: writes from handler invocations go to a sink.

    ``contextlib.redirect_stdout`` swaps stdout for every thread, so the
    caller's own prints would vanish into the sink while a pump runs a
    handler; this routes by thread instead.
    """

    def __init__(self, original: IO[str], sink: IO[str]) -> None:
        self.original = original
        self._sink = sink
        self._local = threading.local()

    @contextlib.contextmanager
    def routed(self) -> Iterator[None]:
        """Send this thread's writes to the sink for the duration."""
        self._local.active = True
        try:
            yield
        finally:
            self._local.active = False

    def _target(self) -> IO[str]:
        return self._sink if getattr(self._local, "active", False) else self.original

    def write(self, text: str) -> int:
        """Write to the sink or the original stdout, by thread."""
        return self._target().write(text)

    def flush(self) -> None:
        """Flush the stream this thread writes to."""
        self._target().flush()

    def writable(self) -> bool:
        """Always writable."""
        return True

    def print(self, *values: object, **options: Any) -> None:
        """``print`` that sends a handler's output to the sink whatever ``sys.stdout`` is now.

        Powertools prints its metrics; a test runner may have set ``sys.stdout``
        again since the stack started (pytest does around each test and its
        report), and a pump's invocation then printed on the terminal.
        """
        if getattr(self._local, "active", False) and "file" not in options:
            options["file"] = self._sink
        builtins.print(*values, **options)  # noqa: T201


class Invoker:
    """Calls handlers one at a time, optionally sending what they print to a sink.

    Lambda runs one invocation per execution environment at a time, and
    Powertools' Logger and Metrics keep per-environment state in module
    globals. In one process every "function" shares those globals, so
    invocations are serialized to keep that contract.
    """

    def __init__(self, stdout: ThreadRoutedStdout | None = None) -> None:
        self._lock = threading.Lock()
        self._stdout = stdout
        self._closed = False

    def close(self) -> None:
        """Refuse every invocation from now on; the one running (if any) finishes.

        A pump may be in the middle of a long round (a join's thousand status
        changes) when the stack stops. Without this, its later invocations ran
        after the environment was restored, against no stack at all: with the
        mock gone, boto3 went to the real AWS endpoints.
        """
        with self._lock:
            self._closed = True

    def wrap(self, handler: Handler) -> Handler:
        """``handler`` guarded by the invocation lock."""

        def invoke(event: dict[str, Any], context: Any) -> Any:
            with self._lock:
                if self._closed:
                    raise StackStoppedError
                # The invocation starts now, not while it waited for another one:
                # on AWS invocations run side by side, so the wait is no part of its time.
                begin = getattr(context, "begin", None)
                if begin is not None:
                    begin()
                if self._stdout is None:
                    return handler(event, context)
                with self._stdout.routed():
                    return handler(event, context)

        return invoke


# A dry pump rests twice as long after each dry round, up to this: an idle stack
# costs a round per pump every quarter second instead of every poll interval. A message
# that no pump's delivery announces (one a state machine sends) waits at most this long.
DEFAULT_MAX_IDLE_SECONDS = 0.25


class Activity:
    """The wake-up the pumps of one runner share: a delivery anywhere ends every rest.

    A handler that ran usually left work for another pump (a message, an
    execution, a stream record); without this, each hop of a chain would wait
    out the next pump's backoff.
    """

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._generation = 0

    @property
    def generation(self) -> int:
        """Counts notifications; a waiter passes the value it saw last."""
        with self._changed:
            return self._generation

    def notify(self) -> None:
        """Wake every waiter."""
        with self._changed:
            self._generation += 1
            self._changed.notify_all()

    def wait(self, seen: int, timeout: float) -> bool:
        """Rest up to ``timeout`` seconds; True at once if notified since ``seen``."""
        with self._changed:
            return self._changed.wait_for(lambda: self._generation != seen, timeout)


class PumpRunner:
    """One daemon thread per pump; a dry pump rests, longer after each dry round.

    The rest starts at ``poll_interval`` and doubles after every round that
    moved nothing, up to ``max_idle``; a round that moves something, or a
    delivery by any other pump of the runner (:class:`Activity`), brings it back
    to ``poll_interval``. A woken pump still waits ``poll_interval`` after its
    last round, so a busy stack polls no more often than before.

    A pump may bound its own rest with ``rest_limit()`` (seconds, or None for no
    bound): a schedule that is due soon, or a retry that must not wait long.
    """

    def __init__(
        self,
        pumps: list[Pump],
        *,
        poll_interval: float = 0.05,
        max_idle: float = DEFAULT_MAX_IDLE_SECONDS,
        activity: Activity | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._pumps = pumps
        self._poll_interval = poll_interval
        self._max_idle = max(max_idle, poll_interval)
        self.activity = Activity() if activity is None else activity
        self._clock = clock
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.errors = 0

    def start(self) -> None:
        """Start a thread per pump."""
        for pump in self._pumps:
            thread = threading.Thread(
                target=self._loop, args=(pump,), name=f"pump-{pump.name}", daemon=True
            )
            thread.start()
            self._threads.append(thread)

    def stop(self, timeout: float = 10.0) -> None:
        """Ask every thread to finish its round and wait for it."""
        self._stop.set()
        self.activity.notify()  # end the rests now rather than at their ends
        for thread in self._threads:
            thread.join(timeout)
        self._threads.clear()

    def _loop(self, pump: Pump) -> None:
        rest = self._poll_interval
        while not self._stop.is_set():
            # Read before the round: a delivery elsewhere during it may have left
            # work this round missed, so the rest after it must end at once.
            seen = self.activity.generation
            try:
                moved = pump.pump_once()
            except Exception:  # noqa: BLE001  (a pump must outlive a failed round)
                self.errors += 1
                _log.exception("pump %s failed a round", pump.name)
                moved = 0
            if moved:
                self.activity.notify()
                rest = self._poll_interval
                continue
            ended = self._clock()
            if self.activity.wait(seen, self._bounded(pump, rest)):
                rest = self._poll_interval
                self._stop.wait(max(0.0, ended + self._poll_interval - self._clock()))
            else:
                rest = min(rest * 2, self._max_idle)

    def _bounded(self, pump: Pump, rest: float) -> float:
        """``rest``, shortened to what the pump allows (never below ``poll_interval``)."""
        rest_limit = getattr(pump, "rest_limit", None)
        limit: float | None = None if rest_limit is None else rest_limit()
        if limit is None:
            return rest
        return min(rest, max(limit, self._poll_interval))
