"""The faults that found the retried-send, release and rerun defects, each often, in short runs.

* ``parent_send_throttled`` on joins: every order of the two sends (the first's message
  before the retry's, after it, after the parent was answered) and its late
  redelivery, on named joins inline, by manifest and by ``{"url"}`` members, and on a
  join keyed by each send's token.
* ``operator_release`` and ``operator_rerun``: the CLI's own ``release`` and ``rerun``
  at many moments of a run (reruns twice in a row, the second message held back).

Each is also shown to catch what it is for: with the tracker's rule undone (a plain
submission reruns a SUCCEEDED payload; a rerun sent without ``replace_if``; a released
join still counted as a wait) the matching invariant fails.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from dependency_tracker.cycles import edges
from dependency_tracker.payloads import settling
from dependency_tracker.payloads.settling import Facts, Settle
from dependency_tracker_cli.commands import rerun as rerun_command
from tests.chaos.cycle_invariants import CYCLES_HELD
from tests.chaos.invariants import FIRST_ATTEMPTS, TOKENS
from tests.chaos.operator_invariants import RELEASES, SUCCEEDED_RUNS
from tests.chaos.run import ChaosRun, Report
from tests.chaos.test_chaos import configure, without_rings

if TYPE_CHECKING:
    from tests.conftest import Aws

SEED = 5
STANDARD = {"pass": 0.5, "fail": 0.3, "invalid": 0.2}
# Parent index -> (order, join form, redelivered late): every case once.
SEND_PLAN = {
    0: ("first_then_retry", "inline", True),
    1: ("retry_then_first", "manifest", True),
    2: ("first_late", "url", False),
    3: ("retry_then_first", "url", False),
    4: ("first_then_retry", "manifest", False),
    5: ("first_late", "inline", False),
    6: ("first_then_retry", "inline_unnamed", True),
    7: ("before", "manifest", False),
}


def short_run(
    aws: Aws,
    monkeypatch: pytest.MonkeyPatch,
    *,
    rates: dict[str, float],
    parents: int,
    join_share: float,
    rings: bool = False,
    setup: Any = None,
    weights: dict[str, float] | None = None,
) -> tuple[ChaosRun, Report]:
    configure(aws, monkeypatch)
    run = ChaosRun(
        aws,
        seed=SEED,
        parents=parents,
        dependencies=4,
        rates=rates,
        duplicates=0.0,
        join_share=join_share,
        workflow_weights=weights or STANDARD,
    )
    if not rings:
        without_rings(run)
    if setup is not None:
        setup(run)
    return run, run.execute(timeout=120)


@pytest.mark.usefixtures("workflows")
def test_a_joins_retried_send_in_every_order_is_answered_once(
    aws: Aws, monkeypatch: pytest.MonkeyPatch
) -> None:
    def plan(run: ChaosRun) -> None:
        run.messages.send_plan = dict(SEND_PLAN)

    _run, report = short_run(
        aws,
        monkeypatch,
        rates={"parent_send_throttled": 1.0},
        parents=len(SEND_PLAN),
        join_share=1.0,
        setup=plan,
    )
    assert report.ok, report.render()
    counts = report.counts
    assert counts["parent_sends_throttled_after_send"] == len(SEND_PLAN) - 1, report.render()
    assert counts["first_attempts_gone"] == len(SEND_PLAN) - 1, report.render()
    assert counts["first_sent_late"] == 2, report.render()
    assert counts["first_redelivered_late"] == 3, report.render()
    # Both tokens of each named join whose first message came (six) on its one row.
    assert counts["join_tokens"] == counts["join_rows_tokens_checked"] + 6, report.render()
    assert FIRST_ATTEMPTS in report.invariants
    assert TOKENS in report.invariants


@pytest.mark.usefixtures("workflows")
def test_operator_releases_and_reruns_at_random_moments(
    aws: Aws, monkeypatch: pytest.MonkeyPatch
) -> None:
    def often(run: ChaosRun) -> None:
        run.operator.most = 6
        run.operator.twice_share = 0.7

    run, report = short_run(
        aws,
        monkeypatch,
        rates={"operator_release": 0.3, "operator_rerun": 0.3, "parent_send_throttled": 0.3},
        parents=16,
        join_share=0.4,
        rings=True,
        setup=often,
    )
    assert report.ok, report.render()
    counts = report.counts
    assert counts["releases_of_parents"] > 0, report.render()
    assert counts["reruns"] > 0, report.render()
    assert counts["reruns_twice"] > 0, report.render()
    assert counts["rerun_claims"] > 0, report.render()
    assert RELEASES in report.invariants
    assert run.operator.releases


# ------------------------------------------------------------------ mutations


@pytest.mark.usefixtures("workflows")
def test_the_replacement_invariant_fails_when_a_plain_submission_reruns_a_success(
    aws: Aws, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Mutation: every terminal payload runs again on the next submission."""
    original = settling.decide

    def rerun_anything(payload: Any, message_id: str | None, seen: Any, facts: Facts) -> Settle:
        if seen is None:
            return original(payload, message_id, seen, facts)
        redelivered = message_id is not None and seen.claim_message_id == message_id
        if seen.state.is_terminal and payload.replace_if is None and not redelivered:
            return Settle.START
        return original(payload, message_id, seen, facts)

    monkeypatch.setattr(settling, "decide", rerun_anything)
    _, report = short_run(
        aws, monkeypatch, rates={}, parents=12, join_share=0.0, weights={"pass": 1.0}
    )
    problems = report.invariants[SUCCEEDED_RUNS]
    assert any("claimed over SUCCEEDED" in p for p in problems), report.render()


@pytest.mark.usefixtures("workflows")
def test_the_replacement_invariant_fails_when_a_rerun_forgets_what_it_read(
    aws: Aws, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Mutation: ``rerun`` sends ``replace`` without ``replace_if`` (as before): its
    second message, held back, starts a third attempt over the second one's outcome."""
    original = rerun_command.with_replace
    monkeypatch.setattr(rerun_command, "with_replace", lambda doc, _seen: original(doc, None))

    def twice_held(run: ChaosRun) -> None:
        run.operator.most = 4
        run.operator.twice_share = 1.0
        run.operator.held_share = 1.0

    _, report = short_run(
        aws,
        monkeypatch,
        rates={"operator_rerun": 0.5},
        parents=12,
        join_share=0.0,
        setup=twice_held,
    )
    problems = report.invariants[SUCCEEDED_RUNS]
    assert any("a rerun that read" in p for p in problems), report.render()


@pytest.mark.usefixtures("workflows")
def test_the_cycle_invariant_fails_when_a_released_join_still_counts(
    aws: Aws, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Mutation: the cycle check ignores ``released_at``: a join ring's join, released
    before its member's wait arrives, still closes the cycle and the wait is refused."""
    monkeypatch.setattr(edges.WaitEdges, "_released_joins", lambda _self, _ids: set())
    configure(aws, monkeypatch)
    run = ChaosRun(aws, seed=SEED, parents=0, dependencies=1, rates={}, duplicates=0.0)
    run.rings = [ring for ring in run.rings if ring.shape == "join"][:1]
    (ring,) = run.rings
    run.parents = sorted((p for p in run.parents if p.ring is ring), key=lambda p: p.position)
    join, _member = run.parents
    run.setup()
    # GIVEN the ring's join registered (its member started, not ended yet)
    run.send(range(1))
    run.pumps.sqs.pump_once()
    # WHEN the operator releases it, and then its member's wait on it arrives
    done = run.operator.release(0, join, by_arn=True)
    assert done.outcomes() == {f"join:{join.join_key}": "released"}, done
    run.send(range(1, 2))
    run.settle(60)
    report = run.check()
    # THEN the member's wait is refused through a join that no longer waited
    problems = report.invariants[CYCLES_HELD]
    assert any("released at" in p for p in problems), report.render()
    assert report.counts["releases_of_parents"] == 1, report.render()


@pytest.mark.usefixtures("workflows")
def test_a_released_joins_member_waits_on_it_without_a_refusal(
    aws: Aws, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same moment, the tracker as it is: the released join no longer waits, so the
    member's wait on it closes no cycle; it waits."""
    configure(aws, monkeypatch)
    run = ChaosRun(aws, seed=SEED, parents=0, dependencies=1, rates={}, duplicates=0.0)
    run.rings = [ring for ring in run.rings if ring.shape == "join"][:1]
    (ring,) = run.rings
    run.parents = sorted((p for p in run.parents if p.ring is ring), key=lambda p: p.position)
    join, member = run.parents
    run.setup()
    run.send(range(1))
    run.pumps.sqs.pump_once()
    run.operator.release(0, join, by_arn=True)
    run.send(range(1, 2))
    run.settle(60)
    report = run.check()
    assert report.ok, report.render()
    assert [s.error for s in run.fake.sent[join.token]] == ["DependencyReleased"]
    assert member.token not in run.fake.sent
    assert report.counts["cycles_released"] == 1, report.render()
