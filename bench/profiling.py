"""Where the CPU goes: per-thread CPU time, grouped by what the thread does.

Every thread of the process is sampled from ``/proc/self/task/<tid>/stat``
(user + system time) every ``interval`` seconds and mapped to its Python
thread name. In local mode each pump thread also runs its handler (the
pumps call handlers in-line), moto runs every execution in its own threads,
and the benchmark's own polling runs in the main thread. CPU of threads that
ended between two samples is partly lost: it shows as ``unattributed``.
Linux only; elsewhere the breakdown is empty.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections import defaultdict
from pathlib import Path

_TASKS = Path("/proc/self/task")
_TARGET = re.compile(r"\((?P<target>[^)]*)\)$")
GROUPS = {
    "pump-sqs": "process: SQS pump + process handler",
    "pump-reports": "status reports: SQS pump + update-state handler",
    "pump-executions": "update-state: execution pump + update-state handler",
    "pump-stream": "callback: stream pump + callback handler",
    "MainThread": "benchmark driver (starts parents, waits)",
}


def group_of(name: str) -> str:
    """A readable group for a thread name."""
    if name in GROUPS:
        return GROUPS[name]
    if name.startswith("ThreadPoolExecutor"):
        return "update-state: resolve_all thread pool"
    if name.startswith("bench-"):
        return "benchmark samplers"
    if name.startswith("native-"):
        return "moto interpreter: threads that ended before they were named"
    match = _TARGET.search(name)
    if match:
        return f"moto interpreter: {match.group('target')}"
    return f"moto interpreter: {name.split('_', 1)[0]}"


class ThreadCpu:
    """Samples per-thread CPU time in the background."""

    def __init__(self, interval: float = 0.25) -> None:
        self.interval = interval
        self._ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self._seen: dict[int, tuple[str, float]] = {}
        self._ended: list[tuple[str, float]] = []  # threads whose id was reused
        self._baseline: dict[int, tuple[str, float]] = {}  # CPU before start()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._cpu_start = 0.0
        self._wall_start = 0.0

    def start(self) -> None:
        """Begin sampling."""
        self._sample()
        self._baseline = dict(self._seen)
        self._cpu_start = time.process_time()
        self._wall_start = time.perf_counter()
        self._thread = threading.Thread(target=self._run, name="bench-cpu", daemon=True)
        self._thread.start()

    def stop(self) -> dict[str, object]:
        """Stop; CPU seconds by group, process CPU, wall time and utilization."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample()
        cpu = time.process_time() - self._cpu_start
        wall = time.perf_counter() - self._wall_start
        groups: dict[str, float] = defaultdict(float)
        for name, seconds in self._ended:
            groups[group_of(name)] += seconds
        for tid, (name, seconds) in self._seen.items():
            before = self._baseline.get(tid)
            spent = seconds - before[1] if before is not None and before[0] == name else seconds
            groups[group_of(name)] += spent
        attributed = sum(groups.values())
        ordered = dict(sorted(groups.items(), key=lambda kv: -kv[1]))
        return {
            "wall_s": round(wall, 3),
            "process_cpu_s": round(cpu, 3),
            "cpu_per_wall": round(cpu / wall, 3) if wall else None,
            "by_thread_group_s": {key: round(value, 3) for key, value in ordered.items()},
            "unattributed_s": round(max(0.0, cpu - attributed), 3),
        }

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def _sample(self) -> None:
        if not _TASKS.is_dir():
            return
        names = {thread.native_id: thread.name for thread in threading.enumerate()}
        for entry in _TASKS.iterdir():
            tid = int(entry.name)
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue  # the thread ended meanwhile
            seconds = (int(fields[11]) + int(fields[12])) / self._ticks
            previous = self._seen.get(tid)
            name = names.get(tid) or (previous[0] if previous else f"native-{tid}")
            if previous is not None and (previous[0] != name or previous[1] > seconds):
                self._ended.append(previous)  # the kernel reused the id of an ended thread
            self._seen[tid] = (name, seconds)
