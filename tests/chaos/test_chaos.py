"""Seeded chaos runs: crash every write, duplicate every delivery, and lose nothing.

``test_small_chaos_run`` (20 parents) runs in ``make test``. The big run (>= 200
parents, ``make chaos``) runs only with ``DEPTRACK_CHAOS=1``; pick its seed with
``DEPTRACK_CHAOS_SEED``, its size with ``DEPTRACK_CHAOS_PARENTS`` and scale every
fault rate with ``DEPTRACK_CHAOS_INTENSITY`` (default 1).

Both also carry rings of parents waiting on each other (dependency cycles, at
least one of each shape; about 5% more parents); the cycle invariant is shown
to fail when the cycle check lets every wait through.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pytest

from dependency_tracker import settings
from dependency_tracker.flows.cycles import CycleGuard
from tests.chaos.faults import ALL_KINDS
from tests.chaos.run import DEFAULT_RATES, RING_SIZES, ChaosRun

if TYPE_CHECKING:
    import io

    from tests.conftest import Aws

SMALL_SEED = 7
CYCLES = "dependency cycles: one of each refused, nothing else sent"


def chaos(
    aws: Aws,
    capsys: pytest.CaptureFixture[str],
    log_lines: io.StringIO,
    monkeypatch: pytest.MonkeyPatch,
    *,
    seed: int,
    parents: int,
    dependencies: int,
) -> None:
    # Chaining publishes the next step to the process queue; joins register two members
    # per invocation and carry on through it too (their member lists go to the bucket),
    # so every chunk's writes meet the faults.
    monkeypatch.setenv(settings.ENV_PROCESS_QUEUE_URL, aws.queue_url)
    monkeypatch.setenv(settings.ENV_JOIN_CHUNK_SIZE, "2")
    aws.s3.create_bucket(Bucket=CHAOS_BUCKET)
    monkeypatch.setenv(settings.ENV_PAYLOAD_BUCKET, CHAOS_BUCKET)
    settings.get_settings.cache_clear()
    intensity = float(os.environ.get("DEPTRACK_CHAOS_INTENSITY", "1"))
    rates = {kind: rate * intensity for kind, rate in DEFAULT_RATES.items()}
    run = ChaosRun(aws, seed=seed, parents=parents, dependencies=dependencies, rates=rates)
    report = run.execute(timeout=parents * 2.0 + 60)
    run.check_logs(report, log_lines.getvalue())
    with capsys.disabled():
        print("\n" + report.render())  # noqa: T201  (make chaos shows the report)
    assert sum(report.faults.values()) > 0
    assert report.ok, report.render()


CHAOS_BUCKET = "deptrack-chaos-payloads"


@pytest.mark.usefixtures("workflows")
def test_small_chaos_run(
    aws: Aws,
    capsys: pytest.CaptureFixture[str],
    log_lines: io.StringIO,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    chaos(aws, capsys, log_lines, monkeypatch, seed=SMALL_SEED, parents=20, dependencies=8)


@pytest.mark.skipif(not os.environ.get("DEPTRACK_CHAOS"), reason="make chaos (DEPTRACK_CHAOS=1)")
@pytest.mark.usefixtures("workflows")
def test_big_chaos_run(
    aws: Aws,
    capsys: pytest.CaptureFixture[str],
    log_lines: io.StringIO,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    parents = int(os.environ.get("DEPTRACK_CHAOS_PARENTS", "200"))
    seed = int(os.environ.get("DEPTRACK_CHAOS_SEED", "2026"))
    chaos(
        aws,
        capsys,
        log_lines,
        monkeypatch,
        seed=seed,
        parents=parents,
        dependencies=max(8, parents // 6),
    )


@pytest.mark.usefixtures("workflows")
def test_the_cycle_invariant_fails_when_cycles_are_let_through(
    aws: Aws, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Mutation: the edges are written but the search never finds a cycle (no faults)."""
    monkeypatch.setenv(settings.ENV_PROCESS_QUEUE_URL, aws.queue_url)
    settings.get_settings.cache_clear()
    monkeypatch.setattr(CycleGuard, "find", lambda *_, **__: None)
    run = ChaosRun(aws, seed=SMALL_SEED, parents=4, dependencies=4, rates={})
    report = run.execute(timeout=60)
    assert {ring.shape for ring in run.rings} == set(RING_SIZES)
    # Every ring, of every shape, is caught (the join ring's join let through, and its
    # member's wait too), and nothing else is wrong.
    problems = report.invariants.pop(CYCLES)
    assert len(problems) == len(run.rings), problems
    assert all("none refused" in problem for problem in problems), problems
    assert report.ok, report.render()


def test_every_fault_kind_is_known() -> None:
    assert set(ALL_KINDS) == {
        "throttle",
        "server",
        "conditional_race",
        "crash",
        "task_timed_out",
        "invalid_token",
        "duplicate_delivery",
    }


def test_the_log_capture_would_see_a_leaked_token(log_lines: io.StringIO) -> None:
    from dependency_tracker.observability import logger  # noqa: PLC0415

    logger.info("leak", extra={"task_token": "AQB-the-whole-token"})
    assert "AQB-the-whole-token" in log_lines.getvalue()
