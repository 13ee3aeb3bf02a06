"""Many parents, shared dependencies: one child execution per payload, every parent once."""

from __future__ import annotations

import json
import random
import time
from typing import TYPE_CHECKING

import pytest

from dependency_tracker.core.enums import PayloadState
from tests.conftest import wait_until
from tests.e2e.conftest import (
    all_child_runs,
    child_executions,
    dependency,
    dependency_id,
    finished,
    start_parent,
    state_of,
)

if TYPE_CHECKING:
    from dependency_tracker_local import LocalStack

pytestmark = pytest.mark.e2e


def test_second_parent_joins_a_running_dependency(stack: LocalStack) -> None:
    # GIVEN a parent whose dependency is running
    first = start_parent(stack, "join-1", [dependency("m-running", seconds=2)])
    wait_until(
        lambda: (
            (item := state_of(stack, dependency_id("m-running"))) is not None
            and item.state is PayloadState.PROCESSING
        )
    )
    # WHEN a second parent starts waiting on it
    second = start_parent(stack, "join-2", [dependency("m-running", seconds=2)])
    # THEN both resume from the same single execution
    outputs = [json.loads(finished(stack, arn)["output"]) for arn in (first, second)]
    assert [out["dependencies"] for out in outputs] == [
        [{"payload_id": dependency_id("m-running"), "replayed": False}]
    ] * 2
    assert len(child_executions(stack, dependency_id("m-running"))) == 1


def test_fifty_parents_five_dependencies_heavy_overlap(stack: LocalStack) -> None:
    # GIVEN 50 parents, each waiting on 5 of 15 shared dependencies (seeded)
    rng = random.Random(20261122)
    pool = [f"m-pool-{index:02d}" for index in range(15)]
    seconds = {item: rng.randint(0, 1) for item in pool}
    plans = {f"heavy-{n:02d}": rng.sample(pool, 5) for n in range(50)}
    runs_before = len(all_child_runs(stack))
    started = time.monotonic()
    parents = {
        name: start_parent(stack, name, [dependency(i, seconds=seconds[i]) for i in items])
        for name, items in plans.items()
    }
    # WHEN everything settles
    results = {name: finished(stack, arn, timeout=120) for name, arn in parents.items()}
    elapsed = time.monotonic() - started
    # THEN every parent resumed exactly once with its own dependencies, in order
    sfn = stack.client("stepfunctions")
    for name, described in results.items():
        assert described["status"] == "SUCCEEDED", (name, described.get("error"))
        got = [d["payload_id"] for d in json.loads(described["output"])["dependencies"]]
        assert got == [dependency_id(i) for i in plans[name]]
        history = sfn.get_execution_history(executionArn=parents[name], maxResults=1000)
        assert [e["type"] for e in history["events"]].count("TaskSucceeded") == 5
    # AND each payload ran exactly once
    used = {item for items in plans.values() for item in items}
    for item in used:
        assert len(child_executions(stack, dependency_id(item))) == 1, item
    assert len(all_child_runs(stack)) - runs_before == len(used)
    print(f"\n50x5 heavy overlap: {len(used)} payloads, {elapsed:.1f}s")  # noqa: T201
