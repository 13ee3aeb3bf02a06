"""Throughput of the whole local pipeline: many parents on overlapping dependencies.

All parents are started at once; every edge goes through the whole pipeline
(the parent's message, the process handler, the child, the status change,
update-state, the stream, the callback, the parent's iteration). The figure is
resolved edges per second from the first parent's start to the last parent's
resume. The calls each edge needed are counted on the way, so that
:mod:`bench.timing` can time each of them in isolation (the engine bound).
Wall-clock figures of this machine: only ``python -m bench.timing`` runs it.
"""

from __future__ import annotations

import json
import resource
import threading
import time
from collections import Counter, defaultdict
from typing import TYPE_CHECKING, Any

from bench import history
from bench.config import JOIN, MAP, ThroughputConfig
from bench.counting import TRACKER, instrument
from bench.patterns import DATA_PLUMBING
from bench.stack import JOIN_MACHINE, MAP_MACHINE, local_stack, payload, warm_interpreter
from bench.stats import mean, rounded

if TYPE_CHECKING:
    from collections.abc import Callable

    from bench.joins import Profiler
    from dependency_tracker_local import EmbeddedStack


def plan(parents: int, dependencies: int, stride: int) -> list[list[int]]:
    """Payload indexes of each parent: a window of ``dependencies`` sliding by ``stride``."""
    pool = parents * stride
    return [[(stride * p + k) % pool for k in range(dependencies)] for p in range(parents)]


def overlap(assignment: list[list[int]]) -> float:
    """Share of edges whose payload another edge already brought: 1 - distinct / edges."""
    edges = sum(len(deps) for deps in assignment)
    distinct = len({index for deps in assignment for index in deps})
    return 1 - distinct / edges


def run_scale(
    parents: int,
    dependencies: int,
    config: ThroughputConfig,
    *,
    log: Callable[[str], None],
    profiler: Callable[[float], Profiler],
) -> dict[str, Any]:
    """One scale on a fresh stack; ``profiler(interval)`` samples where the CPU went."""
    assignment = plan(parents, dependencies, config.stride)
    tag = f"t{parents}x{dependencies}"
    with local_stack() as stack:
        warm_interpreter(stack)
        tools = instrument(stack, token_chars=None)
        machine = str(
            stack.outputs["StateMachines"][MAP_MACHINE if config.pattern == MAP else JOIN_MACHINE]
        )
        sfn = stack.client("stepfunctions")
        tools.settle()
        tools.calls.drain()
        tools.invocations.drain()
        depth = _DepthSampler(stack, interval=config.profile_interval)
        cpu = profiler(config.profile_interval)
        cpu.start()
        depth.start()
        started = time.perf_counter()
        arns = []
        for p, indexes in enumerate(assignment):
            body = {
                "dependencies": [payload(f"{tag}-{i:05d}", seconds=None) for i in indexes],
                "timeout_seconds": int(config.run_timeout) + 600,
            }
            arns.append(
                sfn.start_execution(
                    stateMachineArn=machine, name=f"{tag}-p{p:04d}", input=json.dumps(body)
                )["executionArn"]
            )
        started_all = time.perf_counter() - started
        log(f"  {tag}: {parents} parents started in {started_all:.1f} s")
        _wait_all(sfn, machine, timeout=config.run_timeout)
        finished = time.perf_counter() - started
        tools.settle(timeout=config.run_timeout)
        depth.stop()
        profile = cpu.stop()
        window = tools.calls.drain()
        invocations = tools.invocations.drain()
        peak_rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        result = _collect(stack, arns, parents, dependencies, config)
        edges = result["edges_resolved"]
        span = result["span_s"]
        log(
            f"  {tag}: {edges} edges resolved in {span:.1f} s "
            f"({edges / span:.2f} edges/s), peak RSS {peak_rss_mib:.0f} MiB"
        )
        calls: dict[str, dict[str, Any]] = defaultdict(dict)
        for (category, service, operation, table), stats in sorted(window.calls.items()):
            name = f"{service}.{operation}" + (f"@{table}" if table else "")
            if category == TRACKER:
                calls["tracker"][name] = _call(stats.count, stats.seconds, edges)
                continue
            data = stats.count - stats.empty if operation in DATA_PLUMBING else 0
            idle = stats.count - data
            idle_seconds = stats.empty_seconds if data else stats.seconds
            if data:
                calls["plumbing_data"][name] = _call(data, stats.seconds - idle_seconds, edges)
                if stats.items:
                    calls["plumbing_data"][name]["items_per_call"] = round(stats.items / data, 2)
            if idle:
                calls["plumbing_idle"][name] = _call(idle, idle_seconds, edges)
        return {
            "parents": parents,
            "dependencies_per_parent": dependencies,
            "pattern": config.pattern,
            "edges": parents * dependencies,
            "distinct_payloads": len({i for deps in assignment for i in deps}),
            "overlap": round(overlap(assignment), 3),
            "start_phase_s": round(started_all, 2),
            "wall_s": round(finished, 2),
            **result,
            "edges_per_s": round(edges / span, 3),
            "peak_rss_mib": round(peak_rss_mib, 1),
            "peak_rss_source": "resource.getrusage(RUSAGE_SELF).ru_maxrss of this process",
            "queue_depth_mean": rounded(mean(depth.samples), 1),
            "queue_depth_max": max(depth.samples, default=0),
            "calls": dict(calls),
            "lambda": {
                name: {"invocations": stats.invocations, "records": stats.records}
                for name, stats in sorted(invocations.items())
            },
            "cpu": profile,
            "dead_letters": {key: len(value) for key, value in stack.dead_letters.items()},
            "pump_errors": stack.pump_errors,
        }


def _call(count: int, seconds: float, edges: int) -> dict[str, Any]:
    """Count, count per edge and time per call as measured in the run (under load)."""
    return {
        "count": count,
        "per_edge": round(count / edges, 4),
        "in_situ_ms": round(seconds / count * 1000, 3),
        "total_s": round(seconds, 3),
    }


def _wait_all(sfn: Any, machine: str, *, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        running = sfn.list_executions(stateMachineArn=machine, statusFilter="RUNNING")
        if not running["executions"]:
            return
        if time.monotonic() > deadline:
            msg = f"{len(running['executions'])}+ parents still running after {timeout} s"
            raise TimeoutError(msg)
        time.sleep(0.5)


def _collect(
    stack: EmbeddedStack, arns: list[str], parents: int, dependencies: int, config: ThroughputConfig
) -> dict[str, Any]:
    sfn = stack.client("stepfunctions")
    starts, resumes = [], []
    statuses: Counter[str] = Counter()
    edges = 0
    integration: Counter[str] = Counter()
    transitions = 0
    for arn in arns:
        described = sfn.describe_execution(executionArn=arn)
        statuses[described["status"]] += 1
        events = history.fetch(sfn, arn)
        starts.append(described["startDate"])
        resumed = history.resumed_at(events)
        if resumed is not None:
            resumes.append(resumed)
        transitions += history.transitions(events)
        integration.update(history.integration_calls(events))
        if config.pattern == JOIN:
            edges += dependencies if described["status"] == "SUCCEEDED" else 0
        else:
            edges += sum(1 for event in events if event["type"] == "TaskSucceeded")
    if statuses.get("SUCCEEDED", 0) != parents:
        msg = f"not every parent succeeded: {dict(statuses)}"
        raise RuntimeError(msg)
    span = (max(resumes) - min(starts)).total_seconds()
    return {
        "statuses": dict(statuses),
        "edges_resolved": edges,
        "span_s": round(span, 3),
        "parent_transitions_per_edge": round(transitions / edges, 3),
        "state_machine_calls_per_edge": {
            name: round(count / edges, 4) for name, count in sorted(integration.items())
        },
    }


class _DepthSampler:
    """Samples the process queue's depth (for calibrating SQS at a realistic depth)."""

    def __init__(self, stack: EmbeddedStack, *, interval: float) -> None:
        self._sqs = stack.client("sqs")
        self._url = stack.outputs["ProcessQueueUrl"]
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-depth", daemon=True)
        self.samples: list[float] = []

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
        while not self._stop.wait(self._interval):
            attributes = self._sqs.get_queue_attributes(QueueUrl=self._url, AttributeNames=names)
            values = attributes["Attributes"]
            self.samples.append(float(sum(int(values[name]) for name in names)))
