"""What each benchmark entry runs.

``make bench`` runs ``FULL``, the CI smoke test ``SMOKE``, the budget tests the
``BUDGET_*`` workloads, the optional wall-clock script ``FULL_TIMING`` (or
``SMOKE_TIMING``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

MAP = "map"
JOIN = "join"
POLL = "poll"
PATTERNS = (MAP, JOIN, POLL)


@dataclass(frozen=True)
class PatternConfig:
    """Three ways to wait on n dependencies, interleaved on one stack.

    Time is scaled down: ``poll_seconds`` locally stands for
    ``reference_poll_seconds`` in AWS, and the child's ``child_seconds`` for
    ``child_seconds * scale``.
    """

    sizes: tuple[int, ...] = (1, 10, 100)
    # Joins past 100 members are measured by the joins section (bench/joins.py).
    join_only_sizes: tuple[int, ...] = ()
    reps: tuple[tuple[int, int], ...] = ((1, 6), (10, 4), (100, 3))
    child_seconds: int = 2
    poll_seconds: int = 1
    reference_poll_seconds: int = 60
    callback_timeout_seconds: int = 1800
    run_timeout: float = 900.0
    # The designs measured, in rotation (the budget tests run the Map pattern alone).
    patterns: tuple[str, ...] = PATTERNS

    @property
    def scale(self) -> float:
        """How many seconds in AWS one local second stands for."""
        return self.reference_poll_seconds / self.poll_seconds

    def reps_for(self, n: int) -> int:
        """Parents per pattern at size ``n``."""
        return dict(self.reps).get(n, 1)


@dataclass(frozen=True)
class ThroughputConfig:
    """Many parents on overlapping dependencies, all started at once.

    Parent ``p`` waits on payloads ``stride*p .. stride*p + dependencies - 1``
    (mod the pool), so every payload has ``dependencies / stride`` waiters and
    ``1 - stride / dependencies`` of the edges find their payload already
    claimed by another parent (50 % with stride 5 of 10).
    """

    scales: tuple[tuple[int, int], ...] = ((25, 10), (100, 10))
    stride: int = 5
    pattern: str = MAP
    run_timeout: float = 900.0
    # Samplers (per-thread CPU, queue depth) run this often; each sample costs CPU.
    profile_interval: float = 1.0


@dataclass(frozen=True)
class CalibrationConfig:
    """Timing each moto operation an edge needs, in isolation."""

    calls: int = 60
    waiters_per_payload: int = 2


@dataclass(frozen=True)
class HandlerConfig:
    """Handler costs: update-state resolving many waiters, process on a batch."""

    waiters: tuple[int, ...] = (1, 100, 1000)
    reps: int = 3
    batch: int = 10


@dataclass(frozen=True)
class JoinScaleConfig:
    """One all-of join over n members, per n, each on a fresh stack (``bench/joins.py``).

    Members are ``simulate`` children that end at once, so the pipeline itself
    is timed. A size in ``inline_sizes`` sends its payloads in the join message;
    the others go by a manifest in the payload bucket (``dependencies_url``).
    ``chunk_size`` sets ``DEPTRACK_JOIN_CHUNK_SIZE`` (None: the tracker's
    default); ``quorum`` makes it a k-of-n join. Every size is counted;
    per-member counts are extrapolated to ``derived_sizes``.
    """

    # About 10 s, 1.5, 3 and 25 to 40 minutes on a 2-core machine (--join-sizes to change):
    # 10,000 members is the scale the join exists for, measured rather than derived.
    sizes: tuple[int, ...] = (100, 1000, 2000, 10_000)
    inline_sizes: tuple[int, ...] = ()
    chunk_size: int | None = None
    derived_sizes: tuple[int, ...] = (100_000,)
    run_timeout: float = 3600.0
    quorum: int | None = None
    # A join slower than this many members a second is given up on (past run_timeout).
    slowest_members_per_second: float = 15.0

    def timeout_for(self, n: int) -> float:
        """How long a join of ``n`` members may run: ``run_timeout``, more for a huge join."""
        return max(self.run_timeout, n / self.slowest_members_per_second)


@dataclass(frozen=True)
class BenchConfig:
    """One benchmark run."""

    name: str
    patterns: PatternConfig = field(default_factory=PatternConfig)
    handlers: HandlerConfig = field(default_factory=HandlerConfig)
    joins: JoinScaleConfig = field(default_factory=JoinScaleConfig)
    # Run each section in a fresh process (own peak memory, no leftover threads).
    isolate: bool = True

    def as_dict(self) -> dict[str, Any]:
        """Plain data, for results.json."""
        return asdict(self)


@dataclass(frozen=True)
class TimingConfig:
    """The optional wall-clock run (``python -m bench.timing``).

    Throughput scales, then the engine bound calibrated on tables as large as
    the largest scale left them; one all-of join per size in ``joins``, then the
    join's bound calibrated at the size nearest ``calibrate_at``.
    """

    name: str
    throughput: ThroughputConfig = field(default_factory=ThroughputConfig)
    calibration: CalibrationConfig = field(default_factory=CalibrationConfig)
    joins: JoinScaleConfig = field(default_factory=lambda: JoinScaleConfig(sizes=(100, 1000)))
    calibrate_at: int = 1000
    isolate: bool = True

    def as_dict(self) -> dict[str, Any]:
        """Plain data, for the timing output."""
        return asdict(self)


FULL = BenchConfig(name="full")

SMOKE = BenchConfig(
    name="smoke",
    patterns=PatternConfig(
        sizes=(1, 3),
        join_only_sizes=(5,),
        reps=((1, 1), (3, 1), (5, 1)),
        child_seconds=1,
        run_timeout=60.0,
    ),
    handlers=HandlerConfig(waiters=(1, 5), reps=1, batch=3),
    # Chunks of 5: a manifest join of 12 in three (the patterns' joins are inline).
    joins=JoinScaleConfig(sizes=(12,), chunk_size=5, run_timeout=120.0),
    isolate=False,
)

# The budget tests' workloads (bench/budgets.py): one parent each, counts only.
BUDGET_PATTERNS = PatternConfig(
    sizes=(1, 3), reps=((1, 1), (3, 1)), child_seconds=1, run_timeout=60.0, patterns=(MAP,)
)
BUDGET_JOIN = JoinScaleConfig(sizes=(12,), chunk_size=5, run_timeout=120.0)
BUDGET_QUORUM = JoinScaleConfig(sizes=(12,), chunk_size=5, run_timeout=120.0, quorum=9)

FULL_TIMING = TimingConfig(name="full")

SMOKE_TIMING = TimingConfig(
    name="smoke",
    throughput=ThroughputConfig(scales=((4, 2),), stride=1, run_timeout=60.0),
    calibration=CalibrationConfig(calls=3),
    joins=JoinScaleConfig(sizes=(12,), chunk_size=5, run_timeout=120.0),
    calibrate_at=12,
    isolate=False,
)
