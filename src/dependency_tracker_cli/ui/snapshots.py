"""One read of the tables shared by every request of the page while it is fresh.

Each refresh of the page reads the dependency table and the state table whole (Scans): with
several viewers, or a table whose read takes longer than the refresh interval, reading per
request would keep the tables scanned without pause. A snapshot is kept for the refresh
interval, or for twice as long as it took to read if that is longer, and requests arriving
while one is read wait for that read instead of starting their own. A page loaded anew (a
reader's reload) asks for a read begun after it arrived.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable

T = TypeVar("T")

# A snapshot that took t seconds to read is kept at least READ_FACTOR * t seconds.
READ_FACTOR = 2.0


@dataclass(frozen=True)
class Read(Generic[T]):
    """A snapshot, when it was read (clock seconds) and how long the read took."""

    snapshot: T
    at: float
    seconds: float


class SnapshotCache(Generic[T]):
    """The latest snapshot, read again once it is older than :meth:`max_age`."""

    def __init__(
        self,
        read: Callable[[], T],
        *,
        refresh_seconds: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._read = read
        self._refresh_seconds = refresh_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._latest: Read[T] | None = None

    def max_age(self, latest: Read[T]) -> float:
        """How long ``latest`` is served: the refresh interval, or twice its read time."""
        return max(self._refresh_seconds, READ_FACTOR * latest.seconds)

    def get(self, *, fresh: bool = False) -> Read[T]:
        """The latest snapshot while young enough, else one read now (one read at a time).

        ``fresh``: only a snapshot whose read began after this call is good enough.
        """
        asked = self._clock()
        with self._lock:
            latest = self._latest
            if latest is not None:
                began = latest.at - latest.seconds
                young = self._clock() - latest.at < self.max_age(latest)
                if began >= asked or (young and not fresh):
                    return latest
            started = self._clock()
            snapshot = self._read()
            finished = self._clock()
            self._latest = Read(snapshot, at=finished, seconds=finished - started)
            return self._latest
