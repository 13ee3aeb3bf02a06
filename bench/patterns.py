"""Three ways for a parent to wait on n dependencies, measured side by side.

* ``map``: ``wait-for-dependencies`` (one task token per dependency);
* ``join``: ``wait-for-join`` (one task token for all);
* ``poll``: ``bench/stepfunctions/poll-for-dependencies`` (no token: publish the
  dependencies bare, then loop ``Wait`` + ``dynamodb:getItem`` on the state table).

Same dependencies (same count, same ``simulate`` child and duration, fresh
payload ids per parent so every child really runs), same stack, one parent at a
time, the pattern order rotated every repetition. For each parent: history
events, state transitions, poll rounds, resume latency, and every AWS call per
dependency edge.
"""

from __future__ import annotations

import json
import math
import time
from collections import Counter, defaultdict
from typing import TYPE_CHECKING, Any

from bench import history
from bench.capacity import read_units
from bench.config import JOIN, MAP, PATTERNS, POLL, PatternConfig
from bench.counting import (
    PLUMBING,
    TRACKER,
    CallWindow,
    InvocationStats,
    instrument,
    resolve_deferred,
)
from bench.stack import (
    JOIN_MACHINE,
    MAP_MACHINE,
    local_stack,
    payload,
    payload_id,
    register_baseline,
    wait_stopped,
    warm_interpreter,
)
from bench.stats import mean, median, percentile, rounded
from dependency_tracker.payloads.state_table import StateTable

if TYPE_CHECKING:
    from collections.abc import Callable
    from datetime import datetime

    from bench.counting import Instruments
    from dependency_tracker_local import EmbeddedStack

# Plumbing calls that carry events; the others (listing, empty polls) are idle polling.
DATA_PLUMBING = frozenset(
    {"ReceiveMessage", "DeleteMessageBatch", "DescribeExecution", "GetRecords"}
)
# Transitions of one poll round of the baseline: PollWait, ReadState, IsTerminal.
POLL_ROUND_STATES = ("PollWait", "ReadState", "IsTerminal")


def schedule(config: PatternConfig) -> list[tuple[int, int, str]]:
    """(n, repetition, pattern) in run order: patterns rotated each repetition."""
    plan: list[tuple[int, int, str]] = []
    for n in config.sizes:
        for rep in range(config.reps_for(n)):
            designs = config.patterns
            order = designs[rep % len(designs) :] + designs[: rep % len(designs)]
            plan.extend((n, rep, pattern) for pattern in order)
    for n in config.join_only_sizes:
        plan.extend((n, rep, JOIN) for rep in range(config.reps_for(n)))
    return plan


def run(config: PatternConfig, token_chars: int, *, log: Callable[[str], None]) -> dict[str, Any]:
    """Every planned parent, then the per-(pattern, n) summary."""
    runs: list[dict[str, Any]] = []
    with local_stack() as stack:
        machines = {
            MAP: str(stack.outputs["StateMachines"][MAP_MACHINE]),
            JOIN: str(stack.outputs["StateMachines"][JOIN_MACHINE]),
            POLL: register_baseline(stack),
        }
        warm_interpreter(stack)
        tools = instrument(stack, token_chars=token_chars)
        runner = _Runner(stack, tools, machines, config, token_chars)
        for n, rep, pattern in schedule(config):
            record = runner.run_one(pattern, n, rep)
            log(
                f"  {pattern:4s} n={n:<5d} rep={rep}: {record['transitions']} transitions, "
                f"resumed {record['resume_latency_s']['from_child_stop']:.3f} s after "
                f"the last child stopped ({record['parent_wall_s']:.1f} s)"
            )
            runs.append(record)
    return {
        "scale": {
            "factor": config.scale,
            "poll_seconds_local": config.poll_seconds,
            "poll_seconds_reference": config.reference_poll_seconds,
            "child_seconds_local": config.child_seconds,
            "child_seconds_reference": config.child_seconds * config.scale,
        },
        "transitions_per_poll_round": len(POLL_ROUND_STATES),
        "runs": runs,
        "summary": summarize(runs),
    }


class _Runner:
    def __init__(
        self,
        stack: EmbeddedStack,
        tools: Instruments,
        machines: dict[str, str],
        config: PatternConfig,
        token_chars: int,
    ) -> None:
        self.stack = stack
        self.tools = tools
        self.machines = machines
        self.config = config
        self.token_chars = token_chars
        # The benchmark's own calls go through clients nobody counts.
        self.sfn = stack.client("stepfunctions")
        self.dynamodb = stack.client("dynamodb")
        self.states = StateTable(self.dynamodb, stack.outputs["StateTableName"])

    def run_one(self, pattern: str, n: int, rep: int) -> dict[str, Any]:
        config = self.config
        dependencies = [
            payload(f"{pattern}-n{n}-r{rep}-{i:04d}", seconds=config.child_seconds)
            for i in range(n)
        ]
        ids = [payload_id(document) for document in dependencies]
        body: dict[str, Any] = {"dependencies": dependencies}
        if pattern == POLL:
            body.update(payload_ids=ids, poll_seconds=config.poll_seconds)
        else:
            body["timeout_seconds"] = config.callback_timeout_seconds
        self.tools.settle()
        self.tools.calls.drain()
        self.tools.invocations.drain()
        started = time.monotonic()
        arn = self.sfn.start_execution(
            stateMachineArn=self.machines[pattern],
            name=f"{pattern}-n{n}-r{rep}",
            input=json.dumps(body),
        )["executionArn"]
        described = wait_stopped(self.sfn, arn, timeout=config.run_timeout)
        if described["status"] != "SUCCEEDED":
            msg = f"{pattern} parent n={n} ended {described['status']}: {described.get('error')}"
            raise RuntimeError(msg)
        self.tools.settle(parent_arn=arn, timeout=config.run_timeout)
        window = self.tools.calls.drain()
        invocations = self.tools.invocations.drain()
        window_s = time.monotonic() - started
        events = history.fetch(self.sfn, arn)
        children = self._children(ids)
        resumed = history.resumed_at(events)
        if resumed is None:
            msg = f"{pattern} parent n={n} never entered {history.RESUME_STATE}"
            raise RuntimeError(msg)
        return {
            "pattern": pattern,
            "n": n,
            "rep": rep,
            "parent_wall_s": (described["stopDate"] - described["startDate"]).total_seconds(),
            "window_s": window_s,
            "history_events": len(events),
            "transitions": history.transitions(events),
            "poll_rounds": len(history.entered(events, POLL_ROUND_STATES[0])),
            "child_transitions_each": children["transitions_each"],
            "resume_latency_s": {
                "from_child_stop": _seconds(resumed, children["last_stop"]),
                "from_state_recorded": _seconds(resumed, children["last_recorded"]),
            },
            "calls": _calls(window, events),
            "lambda": {name: _invocation(stats) for name, stats in sorted(invocations.items())},
            "capacity": self._capacity(window, pattern, len(history.entered(events, "ReadState"))),
            "sqs_messages": _messages(history.sqs_message_sizes(events)),
        }

    def _children(self, ids: list[str]) -> dict[str, Any]:
        items = self.states.batch_get(ids)
        if len(items) != len(ids):
            msg = f"{len(ids) - len(items)} dependencies have no state item"
            raise RuntimeError(msg)
        stops: list[datetime] = []
        recorded: list[datetime] = []
        for item in items.values():
            if item.finished_at is None or item.execution_arn is None:
                msg = f"{item.payload_id} is {item.state}, not finished"
                raise RuntimeError(msg)
            recorded.append(item.finished_at)
            stops.append(self.sfn.describe_execution(executionArn=item.execution_arn)["stopDate"])
        first = items[ids[0]].execution_arn
        each = history.transitions(history.fetch(self.sfn, str(first)))
        return {"last_stop": max(stops), "last_recorded": max(recorded), "transitions_each": each}

    def _capacity(self, window: CallWindow, pattern: str, reads: int) -> dict[str, Any]:
        """Request units of the tracker's calls (and of the baseline's own reads)."""
        tracker = window.capacity.get(TRACKER)
        units: dict[str, Any] = {"write_units": {}, "read_units": {}}
        if tracker is not None:
            rows = resolve_deferred(tracker, self.dynamodb, token_chars=self.token_chars)
            reads_by_table = defaultdict(float, tracker.read_units)
            mean_row = mean(list(rows.values())) or 0.0
            queries = sum(tracker.deferred_queries.values())
            scanned = sum(tracker.query_scanned.values())
            if queries:
                units_needed = math.ceil(scanned * mean_row / 4096)
                reads_by_table["dependency"] += max(float(queries), float(units_needed))
            units = {"write_units": dict(tracker.write_units), "read_units": dict(reads_by_table)}
        # The baseline's getItem (not consistent) of a small state item: half a unit each.
        poll_reads = reads * read_units(0, consistent=False) if pattern == POLL else 0.0
        units["state_machine_read_units"] = poll_reads
        return units


def _seconds(later: datetime, earlier: datetime) -> float:
    return (later - earlier).total_seconds()


def _calls(window: CallWindow, events: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Calls by ``service.Operation``: tracker, state machine, plumbing (data and idle)."""
    grouped: dict[str, Counter[str]] = defaultdict(Counter)
    for (category, service, operation, _), stats in window.calls.items():
        name = f"{service}.{operation}"
        if category == TRACKER:
            grouped["tracker"][name] += stats.count
        elif category == PLUMBING:
            data = stats.count - stats.empty if operation in DATA_PLUMBING else 0
            if data:
                grouped["plumbing_data"][name] += data
            if stats.count - data:
                grouped["plumbing_idle"][name] += stats.count - data
    grouped["state_machine"] = history.integration_calls(events)
    keys = ("tracker", "state_machine", "plumbing_data", "plumbing_idle")
    return {key: dict(sorted(grouped[key].items())) for key in keys}


def _invocation(stats: InvocationStats) -> dict[str, Any]:
    return {
        "invocations": stats.invocations,
        "records": stats.records,
        "wall_s": round(stats.seconds, 4),
    }


def _messages(sizes: list[int]) -> dict[str, Any]:
    return {"count": len(sizes), "bytes_total": sum(sizes), "bytes_max": max(sizes, default=0)}


# ---------------------------------------------------------------------- summary


def summarize(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (pattern, n): medians of counts, p50/p95 of latencies, per-edge calls."""
    groups: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for record in runs:
        groups[(record["pattern"], record["n"])].append(record)
    rows = []
    for (pattern, n), records in sorted(
        groups.items(), key=lambda kv: (kv[0][1], PATTERNS.index(kv[0][0]))
    ):
        rows.append(_summary_row(pattern, n, records))
    return rows


def _summary_row(pattern: str, n: int, records: list[dict[str, Any]]) -> dict[str, Any]:
    def med(key: str) -> float:
        return median([float(r[key]) for r in records]) or 0.0

    latency: dict[str, dict[str, float | None]] = {}
    for measure in ("from_child_stop", "from_state_recorded"):
        values = [float(r["resume_latency_s"][measure]) for r in records]
        latency[measure] = {
            "p50": rounded(percentile(values, 50)),
            "p95": rounded(percentile(values, 95)),
            "max": rounded(max(values)),
        }
    transitions = med("transitions")
    rounds = med("poll_rounds")
    return {
        "pattern": pattern,
        "n": n,
        "samples": len(records),
        "history_events": med("history_events"),
        "transitions": transitions,
        "transitions_per_edge": rounded(transitions / n),
        "poll_rounds": rounds,
        "transitions_without_polling": transitions - len(POLL_ROUND_STATES) * rounds,
        "child_transitions_each": med("child_transitions_each"),
        "resume_latency_s": latency,
        "parent_wall_s": rounded(med("parent_wall_s")),
        "calls_per_edge": _per_edge_calls(records, n),
        "lambda_per_edge": _per_edge_lambda(records, n),
        "capacity_per_edge": _per_edge_capacity(records, n),
        "sqs_messages_per_edge": rounded(
            (mean([float(r["sqs_messages"]["count"]) for r in records]) or 0.0) / n
        ),
        "sqs_message_bytes_mean": rounded(
            mean(
                [
                    r["sqs_messages"]["bytes_total"] / r["sqs_messages"]["count"]
                    for r in records
                    if r["sqs_messages"]["count"]
                ]
            ),
            1,
        ),
        "sqs_message_bytes_max": max(r["sqs_messages"]["bytes_max"] for r in records),
        "idle_plumbing_calls_per_s": rounded(
            mean([sum(r["calls"]["plumbing_idle"].values()) / r["window_s"] for r in records]),
            1,
        ),
    }


def _per_edge_calls(records: list[dict[str, Any]], n: int) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for group in ("tracker", "state_machine", "plumbing_data"):
        totals: Counter[str] = Counter()
        for record in records:
            totals.update(record["calls"][group])
        out[group] = {
            name: round(count / len(records) / n, 4) for name, count in sorted(totals.items())
        }
    return out


def _per_edge_lambda(records: list[dict[str, Any]], n: int) -> dict[str, dict[str, float]]:
    totals: dict[str, Counter[str]] = defaultdict(Counter)
    for record in records:
        for function, stats in record["lambda"].items():
            totals[function]["invocations"] += stats["invocations"]
            totals[function]["records"] += stats["records"]
    return {
        function: {key: round(value / len(records) / n, 4) for key, value in counts.items()}
        for function, counts in sorted(totals.items())
    }


def _per_edge_capacity(records: list[dict[str, Any]], n: int) -> dict[str, float]:
    totals: Counter[str] = Counter()
    for record in records:
        capacity = record["capacity"]
        for table, value in capacity["write_units"].items():
            totals[f"write_units_{table}"] += value
        for table, value in capacity["read_units"].items():
            totals[f"read_units_{table}"] += value
        totals["state_machine_read_units"] += capacity["state_machine_read_units"]
    return {key: round(value / len(records) / n, 4) for key, value in sorted(totals.items())}
