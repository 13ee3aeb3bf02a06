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
import time
from typing import TYPE_CHECKING, Any

import pytest

from dependency_tracker.core import settings
from dependency_tracker.core.enums import PayloadState
from dependency_tracker.core.errors import TransitionConflictError
from dependency_tracker.cycles.guard import CycleGuard
from dependency_tracker.payloads import settling
from dependency_tracker.payloads.runs import Runs
from dependency_tracker.payloads.settling import Facts, Settle
from dependency_tracker.payloads.state_table import StateTable
from dependency_tracker.table.keys import partition_key
from tests.chaos import injection
from tests.chaos.faults import ALL_KINDS
from tests.chaos.run import (
    CHAOS_CLAIM_LEASE_SECONDS,
    CHAOS_SWEEPER_MIN_AGE_SECONDS,
    DEFAULT_RATES,
    EXPRESS_RUNS,
    LATE_EVENTS,
    LOST_REPORTS,
    REDELIVERIES,
    RING_SIZES,
    STORMS,
    ChaosRun,
    Report,
)
from tests.conftest import fresh_app

if TYPE_CHECKING:
    import io

    from dependency_tracker.table.items import PayloadStateItem
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
    configure(aws, monkeypatch)
    intensity = float(os.environ.get("DEPTRACK_CHAOS_INTENSITY", "1"))
    rates = {kind: rate * intensity for kind, rate in DEFAULT_RATES.items()}
    run = ChaosRun(aws, seed=seed, parents=parents, dependencies=dependencies, rates=rates)
    report = run.execute(timeout=parents * 2.0 + 60)
    run.check_logs(report, log_lines.getvalue())
    with capsys.disabled():
        print("\n" + report.render())  # noqa: T201  (make chaos shows the report)
    assert sum(report.faults.values()) > 0
    assert report.ok, report.render()
    # Each handler ran as its function's role (the IAM model): no call was refused.
    assert run.pumps.iam is None or run.pumps.iam.denials == []


# The template's payload bucket for the prefix: the process role may write only there (IAM model).
CHAOS_BUCKET = "deptrack-payloads-123456789012-us-east-1"


def configure(aws: Aws, monkeypatch: pytest.MonkeyPatch, *, join_chunk_size: int = 2) -> None:
    """The handlers' settings for a chaos run.

    Chaining publishes the next step to the process queue; joins register two members
    per invocation (``join_chunk_size``) and carry on through it too (their member lists
    go to the bucket), so every chunk's writes meet the faults, and a join's own faults
    (``join_id_reuse``, ``manifest_overwrite``) meet joins of several chunks. Express
    outputs travel through the bucket. The claim lease is short, so a lease runs out within
    the run (a lost Express report, a held status event), and the sweeper sends rows
    resolved a second ago.
    """
    monkeypatch.setenv(settings.ENV_PROCESS_QUEUE_URL, aws.queue_url)
    monkeypatch.setenv(settings.ENV_JOIN_CHUNK_SIZE, str(join_chunk_size))
    aws.s3.create_bucket(Bucket=CHAOS_BUCKET)
    monkeypatch.setenv(settings.ENV_PAYLOAD_BUCKET, CHAOS_BUCKET)
    monkeypatch.setenv(settings.ENV_CLAIM_LEASE_SECONDS, str(CHAOS_CLAIM_LEASE_SECONDS))
    monkeypatch.setenv(settings.ENV_SWEEPER_MIN_AGE_SECONDS, str(CHAOS_SWEEPER_MIN_AGE_SECONDS))
    fresh_app()


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
    configure(aws, monkeypatch)
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
        "express_twin",
        "express_report_lost",
        "late_event",
        "stale_redelivery",
        "callback_storm",
        "join_id_reuse",
        "manifest_overwrite",
        "parent_send_throttled",
        "operator_release",
        "operator_rerun",
    }


def test_the_log_capture_would_see_a_leaked_token(log_lines: io.StringIO) -> None:
    from dependency_tracker.core.observability import logger  # noqa: PLC0415

    logger.info("leak", extra={"task_token": "AQB-the-whole-token"})
    assert "AQB-the-whole-token" in log_lines.getvalue()


# ------------------------------------------------ the Express and late-event faults

ISSUE_15_KINDS = (
    "express_twin",
    "express_report_lost",
    "late_event",
    "stale_redelivery",
    "callback_storm",
)
ALL_EXPRESS = {"express": 0.8, "express_fail": 0.2}
ALL_STANDARD = {"pass": 0.7, "fail": 0.3}


def express_faults_run(
    aws: Aws,
    monkeypatch: pytest.MonkeyPatch,
    *,
    rates: dict[str, float],
    weights: dict[str, float],
    parents: int = 6,
    plan: dict[tuple[str, int], str] | None = None,
) -> tuple[ChaosRun, Report]:
    """A small run with only the given faults (no duplicates), on the given workflows."""
    configure(aws, monkeypatch)
    run = ChaosRun(
        aws,
        seed=SMALL_SEED,
        parents=parents,
        dependencies=3,
        rates=rates,
        duplicates=0.0,
        workflow_weights=weights,
        plan=plan,
    )
    without_rings(run)
    return run, run.execute(timeout=90)


def without_rings(run: ChaosRun) -> None:
    """No dependency cycles: these runs are about Express and late events (long runs have both)."""
    run.rings = []
    run.parents = [parent for parent in run.parents if parent.ring is None]


@pytest.mark.usefixtures("workflows")
@pytest.mark.parametrize(
    ("kind", "weights"),
    [
        ("express_twin", ALL_EXPRESS),
        ("express_report_lost", ALL_EXPRESS),
        ("late_event", ALL_STANDARD),
        ("stale_redelivery", ALL_STANDARD),
        ("callback_storm", ALL_STANDARD),
        ("parent_send_throttled", ALL_STANDARD),
    ],
)
def test_each_express_or_late_event_fault_is_survived(
    aws: Aws, monkeypatch: pytest.MonkeyPatch, kind: str, weights: dict[str, float]
) -> None:
    """Each new kind alone, often: injected, and every invariant holds."""
    run, report = express_faults_run(aws, monkeypatch, rates={kind: 0.5}, weights=weights)
    assert report.faults[kind] > 0, report.render()
    assert report.ok, report.render()
    if kind == "callback_storm":
        assert report.counts["storm_records_discarded"] > 0, report.render()
        assert run.sweeps > 0
    if kind == "parent_send_throttled":
        assert report.counts["first_attempts_gone"] > 0, report.render()


def violated(report: Report, invariant: str) -> list[str]:
    """The violations of ``invariant`` (must be some)."""
    problems = report.invariants[invariant]
    assert problems, report.render()
    return problems


@pytest.mark.usefixtures("workflows")
def test_the_express_invariant_fails_when_claimed_attempts_start_again(
    aws: Aws, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Mutation: a CLAIMED Express attempt is started again, as a Standard one is."""
    original = Runs.is_express

    def claimed_is_standard(self: Runs, workflow: str, seen: PayloadStateItem | None) -> bool:
        if seen is not None and seen.state is PayloadState.CLAIMED:
            return False
        return original(self, workflow, seen)

    monkeypatch.setattr(Runs, "is_express", claimed_is_standard)
    _, report = express_faults_run(
        aws,
        monkeypatch,
        rates={},
        weights={"express": 1.0},
        parents=3,
        # The first start is followed by a crash (the claim stays CLAIMED), and the first
        # report's write fails once, so the redelivery still finds the attempt CLAIMED.
        plan={
            ("process:sfn.StartExecution", 1): "crash",
            ("reports:dynamodb.UpdateItem", 1): "server",
        },
    )
    problems = violated(report, EXPRESS_RUNS)
    assert any("the tracker started it 2 times" in p for p in problems), problems


def force_refused_final_states(monkeypatch: pytest.MonkeyPatch) -> None:
    """Mutation: a final state ``set_final`` refuses (stale, older, repeated) is written anyway."""
    original = StateTable.set_final

    def unordered(self: StateTable, **kwargs: Any) -> PayloadStateItem:
        try:
            return original(self, **kwargs)
        except TransitionConflictError:
            self._client.update_item(
                TableName=self.table_name,
                Key={"payload_id": {"S": partition_key(kwargs["payload_id"])}},
                UpdateExpression="SET #state = :state, execution_arn = :arn",
                ExpressionAttributeNames={"#state": "state"},
                ExpressionAttributeValues={
                    ":state": {"S": kwargs["state"].value},
                    ":arn": {"S": kwargs["execution_arn"]},
                },
            )
            found = self.get(kwargs["payload_id"])
            assert found is not None
            return found

    monkeypatch.setattr(StateTable, "set_final", unordered)


@pytest.mark.usefixtures("workflows")
@pytest.mark.parametrize(
    "case",
    [
        ("express_twin", {"express": 1.0}, EXPRESS_RUNS, "the payload ended by"),
        ("stale_redelivery", ALL_STANDARD, REDELIVERIES, "redelivered, recorded"),
    ],
    ids=["express_twin", "stale_redelivery"],
)
def test_the_run_invariants_fail_when_final_states_are_unordered(
    aws: Aws, monkeypatch: pytest.MonkeyPatch, case: tuple[str, dict[str, float], str, str]
) -> None:
    """Mutation: ``set_final`` back to an unordered write: a twin run's end, or an older
    event delivered again, overwrites the recorded end."""
    kind, weights, invariant, symptom = case
    force_refused_final_states(monkeypatch)
    _, report = express_faults_run(aws, monkeypatch, rates={kind: 1.0}, weights=weights)
    problems = violated(report, invariant)
    assert any(symptom in p for p in problems), problems


@pytest.mark.usefixtures("workflows")
def test_the_lost_report_invariant_fails_without_the_express_lease(
    aws: Aws, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Mutation: the lease never runs out: a later parent waits too, and nobody is told."""
    monkeypatch.setattr(settling, "lease_expired", lambda *_, **__: False)
    # One more parent after the first later one shows the payload left; the run's eight
    # would only wait out eight more leases.
    monkeypatch.setattr(injection, "MORE_PARENTS", 1)
    _, report = express_faults_run(
        aws, monkeypatch, rates={"express_report_lost": 1.0}, weights={"express": 1.0}
    )
    problems = violated(report, LOST_REPORTS)
    assert any("report lost, payload left" in p for p in problems), problems


@pytest.mark.usefixtures("workflows")
def test_the_late_event_invariant_fails_when_a_lease_reruns_an_ended_run(
    aws: Aws, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Mutation: the lease treats every run as dead (as before it described the run): a rerun."""

    original = settling.decide

    def every_expired_run_is_dead(
        payload: Any, message_id: str | None, seen: Any, facts: Facts
    ) -> Settle:
        if facts.lease_expired:
            return Settle.TAKE_OVER
        return original(payload, message_id, seen, facts)

    monkeypatch.setattr(settling, "decide", every_expired_run_is_dead)
    _, report = express_faults_run(
        aws, monkeypatch, rates={"late_event": 1.0}, weights={"pass": 1.0}
    )
    problems = violated(report, LATE_EVENTS)
    assert any("took over a run that had ended" in p for p in problems), problems


@pytest.mark.usefixtures("workflows")
def test_the_storm_invariant_fails_without_the_sweeper(
    aws: Aws, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Mutation: no sweeper: a record the stream discarded is never sent."""
    configure(aws, monkeypatch)
    run = ChaosRun(
        aws,
        seed=SMALL_SEED,
        parents=6,
        dependencies=3,
        rates={"callback_storm": 0.5},
        duplicates=0.0,
        workflow_weights=ALL_STANDARD,
    )
    run.sweeper_enabled = False
    without_rings(run)
    report = run.execute(timeout=90)
    problems = violated(report, STORMS)
    assert any("discarded by the stream, answered 0 times" in p for p in problems), problems


@pytest.mark.usefixtures("workflows")
def test_a_failed_express_start_with_no_later_message_is_recovered(
    aws: Aws, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One parent on one Express payload; the tracker's first start is throttled, and no
    other message ever comes: the claimer's own redelivery must not leave it CLAIMED.

    The chaos run's finding: the redelivery used to wait (an Express claim is
    never started twice) and was deleted, stranding the parent even past the lease.
    """
    configure(aws, monkeypatch)
    run = ChaosRun(
        aws,
        seed=SMALL_SEED,
        parents=1,
        dependencies=1,
        rates={},
        duplicates=0.0,
        workflow_weights={"express": 1.0},
        plan={("process:sfn.StartExecution", 1): "throttle"},
    )
    without_rings(run)
    began = time.monotonic()
    run.setup()
    run.send(range(len(run.parents)))
    # Pump well past the lease (nothing else will ever arrive), then settle.
    deadline = began + CHAOS_CLAIM_LEASE_SECONDS + 2.0
    while time.monotonic() < deadline:
        run.round()
    run.settle(60)
    run.injector.enabled = False
    report = run.check()
    assert report.faults["throttle"] == 1, report.render()
    assert report.ok, report.render()
