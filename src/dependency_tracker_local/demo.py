"""The demo scenario: parents waiting on shared dependencies, with every outcome on purpose.

Only scenario and bookkeeping live here; :mod:`dependency_tracker.cli` renders it.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from dependency_tracker.cirrus.store import CirrusStateTable
from dependency_tracker.payloads.state_table import StateTable
from dependency_tracker.table.dependency_table import DependencyTable

if TYPE_CHECKING:
    from collections.abc import Callable

    from dependency_tracker.core.enums import PayloadState
    from dependency_tracker_local import EmbeddedStack

PARENT_WORKFLOW = "wait-for-dependencies"
JOIN_WORKFLOW = "wait-for-join"
CHILD_WORKFLOW = "simulate"
EXPRESS_WORKFLOW = "simulate-express"
COLLECTION = "demo"
POLL_SECONDS = 0.2


@dataclass(frozen=True)
class Dependency:
    """A child payload for ``simulate`` (or ``simulate-express``).

    With ``waits_for`` it is a nested parent instead: its workflow is
    ``wait-for-dependencies``, waiting (as itself) on that payload id.
    """

    item: str
    seconds: int = 0
    outcome: str = "succeed"
    workflow: str = CHILD_WORKFLOW
    waits_for: str | None = None
    # Other workflows (cirrus's, in cirrus mode): fields of process[0] instead of the
    # simulate task, and how many runs the story needs (a failed payload run again: 2).
    options: tuple[tuple[str, Any], ...] = ()
    expected_runs: int = 1

    @property
    def payload_id(self) -> str:
        """Its cirrus payload id."""
        return f"{COLLECTION}/workflow-{self.workflow}/{self.item}"

    def payload(self) -> dict[str, Any]:
        """The process payload that makes the child take ``seconds`` and end in ``outcome``."""
        if self.waits_for is not None:
            return {
                "type": "FeatureCollection",
                "features": [{"type": "Feature", "id": self.item, "collection": COLLECTION}],
                "process": [{"workflow": PARENT_WORKFLOW}],
                "payload_id": self.payload_id,
                "dependencies": [{"wait_for": self.waits_for}],
                "timeout_seconds": 30,
            }
        process: dict[str, Any] = {"workflow": self.workflow, **dict(self.options)}
        if self.workflow in {CHILD_WORKFLOW, EXPRESS_WORKFLOW}:
            process["tasks"] = {"simulate": {"seconds": self.seconds, "outcome": self.outcome}}
        return {
            "type": "FeatureCollection",
            "features": [{"type": "Feature", "id": self.item, "collection": COLLECTION}],
            "process": [process],
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
    quorum: int | None = None  # with join=True: k of n (None: all)
    join: bool = False  # one token for all (wait-for-join) instead of one per dependency
    expected_pending: tuple[str, ...] = ()  # join members still running when it fires
    expected_winner: str | None = None  # either-or joins
    # Locally one handler runs at a time, and registering a 200-member join takes
    # moto ~15 s; running it last keeps the other cases' timing honest.
    after_others: bool = False

    @property
    def workflow(self) -> str:
        """The parent state machine this parent runs."""
        return JOIN_WORKFLOW if self.join else PARENT_WORKFLOW


@dataclass
class Scenario:
    """Parents, plus dependencies that finish before any parent waits."""

    parents: list[Parent]
    finished_before: list[Dependency]
    # Where the finished_before payloads are sent: the tracker's queue, or (cirrus mode)
    # cirrus's own, as another cirrus user would.
    seed_queue: str = "ProcessQueueUrl"

    @property
    def dependencies(self) -> list[Dependency]:
        """Every distinct dependency, in first-seen order."""
        seen: dict[str, Dependency] = {d.item: d for d in self.finished_before}
        for parent in self.parents:
            for dependency in parent.dependencies:
                seen.setdefault(dependency.item, dependency)
        return list(seen.values())


def build_scenario(
    *, parents: int = 4, dependencies: int = 3, seed: int = 7, join_members: int = 200
) -> Scenario:
    """The fixed cases every demo shows, plus ``parents`` random ones that share a pool.

    ``join_members`` sizes the all-of join (0 leaves it out).
    """
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
            "express",
            (Dependency("x-express", seconds=1, workflow=EXPRESS_WORKFLOW), shared_b),
            "an Express child reports its own end",
        ),
        Parent(
            "impatient",
            (Dependency("slow", seconds=5),),
            "waits 2 s on a 5 s dependency",
            timeout_seconds=2,
            expected_error="DependencyTimedOut",
        ),
    ]
    cases.append(
        Parent(
            "cycle",
            (
                Dependency(
                    "loop",
                    workflow=PARENT_WORKFLOW,
                    waits_for=f"{COLLECTION}/workflow-{PARENT_WORKFLOW}/cycle",
                ),
            ),
            "its dependency waits on it: that wait is refused (DependencyCycle), "
            "the dependency fails",
            expected_error="DependencyFailed",
        )
    )
    cases += join_cases(Dependency, join_members=join_members)
    cases += random_parents(Dependency, parents=parents, dependencies=dependencies, seed=seed)
    return Scenario(parents=cases, finished_before=[done])


class MakeDependency(Protocol):
    """Builds a dependency that waits ``seconds``, then ends in ``outcome`` (either mode)."""

    def __call__(self, item: str, *, seconds: int = 0, outcome: str = "succeed") -> Dependency:
        """The dependency ``item``."""
        ...


def join_cases(make: MakeDependency, *, join_members: int) -> list[Parent]:
    """The joins every demo shows: 2 of 3 (early exit, and unreachable), either-or, all-of."""
    slow_member = make("q-slow", seconds=6)
    cases = [
        Parent(
            "quorum-2of3",
            (make("q-fast-1"), make("q-fast-2", seconds=1), slow_member),
            "join, 2 of 3: exits early while q-slow runs",
            join=True,
            quorum=2,
            expected_pending=(slow_member.item,),
        ),
        Parent(
            "quorum-fails",
            (
                make("q-broken", outcome="fail"),
                make("q-rejected", outcome="invalid"),
                make("q-slow-2", seconds=6),
            ),
            "join, 2 of 3: fails as soon as two failed",
            join=True,
            quorum=2,
            expected_error="QuorumUnreachable",
        ),
        Parent(
            "either-or",
            (make("e-slow", seconds=3), make("e-fast")),
            "join, 1 of 2: names its winner",
            join=True,
            quorum=1,
            expected_winner="e-fast",
        ),
    ]
    if join_members:
        cases.append(
            Parent(
                f"all-of-{join_members}",
                tuple(make(f"all-{index:03d}") for index in range(join_members)),
                f"join over {join_members} members, one token (runs last)",
                join=True,
                after_others=True,
                # About 0.6 s a member on moto (docs/performance-figures.md): 1 s each leaves room.
                timeout_seconds=max(60, join_members),
            )
        )
    return cases


def random_parents(
    make: MakeDependency, *, parents: int, dependencies: int, seed: int
) -> list[Parent]:
    """``parents`` parents, each on ``dependencies`` payloads drawn from one shared pool."""
    rng = random.Random(seed)  # noqa: S311  (a reproducible demo, not cryptography)
    pool = [
        make(f"pool-{index:02d}", seconds=rng.randint(0, 2))
        for index in range(max(dependencies, parents * dependencies // 2))
    ]
    return [
        Parent(
            f"random-{index + 1}",
            tuple(rng.sample(pool, dependencies)),
            "random draw from a shared pool",
        )
        for index in range(parents)
    ]


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
    errors: dict[str, str | None] = field(default_factory=dict)


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
    stack: EmbeddedStack,
    scenario: Scenario,
    *,
    on_progress: Callable[[Snapshot], None] | None = None,
    deadline_seconds: float | None = None,
) -> Report:
    """Run ``scenario`` on a started stack and check every outcome.

    The deadline defaults to a minute past the longest parent timeout.
    """
    if deadline_seconds is None:
        deadline_seconds = 60.0 + max(parent.timeout_seconds for parent in scenario.parents)
    return _Run(stack, scenario, on_progress, deadline_seconds).run()


class _Run:
    """One run of a scenario: publish, start parents, poll until all stopped."""

    def __init__(
        self,
        stack: EmbeddedStack,
        scenario: Scenario,
        on_progress: Callable[[Snapshot], None] | None,
        deadline_seconds: float,
    ) -> None:
        self.stack = stack
        self.scenario = scenario
        self.on_progress = on_progress
        self.deadline_seconds = deadline_seconds
        self.sfn = stack.client("stepfunctions")
        dynamodb = stack.client("dynamodb")
        self.states = StateTable(dynamodb, stack.outputs["StateTableName"])
        # Cirrus mode: cirrus holds the payloads' states.
        self.cirrus_states = (
            CirrusStateTable(dynamodb, stack.outputs["CirrusStateTableName"])
            if "CirrusStateTableName" in stack.outputs
            else None
        )
        self.dependencies = DependencyTable(dynamodb, stack.outputs["DependencyTableName"])
        self.statuses = [ParentStatus(parent) for parent in scenario.parents]
        self.started = time.monotonic()

    def run(self) -> Report:
        # Dependencies that finish before anyone waits on them.
        sqs = self.stack.client("sqs")
        for dependency in self.scenario.finished_before:
            sqs.send_message(
                QueueUrl=self.stack.outputs[self.scenario.seed_queue],
                MessageBody=json.dumps(dependency.payload()),
            )
        self._wait_for(self._finished_before_done)
        phase = time.monotonic()
        self._wait_for(
            lambda: all(status.done for status in self.statuses),
            lambda: self._start_or_poll(time.monotonic() - phase),
        )
        final = self.snapshot()
        for dependency in self.scenario.dependencies:
            rows = self.dependencies.rows(dependency.payload_id)
            final.waiters[dependency.item] = len(list(rows))
        problems = _problems(self.scenario, final)
        # The IAM model (on unless DEPTRACK_IAM=0): a call a role does not allow fails on AWS.
        denials = [] if self.stack.iam is None else self.stack.iam.denials
        problems += [f"IAM refused {d.action} on {d.resource} to {d.caller}" for d in denials]
        return Report(snapshot=final, problems=problems)

    def snapshot(self) -> Snapshot:
        seen = self._read([d.payload_id for d in self.scenario.dependencies])
        snap = Snapshot(elapsed=time.monotonic() - self.started, parents=self.statuses)
        for dependency in self.scenario.dependencies:
            state, runs, error = seen.get(dependency.payload_id, (None, 0, None))
            snap.states[dependency.item] = state
            snap.executions[dependency.item] = runs
            snap.errors[dependency.item] = error
        return snap

    def _read(self, ids: list[str]) -> dict[str, tuple[PayloadState, int, str | None]]:
        """State, runs and last error of each payload that has a state."""
        if self.cirrus_states is None:
            items = self.states.batch_get(ids)
            return {pid: (i.state, len(i.executions), i.last_error) for pid, i in items.items()}
        found = {}
        for pid in ids:
            item = self.cirrus_states.get(pid)
            # A cycle refusal or an invalid message is the tracker's own record.
            own = self.states.get(pid) if item is None else None
            if item is not None:
                found[pid] = (item.state, len(item.executions), item.last_error)
            elif own is not None:
                found[pid] = (own.state, len(own.executions), own.last_error)
        return found

    def _finished_before_done(self) -> bool:
        seen = self._read([d.payload_id for d in self.scenario.finished_before])
        return all(
            d.payload_id in seen and seen[d.payload_id][0].is_terminal
            for d in self.scenario.finished_before
        )

    def _start_or_poll(self, since_start: float) -> None:
        others_done = all(s.done for s in self.statuses if not s.parent.after_others)
        for status in self.statuses:
            if others_done or not status.parent.after_others:
                _advance(self.sfn, self.stack, status, since_start)

    def _wait_for(self, done: Callable[[], bool], step: Callable[[], None] | None = None) -> None:
        while not done():
            _check_deadline(self.started, self.deadline_seconds)
            if step:
                step()
            if self.on_progress:
                self.on_progress(self.snapshot())
            time.sleep(POLL_SECONDS)


def _advance(sfn: Any, stack: EmbeddedStack, status: ParentStatus, since_start: float) -> None:
    parent = status.parent
    if status.execution_arn is None:
        if since_start < parent.start_after:
            return
        body: dict[str, Any] = {
            "payload_id": f"{COLLECTION}/workflow-{parent.workflow}/{parent.name}",
            "dependencies": [d.payload() for d in parent.dependencies],
            "timeout_seconds": parent.timeout_seconds,
        }
        if parent.join:
            body["quorum"] = parent.quorum
        response = sfn.start_execution(
            stateMachineArn=stack.outputs["StateMachines"][parent.workflow],
            name=f"demo-{parent.name}",
            input=json.dumps(body),
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
    runs = {d.item: d.expected_runs for d in scenario.dependencies}
    for item, count in final.executions.items():
        if count != runs[item]:
            problems.append(f"dependency {item}: {count} executions, expected exactly {runs[item]}")
    for status in final.parents:
        problems.extend(_join_problems(status))
    for dependency in scenario.dependencies:
        if (
            dependency.waits_for is not None
            and final.errors.get(dependency.item) != "DependencyCycle"
        ):
            problems.append(
                f"dependency {dependency.item}: expected its wait to be refused with "
                f"DependencyCycle, got {final.errors.get(dependency.item)}"
            )
    return problems + _replay_problems(scenario, final)


def _replay_problems(scenario: Scenario, final: Snapshot) -> list[str]:
    """The "replay" parent got what finished before it from the stored result."""
    replay = next((s for s in final.parents if s.parent.name == "replay"), None)
    if replay is None or replay.output is None:
        return []
    replayed = {d["payload_id"]: d["replayed"] for d in replay.output["dependencies"]}
    return [
        f"parent replay: {dependency.item} was not replayed from the stored result"
        for dependency in scenario.finished_before
        if dependency in replay.parent.dependencies
        and replayed.get(dependency.payload_id) is not True
    ]


def _join_problems(status: ParentStatus) -> list[str]:
    parent = status.parent
    if not parent.join or status.status != "SUCCEEDED" or status.output is None:
        return []
    summary = status.output["join"]
    problems = []
    by_item = {d.item: d for d in parent.dependencies}
    pending = {by_item[item].payload_id for item in parent.expected_pending}
    # Past 32 KiB a summary carries counts and a summary_url, not the lists (the
    # large all-of join, which expects nothing pending).
    if not pending <= set(summary.get("pending", [])):
        problems.append(f"parent {parent.name}: did not exit before {sorted(pending)} finished")
    if parent.expected_winner is not None:
        wanted = by_item[parent.expected_winner].payload_id
        if summary.get("winner") != wanted:
            problems.append(f"parent {parent.name}: winner {summary.get('winner')}, not {wanted}")
    return problems


def _check_deadline(started: float, deadline_seconds: float) -> None:
    if time.monotonic() - started > deadline_seconds:
        msg = f"the demo did not finish within {deadline_seconds:.0f} s"
        raise TimeoutError(msg)
