"""The demo fails loudly when an outcome differs from the scenario."""

from __future__ import annotations

from dependency_tracker.demo import ParentStatus, Snapshot, _problems, build_scenario
from dependency_tracker.models import PayloadState


def test_scenario_covers_every_case() -> None:
    scenario = build_scenario(parents=3, dependencies=2, seed=1)
    errors = {parent.expected_error for parent in scenario.parents}
    assert errors == {None, "DependencyFailed", "DependencyInvalid", "DependencyTimedOut"}
    assert any(parent.start_after > 0 for parent in scenario.parents)
    assert scenario.finished_before
    assert build_scenario(parents=3, dependencies=2, seed=1) == scenario


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
