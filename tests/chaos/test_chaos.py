"""Seeded chaos runs: crash every write, duplicate every delivery, and lose nothing.

``test_small_chaos_run`` (20 parents) runs in ``make test``. The big run (>= 200
parents, ``make chaos``) runs only with ``DEPTRACK_CHAOS=1``; pick its seed with
``DEPTRACK_CHAOS_SEED``, its size with ``DEPTRACK_CHAOS_PARENTS`` and scale every
fault rate with ``DEPTRACK_CHAOS_INTENSITY`` (default 1).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pytest

from dependency_tracker import settings
from tests.chaos.faults import ALL_KINDS
from tests.chaos.run import DEFAULT_RATES, ChaosRun

if TYPE_CHECKING:
    import io

    from tests.conftest import Aws

SMALL_SEED = 7


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
    # Chaining publishes the next step to the process queue.
    monkeypatch.setenv(settings.ENV_PROCESS_QUEUE_URL, aws.queue_url)
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
