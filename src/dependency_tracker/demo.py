"""The demo scenario: parents waiting on shared dependencies, with every outcome on purpose.

Only scenario and bookkeeping live here; :mod:`dependency_tracker.cli` renders it.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from dependency_tracker.stores import DependencyTable, StateTable

if TYPE_CHECKING:
    from collections.abc import Callable

    from dependency_tracker.local import LocalStack
    from dependency_tracker.models import PayloadState

PARENT_WORKFLOW = "wait-for-dependencies"
CHILD_WORKFLOW = "simulate"
COLLECTION = "demo"
POLL_SECONDS = 0.2


@dataclass(frozen=True)
class Dependency:
    """A child payload for the ``simulate`` workflow."""

    item: str
    seconds: int = 0
    outcome: str = "succeed"

    @property
    def payload_id(self) -> str:
        """Its cirrus payload id."""
        return f"{COLLECTION}/workflow-{CHILD_WORKFLOW}/{self.item}"

    def payload(self) -> dict[str, Any]:
        """The process payload that makes ``simulate`` take ``seconds`` and ``outcome``."""
        simulate = {"seconds": self.seconds, "outcome": self.outcome}
        return {
            "type": "FeatureCollection",
            "features": [{"type": "Feature", "id": self.item, "collection": COLLECTION}],
            "process": [{"workflow": CHILD_WORKFLOW, "tasks": {"simulate": simulate}}],
        }


@dataclass(frozen=True)
class Parent:
    """A parent execution of ``wait-for-dependencies`` and what it should end with."""

    name: str
    dependencies: tuple[Dependency, ...]
    story: str
    timeout_seconds: int = 60
    start_after: float = 0.0
    expected_error: str | None = None  # None: the parent should succeed


@dataclass
class Scenario:
    """Parents, plus dependencies that finish before any parent waits."""

    parents: list[Parent]
    finished_before: list[Dependency]

    @property
    def dependencies(self) -> list[Dependency]:
        """Every distinct dependency, in first-seen order."""
        seen: dict[str, Dependency] = {d.item: d for d in self.finished_before}
        for parent in self.parents:
            for dependency in parent.dependencies:
                seen.setdefault(dependency.item, dependency)
        return list(seen.values())


def build_scenario(*, parents: int = 4, dependencies: int = 3, seed: int = 7) -> Scenario:
    """The fixed cases every demo shows, plus ``parents`` random ones that share a pool."""
    done = Dependency("already-done")
    shared_a = Dependency("shared-a", seconds=2)
    shared_b = Dependency("shared-b", seconds=1)
    cases = [
        Parent("share-1", (shared_a, shared_b), "shares both dependencies with share-2"),
        Parent("share-2", (shared_b, shared_a), "same dependencies, one execution each"),
        Parent("late", (shared_a,), "starts waiting while shared-a runs", start_after=1.0),
        Parent("replay", (done, shared_b), "already-done finished before it waited"),
        Parent(
            "fails",
            (shared_b, Dependency("broken", outcome="fail")),
            "a dependency fails",
            expected_error="DependencyFailed",
        ),
        Parent(
            "invalid",
            (Dependency("rejected", outcome="invalid"),),
            "a dependency rejects its input",
            expected_error="DependencyInvalid",
        ),
        Parent(
            "impatient",
            (Dependency("slow", seconds=5),),
            "waits 2 s on a 5 s dependency",
            timeout_seconds=2,
            expected_error="DependencyTimedOut",
        ),
    ]
    rng = random.Random(seed)  # noqa: S311  (a reproducible demo, not cryptography)
    pool = [
        Dependency(f"pool-{index:02d}", seconds=rng.randint(0, 2))
        for index in range(max(dependencies, parents * dependencies // 2))
    ]
    for index in range(parents):
        picked = tuple(rng.sample(pool, dependencies))
        cases.append(Parent(f"random-{index + 1}", picked, "random draw from a shared pool"))
    return Scenario(parents=cases, finished_before=[done])


@dataclass
class ParentStatus:
    """What a parent is doing now, or what it did."""

    parent: Parent
    execution_arn: str | None = None
    status: str = "PENDING"
    error: str | None = None
    waited: float | None = None
    output: dict[str, Any] | None = None

    @property
    def done(self) -> bool:
        """True once the execution stopped."""
        return self.status not in {"PENDING", "RUNNING"}

    @property
    def as_expected(self) -> bool:
        """True when it ended the way the scenario says it should."""
        if self.parent.expected_error is None:
            return self.status == "SUCCEEDED"
        return self.status == "FAILED" and self.error == self.parent.expected_error


@dataclass
class Snapshot:
    """The whole demo at one moment."""

    elapsed: float
    parents: list[ParentStatus]
    states: dict[str, PayloadState | None] = field(default_factory=dict)
    executions: dict[str, int] = field(default_factory=dict)
    waiters: dict[str, int] = field(default_factory=dict)


@dataclass
class Report:
    """The final snapshot and the checks that make the demo pass or fail."""

    snapshot: Snapshot
    problems: list[str]

    @property
    def ok(self) -> bool:
        """True when every outcome is what the scenario expects."""
        return not self.problems


def run_scenario(
    stack: LocalStack,
    scenario: Scenario,
    *,
    on_progress: Callable[[Snapshot], None] | None = None,
    deadline_seconds: float = 60.0,
) -> Report:
    """Run ``scenario`` on a started stack and check every outcome."""
    sfn = stack.client("stepfunctions")
    sqs = stack.client("sqs")
    dynamodb = stack.client("dynamodb")
    state_table = StateTable(dynamodb, stack.outputs["StateTableName"])
    dependency_table = DependencyTable(dynamodb, stack.outputs["DependencyTableName"])
    started = time.monotonic()
    statuses = [ParentStatus(parent) for parent in scenario.parents]

    def snapshot() -> Snapshot:
        items = state_table.batch_get(d.payload_id for d in scenario.dependencies)
        snap = Snapshot(elapsed=time.monotonic() - started, parents=statuses)
        for dependency in scenario.dependencies:
            item = items.get(dependency.payload_id)
            snap.states[dependency.item] = None if item is None else item.state
            snap.executions[dependency.item] = 0 if item is None else len(item.executions)
        return snap

    # Dependencies that finish before anyone waits on them.
    for dependency in scenario.finished_before:
        sqs.send_message(
            QueueUrl=stack.outputs["ProcessQueueUrl"], MessageBody=json.dumps(dependency.payload())
        )
    while not all(
        (item := state_table.get(d.payload_id)) is not None and item.state.is_terminal
        for d in scenario.finished_before
    ):
        _check_deadline(started, deadline_seconds)
        if on_progress:
            on_progress(snapshot())
        time.sleep(POLL_SECONDS)

    phase = time.monotonic()
    while not all(status.done for status in statuses):
        _check_deadline(started, deadline_seconds)
        for status in statuses:
            _advance(sfn, stack, status, time.monotonic() - phase)
        if on_progress:
            on_progress(snapshot())
        time.sleep(POLL_SECONDS)

    final = snapshot()
    for dependency in scenario.dependencies:
        final.waiters[dependency.item] = len(list(dependency_table.waiters(dependency.payload_id)))
    return Report(snapshot=final, problems=_problems(scenario, final))


def _advance(sfn: Any, stack: LocalStack, status: ParentStatus, since_start: float) -> None:
    parent = status.parent
    if status.execution_arn is None:
        if since_start < parent.start_after:
            return
        response = sfn.start_execution(
            stateMachineArn=stack.outputs["StateMachines"][PARENT_WORKFLOW],
            name=f"demo-{parent.name}",
            input=json.dumps(
                {
                    "payload_id": f"{COLLECTION}/workflow-{PARENT_WORKFLOW}/{parent.name}",
                    "dependencies": [d.payload() for d in parent.dependencies],
                    "timeout_seconds": parent.timeout_seconds,
                }
            ),
        )
        status.execution_arn = response["executionArn"]
        status.status = "RUNNING"
        return
    if status.done:
        return
    described = sfn.describe_execution(executionArn=status.execution_arn)
    status.status = described["status"]
    stop = described.get("stopDate") or datetime.now(UTC)
    status.waited = (stop - described["startDate"]).total_seconds()
    if status.done:
        status.error = described.get("error")
        status.output = json.loads(described["output"]) if described.get("output") else None


def _problems(scenario: Scenario, final: Snapshot) -> list[str]:
    problems = []
    for status in final.parents:
        if not status.as_expected:
            wanted = status.parent.expected_error or "SUCCEEDED"
            got = status.error or status.status
            problems.append(f"parent {status.parent.name}: expected {wanted}, got {got}")
    for item, count in final.executions.items():
        if count != 1:
            problems.append(f"dependency {item}: {count} executions, expected exactly 1")
    replay = next((s for s in final.parents if s.parent.name == "replay"), None)
    if replay is not None and replay.output is not None:
        replayed = {d["payload_id"]: d["replayed"] for d in replay.output["dependencies"]}
        if replayed.get(Dependency("already-done").payload_id) is not True:
            problems.append("parent replay: already-done was not replayed from the stored result")
    return problems


def _check_deadline(started: float, deadline_seconds: float) -> None:
    if time.monotonic() - started > deadline_seconds:
        msg = f"the demo did not finish within {deadline_seconds:.0f} s"
        raise TimeoutError(msg)
