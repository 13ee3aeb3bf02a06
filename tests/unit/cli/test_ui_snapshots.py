"""The page's snapshot: one read shared while fresh, kept longer when reading is slow."""

from __future__ import annotations

import threading
from typing import Any

from dependency_tracker_cli.ui.snapshots import READ_FACTOR, SnapshotCache


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_snapshot_is_read_again_only_once_older_than_the_refresh_interval() -> None:
    clock, reads = Clock(), []

    def read() -> str:
        reads.append(clock.now)
        return f"snapshot {len(reads)}"

    cache = SnapshotCache(read, refresh_seconds=5, clock=clock)
    assert cache.get().snapshot == "snapshot 1"
    clock.now += 4.9
    assert cache.get().snapshot == "snapshot 1"
    clock.now += 0.1
    assert cache.get().snapshot == "snapshot 2"
    assert len(reads) == 2


def test_a_slow_read_is_kept_twice_as_long_as_it_took() -> None:
    clock, reads = Clock(), []

    def slow_read() -> int:
        reads.append(clock.now)
        clock.now += 8  # the Scans took 8 s
        return len(reads)

    cache = SnapshotCache(slow_read, refresh_seconds=5, clock=clock)
    first = cache.get()
    assert first.seconds == 8
    clock.now += READ_FACTOR * 8 - 0.1
    assert cache.get() is first
    clock.now += 0.1
    assert cache.get().snapshot == 2


def test_requests_during_a_read_wait_for_it_and_share_it() -> None:
    started, release = threading.Event(), threading.Event()
    reads: list[int] = []

    def read() -> str:
        reads.append(1)
        started.set()
        release.wait(timeout=10)
        return "shared"

    cache = SnapshotCache(read, refresh_seconds=5)
    results: list[Any] = []
    first = threading.Thread(target=lambda: results.append(cache.get().snapshot))
    first.start()
    assert started.wait(timeout=10)
    second = threading.Thread(target=lambda: results.append(cache.get().snapshot))
    second.start()
    release.set()
    first.join(timeout=10)
    second.join(timeout=10)
    assert results == ["shared", "shared"]
    assert len(reads) == 1


def test_a_page_loaded_anew_reads_again_unless_a_read_began_after_it_asked() -> None:
    clock, reads = Clock(), []

    def read() -> int:
        reads.append(clock.now)
        return len(reads)

    cache = SnapshotCache(read, refresh_seconds=5, clock=clock)
    assert cache.get().snapshot == 1
    clock.now += 1
    assert cache.get().snapshot == 1  # a refresh takes the young snapshot
    assert cache.get(fresh=True).snapshot == 2  # a reload reads again
