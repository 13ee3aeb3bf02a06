"""The demo in cirrus mode: the tracker's parents wait on payloads cirrus-geo runs.

The same parents and checks as :mod:`dependency_tracker_local.demo`, on cirrus's own
test workflows (:data:`dependency_tracker_local.cirrus.CIRRUS_TEST_WORKFLOWS`),
run by cirrus-geo 2.0.0's own Lambdas in the embedded stack. A payload "cirrus
ran before" is sent to cirrus's process queue, as any other cirrus user would.
"""

from __future__ import annotations

from dependency_tracker_local.demo import Dependency, Parent, Scenario, join_cases, random_parents

# cirrus-geo validates every payload it takes; these are the fields its own examples carry.
_CIRRUS_FIELDS: tuple[tuple[str, object], ...] = (("upload_options", {}), ("tasks", {}))


def cirrus_dependency(
    item: str, workflow: str = "succeed", *, seconds: int = 0, runs: int = 1, **fields: object
) -> Dependency:
    """A payload for one of cirrus's test workflows (``succeed`` waits ``seconds`` first)."""
    options: dict[str, object] = dict(_CIRRUS_FIELDS)
    if seconds:
        options["workflow_options"] = {"wait_seconds": seconds}
    options.update(fields)
    return Dependency(item, workflow=workflow, options=tuple(options.items()), expected_runs=runs)


# The simulate child's outcomes, as cirrus's test workflows.
_WORKFLOW_FOR = {"succeed": "succeed", "fail": "fail", "invalid": "invalid"}


def cirrus_member(item: str, *, seconds: int = 0, outcome: str = "succeed") -> Dependency:
    """:func:`cirrus_dependency` in the shape the shared cases build dependencies."""
    return cirrus_dependency(item, _WORKFLOW_FOR[outcome], seconds=seconds)


def build_cirrus_scenario(
    *, parents: int = 4, dependencies: int = 3, seed: int = 7, join_members: int = 20
) -> Scenario:
    """Every outcome the issue names, plus ``parents`` random ones sharing a pool."""
    done = cirrus_dependency("already-done")
    shared_a = cirrus_dependency("shared-a", seconds=2)
    shared_b = cirrus_dependency("shared-b", seconds=1)
    # Failed in cirrus with succeed=false; a parent sends it with its input fixed.
    broken_before = cirrus_dependency("fixed", "minimal", runs=2, succeed=False)
    fixed = cirrus_dependency("fixed", "minimal", runs=2, succeed=True)
    # Succeeded in cirrus before; a parent asks for it again with replace.
    replaced_before = cirrus_dependency("replaced", runs=2)
    replaced = cirrus_dependency("replaced", runs=2, replace=True)
    cases = [
        Parent("share-1", (shared_a, shared_b), "shares both payloads with share-2: one run each"),
        Parent("share-2", (shared_b, shared_a), "same payloads: cirrus's claim runs each once"),
        Parent("late", (shared_a,), "starts waiting while shared-a runs", start_after=1.0),
        Parent("replay", (done, shared_b), "already-done ran in cirrus before anyone waited"),
        Parent("rerun", (fixed,), "fixed FAILED in cirrus before: cirrus runs it again"),
        Parent("replace", (replaced,), "replaced SUCCEEDED before: replace runs it again"),
        Parent(
            "fails",
            (shared_b, cirrus_dependency("broken", "fail")),
            "a payload fails in cirrus",
            expected_error="DependencyFailed",
        ),
        Parent(
            "invalid",
            (cirrus_dependency("rejected", "invalid"),),
            "cirrus records INVALID (stactask's InvalidInput)",
            expected_error="DependencyInvalid",
        ),
        Parent(
            "timed-out",
            (cirrus_dependency("too-slow", "timeout"),),
            "the cirrus workflow times out (TIMED_OUT, recorded FAILED)",
            expected_error="DependencyFailed",
        ),
        Parent(
            "impatient",
            (cirrus_dependency("slow", seconds=5),),
            "waits 2 s on a 5 s payload",
            timeout_seconds=2,
            expected_error="DependencyTimedOut",
        ),
    ]
    cases += join_cases(cirrus_member, join_members=join_members)
    cases += random_parents(cirrus_member, parents=parents, dependencies=dependencies, seed=seed)
    return Scenario(
        parents=cases,
        finished_before=[done, broken_before, replaced_before],
        seed_queue="CirrusProcessQueueUrl",
    )
