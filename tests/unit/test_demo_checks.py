"""The demo fails loudly when an outcome differs from the scenario."""

from __future__ import annotations

from dependency_tracker.core.enums import PayloadState
from dependency_tracker_local.demo import ParentStatus, Snapshot, _problems, build_scenario


def test_scenario_covers_every_case() -> None:
    scenario = build_scenario(parents=3, dependencies=2, seed=1)
    errors = {parent.expected_error for parent in scenario.parents}
    assert errors == {
        None,
        "DependencyFailed",
        "DependencyInvalid",
        "DependencyTimedOut",
        "QuorumUnreachable",
    }
    joins = [parent for parent in scenario.parents if parent.join]
    assert {parent.quorum for parent in joins} == {None, 1, 2}
    assert max(len(parent.dependencies) for parent in joins) == 200
    assert any(parent.start_after > 0 for parent in scenario.parents)
    assert scenario.finished_before
    assert build_scenario(parents=3, dependencies=2, seed=1) == scenario


def test_a_join_that_waited_too_long_or_named_another_winner_is_a_problem() -> None:
    scenario = build_scenario(parents=0, dependencies=1, join_members=0)
    quorum = next(p for p in scenario.parents if p.name == "quorum-2of3")
    either = next(p for p in scenario.parents if p.name == "either-or")
    late = ParentStatus(quorum, status="SUCCEEDED", output={"join": {"pending": []}})
    wrong = ParentStatus(
        either, status="SUCCEEDED", output={"join": {"pending": [], "winner": "x"}}
    )
    snap = Snapshot(elapsed=1.0, parents=[late, wrong])
    problems = _problems(scenario, snap)
    assert any("quorum-2of3: did not exit before" in p for p in problems)
    assert any("either-or: winner x" in p for p in problems)


def test_wrong_outcomes_and_double_executions_are_problems() -> None:
    scenario = build_scenario(parents=0, dependencies=1)
    statuses = [ParentStatus(parent, status="SUCCEEDED") for parent in scenario.parents]
    snap = Snapshot(elapsed=1.0, parents=statuses)
    for dependency in scenario.dependencies:
        snap.states[dependency.item] = PayloadState.SUCCEEDED
        snap.executions[dependency.item] = 1
    snap.executions["shared-a"] = 2
    problems = _problems(scenario, snap)
    assert "dependency shared-a: 2 executions, expected exactly 1" in problems
    assert "parent fails: expected DependencyFailed, got SUCCEEDED" in problems
    assert "parent impatient: expected DependencyTimedOut, got SUCCEEDED" in problems


def test_a_cycle_that_was_not_refused_is_a_problem() -> None:
    scenario = build_scenario(parents=0, dependencies=1, join_members=0)
    cycle = next(p for p in scenario.parents if p.name == "cycle")
    (loop,) = cycle.dependencies
    assert loop.waits_for == f"demo/workflow-wait-for-dependencies/{cycle.name}"
    assert loop.payload()["dependencies"] == [{"wait_for": loop.waits_for}]
    snap = Snapshot(elapsed=1.0, parents=[ParentStatus(cycle, status="FAILED")])
    snap.errors[loop.item] = "DependencyTimedOut"
    problems = _problems(scenario, snap)
    assert any("loop: expected its wait to be refused with DependencyCycle" in p for p in problems)
    snap.errors[loop.item] = "DependencyCycle"
    assert not any("loop:" in p for p in _problems(scenario, snap))
