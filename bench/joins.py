"""Joins at scale: one all-of join over n members, per n, each on a fresh stack.

For each n, one ``wait-for-join`` parent waits on n ``simulate`` payloads that
end at once (so the pipeline itself is timed), given as a manifest in the
payload bucket (``dependencies_url``: the join message carries
``payloads_url``) or inline (``payloads``). Measured per n:

* every AWS call, by operation and by the function that made it (tracker calls
  are attributed to the invocation running when they were made: the local
  stack runs one handler at a time), per member;
* DynamoDB write and read units per member (transactional items at twice
  their units, ``bench/counting.py``), and by partition: the join's own
  partition (join row, chunk rows) and its count shards, the partitions a
  join's members all share, give the per-join ceiling on AWS;
* the most calls any one invocation made, by function (process: bounded by
  the chunk size whatever n is; callback: the invocation that decides the join
  reads the summary, one ``BatchGetItem`` per 100 members);
* wall time, from the parent's start to its stop (this machine's figure; the
  engine bound it is held against is the optional :mod:`bench.timing`'s).

A ``quorum`` join (``JoinScaleConfig.quorum``) decides once k members succeeded;
its members still all run, so its counts are per member too.

:func:`model` extrapolates the counts to ``derived_sizes`` (a straight line
through the two largest measured n, per figure: derived, not measured) and
works out the hot-partition arithmetic.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import resource
import time
from collections import Counter, defaultdict
from typing import TYPE_CHECKING, Any, Protocol

from bench import history
from bench.counting import PLUMBING, TRACKER, instrument, resolve_deferred
from bench.patterns import DATA_PLUMBING
from bench.stack import (
    CHILD,
    JOIN_MACHINE,
    local_stack,
    payload,
    payload_id,
    wait_stopped,
    warm_interpreter,
)
from bench.stats import mean
from dependency_tracker.core.limits import SQS_MAX_BATCH_ENTRIES
from dependency_tracker.core.naming import execution_name
from dependency_tracker.core.settings import ENV_JOIN_CHUNK_SIZE
from dependency_tracker.joins.manifest import manifest_text
from dependency_tracker.joins.row_access import DEFAULT_CONCURRENCY as MEMBERSHIP_PUT_CONCURRENCY
from dependency_tracker.joins.rows import JOIN_COUNT_SHARDS

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from bench.config import JoinScaleConfig
    from bench.counting import Capacity, InvocationRecord


class Profiler(Protocol):
    """A per-thread CPU sampler (``bench.timing.ThreadCpu``): started, then stopped."""

    def start(self) -> None:
        """Begin sampling."""

    def stop(self) -> dict[str, object]:
        """Stop; the CPU breakdown."""


# Per partition and second, on AWS (DynamoDB developer guide: partitions).
PARTITION_WRITE_UNITS_PER_S = 1000
PARTITION_READ_UNITS_PER_S = 3000
# Step Functions standard workflows, StartExecution token bucket per account and
# region in us-east-1, us-west-2 and eu-west-1 (Step Functions quotas, API action
# throttling): 1,300 at once, refilled at 300 a second (800 and 150 elsewhere).
START_EXECUTION_BUCKET = 1300
START_EXECUTION_PER_S = 300
START_EXECUTION_BUCKET_OTHER = 800
START_EXECUTION_PER_S_OTHER = 150
# The registration model on AWS (registration_on_aws): a join this large, these
# JoinMaxConcurrency settings (the template's default first), against this goal.
REGISTRATION_N = 100_000
REGISTRATION_CONCURRENCIES = (2, 10, 20, 50)
REGISTRATION_GOAL_S = 360.0
PROCESS = "process"
SEND_BATCH = "sqs.SendMessageBatch"
GET_OBJECT = "s3.GetObject"
# The tracker's own SQS sends (join_chunk messages) are plain client calls; the
# name keeps them apart from the interpreter's sendMessage (a new client per task).
TRACKER_SEND = "sqs.SendMessage (tracker)"
JOIN_PARTITION = "join#"
JOIN_ROW_LABEL = "join row and chunk rows"


def member_tag(n: int) -> str:
    """Payload id prefix of the members of the join over ``n``."""
    return f"join-n{n}"


@contextlib.contextmanager
def _chunk_size(value: int | None) -> Iterator[None]:
    """``DEPTRACK_JOIN_CHUNK_SIZE`` set to ``value`` (None: as it was) for the block."""
    saved = os.environ.get(ENV_JOIN_CHUNK_SIZE)
    if value is not None:
        os.environ[ENV_JOIN_CHUNK_SIZE] = str(value)
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(ENV_JOIN_CHUNK_SIZE, None)
        else:
            os.environ[ENV_JOIN_CHUNK_SIZE] = saved


def run_size(
    n: int,
    config: JoinScaleConfig,
    token_chars: int,
    *,
    log: Callable[[str], None],
    profiler: Callable[[float], Profiler] | None = None,
) -> dict[str, Any]:
    """One join over ``n`` members on a fresh stack: counts, units, wall time.

    ``profiler`` (``python -m bench.timing`` passes one) adds where the CPU went.
    """
    inline = n in config.inline_sizes
    with _chunk_size(config.chunk_size), local_stack() as stack:
        warm_interpreter(stack)
        tools = instrument(stack, token_chars=token_chars, keep_records=True)
        if stack.app is None:
            msg = "the stack is not running"
            raise RuntimeError(msg)
        chunk_size = stack.app.settings.join_chunk_size
        sfn = stack.client("stepfunctions")
        dynamodb = stack.client("dynamodb")
        documents = [payload(f"{member_tag(n)}-{i:06d}", seconds=None) for i in range(n)]
        body, manifest = _join_input(stack, n, documents, inline=inline, config=config)
        tools.settle()
        tools.calls.drain()
        tools.invocations.drain()
        tools.invocations.drain_records()
        threads = profiler(1.0) if profiler is not None else None
        if threads is not None:
            threads.start()
        cpu_started = _cpu_s()
        # perf_counter: the clock the invocation records' timestamps are read from.
        started = time.perf_counter()
        arn = sfn.start_execution(
            stateMachineArn=stack.outputs["StateMachines"][JOIN_MACHINE],
            name=member_tag(n),
            input=json.dumps(body),
        )["executionArn"]
        described = wait_stopped(sfn, arn, timeout=config.timeout_for(n), every=0.25)
        if described["status"] != "SUCCEEDED":
            msg = f"join n={n} ended {described['status']}: {described.get('error')}"
            raise RuntimeError(msg)
        tools.settle(parent_arn=arn, timeout=config.timeout_for(n))
        window_s = time.perf_counter() - started
        cpu_s = _cpu_s() - cpu_started
        profile = threads.stop() if threads is not None else None
        window = tools.calls.drain()
        invocations = tools.invocations.drain()
        records = tools.invocations.drain_records()
        summary = json.loads(described["output"])["join"]
        _check_counts(n, config.quorum, summary["counts"])
        events = history.fetch(sfn, arn)
        wall_s = (described["stopDate"] - described["startDate"]).total_seconds()
        tracker = window.capacity.get(TRACKER)
        units = _units(tracker, dynamodb, token_chars, n) if tracker is not None else {}
        child = _first_child(stack, sfn)
        runs = runs_per_member(sfn, stack.outputs["StateMachines"][CHILD], documents)
        platform = _platform(stack)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        result = {
            "n": n,
            "members_by": "payloads (inline)" if inline else "payloads_url (manifest)",
            "quorum": config.quorum,
            "chunk_size": chunk_size,
            "chunks": math.ceil(n / chunk_size),
            "wall_s": round(wall_s, 2),
            "window_s": round(window_s, 2),
            # The process's CPU over the window: moto runs under the GIL, so on an idle
            # machine this is close to the wall time; on a busy one it is what was had.
            "cpu_s": round(cpu_s, 2),
            "cpu_per_wall": round(cpu_s / window_s, 3),
            "members_per_s": round(n / wall_s, 3),
            "transitions": history.transitions(events),
            "history_events": len(events),
            "child_transitions_each": child,
            "state_machine_calls": dict(history.integration_calls(events)),
            "sqs_message_bytes": history.sqs_message_sizes(events),
            "calls": _calls(window),
            "call_seconds": _call_seconds(window),
            **({"cpu": profile} if profile is not None else {}),
            "calls_by_function": _by_function(records),
            "lambda": {
                name: {"invocations": stats.invocations, "records": stats.records}
                for name, stats in sorted(invocations.items())
            },
            "per_invocation": _per_invocation(records),
            "registration": registration(records, started, n),
            "manifest_bytes_per_member": round(len(manifest) / n, 1),
            "runs_per_member": runs,
            "platform": platform,
            "units": units,
            "summary_truncated": bool(summary.get("truncated")),
            "peak_rss_mib": round(peak, 1),
            "dead_letters": {key: len(value) for key, value in stack.dead_letters.items()},
            "process_dlq_messages": _queue_depth(stack, "ProcessDlqUrl"),
            "pump_errors": stack.pump_errors,
        }
    result["per_member"] = per_member(result)
    log(_summary_line(result))
    return result


def _join_input(
    stack: Any,
    n: int,
    documents: list[dict[str, Any]],
    *,
    inline: bool,
    config: JoinScaleConfig,
) -> tuple[dict[str, Any], bytes]:
    """The parent's input, and the member list as a manifest (uploaded unless inline)."""
    body: dict[str, Any] = {"timeout_seconds": int(config.timeout_for(n)) + 600}
    if config.quorum is not None:
        body["quorum"] = config.quorum
    manifest = manifest_text(documents).encode("utf-8")
    if inline:
        body["dependencies"] = documents
        return body, manifest
    bucket = str(stack.outputs["PayloadBucketName"])
    key = f"manifests/{member_tag(n)}.jsonl"
    stack.client("s3").put_object(Bucket=bucket, Key=key, Body=manifest)
    body["dependencies_url"] = f"s3://{bucket}/{key}"
    return body, manifest


def _check_counts(n: int, quorum: int | None, counts: dict[str, int]) -> None:
    """All n succeeded (all-of); at least the quorum and no failure (k of n)."""
    if quorum is None:
        held = counts == {"succeeded": n, "failed": 0, "pending": 0}
    else:
        held = counts.get("succeeded", 0) >= quorum and counts.get("failed", 0) == 0
    if not held:
        msg = f"join n={n} (quorum {quorum}): counts {counts}"
        raise RuntimeError(msg)


def _summary_line(result: dict[str, Any]) -> str:
    n, wall_s = result["n"], result["wall_s"]
    registered, runs, platform = (
        result["registration"],
        result["runs_per_member"],
        result["platform"],
    )
    return (
        f"  join n={n}: {wall_s:.1f} s ({n / wall_s:.1f} members/s), "
        f"{result['per_member']['tracker_calls']:.2f} tracker calls and "
        f"{result['per_member']['write_units']:.2f} write units per member, "
        f"at most {result['per_invocation'].get('process', {}).get('max_calls', 0)} calls "
        f"in one process invocation; registered in {registered.get('seconds', 0.0):.1f} s "
        f"({registered.get('process_invocations', 0)} process invocations); members run "
        f"{runs['min']} to {runs['max']} times ({runs['other_executions']} other executions); "
        f"{platform['stopped_by_loop_detection']} records stopped by loop detection "
        f"(platform model {'on' if platform['modelled'] else 'OFF'}); "
        f"peak RSS {result['peak_rss_mib']:.0f} MiB"
    )


def registration(records: list[InvocationRecord], started: float, n: int) -> dict[str, Any]:
    """The join's registration, from its process invocations (the only ones a join run has).

    The first hands the join message from the process queue to the join queue (one
    ``SendMessage``); the next is the join message's there: it reads the member list,
    sends every later chunk's ``join_chunk`` message and registers chunk 0; each later
    one registers one chunk. ``seconds`` runs from the join message's delivery to the
    end of the last chunk's invocation (its chunk recorded). Locally the stack runs one handler
    at a time, so chunks interleave with the members' own update-state and callback
    invocations: the time is the embedded engine's, not AWS's (``registration_on_aws``).
    """
    process = sorted((r for r in records if r.function == PROCESS), key=lambda r: r.started)
    if not process:
        return {}
    delivered = process[0].started
    hand_offs = 0
    if set(process[0].calls) == {"sqs.SendMessage"}:
        hand_offs, process = 1, process[1:]
    if not process:
        return {}
    first, chunks = process[0], process[1:]
    names = sorted({name for record in chunks for name in record.calls})
    seconds = max(record.ended for record in process) - delivered
    return {
        "from_parent_start_s": round(delivered - started, 2),
        "seconds": round(seconds, 2),
        "members_per_s": round(n / seconds, 2) if seconds else None,
        "hand_off_invocations": hand_offs,
        "process_invocations": len(process),
        "fan_out_s": round(first.ended - first.started, 2),
        "fan_out_calls": dict(sorted(first.calls.items())),
        "chunk_invocations": len(chunks),
        "chunk_calls_mean": round(mean([float(r.total) for r in chunks]) or 0.0, 2),
        "chunk_calls_max": max((r.total for r in chunks), default=0),
        "chunk_calls_by_call": {
            name: round(mean([float(r.calls.get(name, 0)) for r in chunks]) or 0.0, 3)
            for name in names
        },
    }


def runs_per_member(sfn: Any, machine_arn: str, documents: list[dict[str, Any]]) -> dict[str, int]:
    """How often each member ran, from the member state machine's own executions.

    An execution is named after its payload and attempt (``execution_name``): each
    member should have exactly one, its attempt 1, and no other execution should exist.
    """
    expected = {execution_name(payload_id(document), 1) for document in documents}
    runs: Counter[str] = Counter()
    others = 0
    for page in sfn.get_paginator("list_executions").paginate(stateMachineArn=machine_arn):
        for execution in page["executions"]:
            if execution["name"] in expected:
                runs[execution["name"]] += 1
            else:
                others += 1
    counts = [runs[name] for name in expected]
    return {
        "min": min(counts, default=0),
        "max": max(counts, default=0),
        "not_once": sum(1 for count in counts if count != 1),
        "other_executions": others,
    }


def _platform(stack: Any) -> dict[str, Any]:
    """Whether Lambda's guards were modelled, what they stopped, the triggers' concurrency."""
    model = stack.platform
    return {
        "modelled": model is not None,
        "stopped_by_loop_detection": len(model.stopped) if model is not None else 0,
        "process_max_concurrency": getattr(stack.pumps["sqs"], "maximum_concurrency", None),
        "join_max_concurrency": getattr(stack.pumps["joins"], "maximum_concurrency", None),
        "join_peak_concurrency": getattr(stack.pumps["joins"], "peak_concurrency", None),
    }


def _queue_depth(stack: Any, output: str) -> int:
    attributes = stack.client("sqs").get_queue_attributes(
        QueueUrl=stack.outputs[output],
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return sum(int(value) for value in attributes.values())


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _first_child(stack: Any, sfn: Any) -> int:
    """Transitions of one member's child execution (every member runs the same one)."""
    machine = stack.outputs["StateMachines"][CHILD]
    executions = sfn.list_executions(stateMachineArn=machine, maxResults=1)["executions"]
    if not executions:
        return 0
    return history.transitions(history.fetch(sfn, executions[0]["executionArn"]))


def _calls(window: Any) -> dict[str, dict[str, int]]:
    """Calls by name: the tracker's, and the pumps' (event-carrying and idle)."""
    grouped: dict[str, Counter[str]] = defaultdict(Counter)
    for (category, service, operation, table), stats in window.calls.items():
        name = f"{service}.{operation}" + (f"@{table}" if table else "")
        if category == TRACKER:
            grouped["tracker"][name] += stats.count
        elif category == PLUMBING:
            data = stats.count - stats.empty if operation in DATA_PLUMBING else 0
            if data:
                grouped["plumbing_data"][name] += data
            if stats.count - data:
                grouped["plumbing_idle"][name] += stats.count - data
    return {
        key: dict(sorted(grouped[key].items()))
        for key in ("tracker", "plumbing_data", "plumbing_idle")
    }


def _call_seconds(window: Any) -> dict[str, dict[str, float]]:
    """Wall time spent in each call, in total (under load: GIL waits included)."""
    out: dict[str, dict[str, float]] = defaultdict(dict)
    for (category, service, operation, table), stats in window.calls.items():
        name = f"{service}.{operation}" + (f"@{table}" if table else "")
        out[category][name] = round(out[category].get(name, 0.0) + stats.seconds, 3)
    return {key: dict(sorted(value.items(), key=lambda kv: -kv[1])) for key, value in out.items()}


def _by_function(records: list[InvocationRecord]) -> dict[str, dict[str, int]]:
    out: dict[str, Counter[str]] = defaultdict(Counter)
    for record in records:
        out[record.function].update(record.calls)
    return {function: dict(sorted(calls.items())) for function, calls in sorted(out.items())}


def _per_invocation(records: list[InvocationRecord]) -> dict[str, Any]:
    """By function: the most calls in one invocation and per record, and the decision."""
    out: dict[str, Any] = {}
    by_function: dict[str, list[InvocationRecord]] = defaultdict(list)
    for record in records:
        by_function[record.function].append(record)
    for function, group in sorted(by_function.items()):
        largest = max(group, key=lambda record: record.total)
        per_record = max(group, key=lambda record: record.total / record.records)
        out[function] = {
            "invocations": len(group),
            "max_calls": largest.total,
            "max_calls_records": largest.records,
            "max_calls_breakdown": dict(sorted(largest.calls.items())),
            "max_calls_per_record": round(per_record.total / per_record.records, 2),
            "mean_calls": round(mean([float(record.total) for record in group]) or 0.0, 2),
        }
    deciding = [r for r in records if r.calls.get("stepfunctions.SendTaskSuccess")]
    if deciding:
        record = deciding[0]
        out["decision"] = {
            "function": record.function,
            "records": record.records,
            "calls": record.total,
            "breakdown": dict(sorted(record.calls.items())),
        }
    return out


def _units(capacity: Capacity, dynamodb: Any, token_chars: int, n: int) -> dict[str, Any]:
    """Write and read units by table, and by the join's partitions (per member too)."""
    rows = resolve_deferred(capacity, dynamodb, token_chars=token_chars)
    reads = defaultdict(float, capacity.read_units)
    mean_row = mean(list(rows.values())) or 0.0
    for table, queries in capacity.deferred_queries.items():
        needed = math.ceil(capacity.query_scanned[table] * mean_row / 4096)
        reads[table] += max(float(queries), float(needed))
    partitions: dict[str, dict[str, float]] = defaultdict(lambda: {"write": 0.0, "read": 0.0})
    members: dict[str, dict[str, float]] = defaultdict(lambda: {"write": 0.0, "read": 0.0})
    by_kind = {"write": capacity.by_partition_write, "read": capacity.by_partition_read}
    for kind, units in by_kind.items():
        for (table, key), value in units.items():
            if table == "dependency" and key.startswith(JOIN_PARTITION):
                partitions[_partition_label(key)][kind] += value
            else:
                members[f"{table}:{key}"][kind] += value
    hottest_member = {
        kind: max((value[kind] for value in members.values()), default=0.0)
        for kind in ("write", "read")
    }
    return {
        "write_units": dict(capacity.write_units),
        "read_units": dict(reads),
        "transactional_items": capacity.transactional_items,
        "join_partitions": {
            label: {
                "write_units": round(value["write"], 2),
                "read_units": round(value["read"], 2),
                "write_units_per_member": round(value["write"] / n, 4),
                "read_units_per_member": round(value["read"] / n, 4),
            }
            for label, value in sorted(partitions.items())
        },
        "hottest_other_partition": hottest_member,
    }


def _partition_label(key: str) -> str:
    """The join's own partition (join row and chunk rows) or ``count shard k``."""
    _, _, rest = key.partition("#counts#")
    return f"count shard {rest}" if rest else JOIN_ROW_LABEL


def per_member(result: dict[str, Any]) -> dict[str, Any]:
    """A run's counts divided by n."""
    n = result["n"]
    tracker = result["calls"]["tracker"]
    units = result["units"]
    plumbing = result["calls"]["plumbing_data"]
    out: dict[str, Any] = {
        "tracker_calls": round(sum(tracker.values()) / n, 4),
        "tracker": {name: round(count / n, 4) for name, count in tracker.items()},
        "by_function": {
            function: round(sum(calls.values()) / n, 4)
            for function, calls in result["calls_by_function"].items()
        },
        "plumbing_data": {name: round(count / n, 4) for name, count in plumbing.items()},
        "state_machine": {
            name: round(count / n, 4) for name, count in result["state_machine_calls"].items()
        },
        "lambda_records": {
            name: round(stats["records"] / n, 4) for name, stats in result["lambda"].items()
        },
        "write_units": round(sum(units.get("write_units", {}).values()) / n, 4),
        "read_units": round(sum(units.get("read_units", {}).values()) / n, 4),
        "write_units_by_table": {
            table: round(value / n, 4) for table, value in units.get("write_units", {}).items()
        },
        "read_units_by_table": {
            table: round(value / n, 4) for table, value in units.get("read_units", {}).items()
        },
    }
    return out


# ------------------------------------------------------------------ model


def _line(points: list[tuple[int, float]]) -> tuple[float, float]:
    """(per member, per join) of a straight line through the two largest n."""
    (n1, y1), (n2, y2) = sorted(points)[-2:]
    slope = (y2 - y1) / (n2 - n1)
    return slope, y1 - slope * n1


def _derive(points: list[tuple[int, float]], sizes: tuple[int, ...]) -> dict[str, float]:
    if len(points) < 2:
        n0, y0 = points[-1]
        return {str(n): round(y0 / n0 * n, 2) for n in sizes}
    slope, fixed = _line(points)
    return {str(n): round(slope * n + fixed, 2) for n in sizes}


def model(
    results: list[dict[str, Any]],
    derived_sizes: tuple[int, ...],
    *,
    map_write_units_per_edge: float | None = None,
) -> dict[str, Any]:
    """Counts extrapolated to ``derived_sizes``, and the hot-partition arithmetic."""
    ordered = sorted(results, key=lambda r: r["n"])
    largest = ordered[-1]
    names = sorted({name for r in ordered for name in r["calls"]["tracker"]})

    def series(value: Callable[[dict[str, Any]], float]) -> list[tuple[int, float]]:
        return [(r["n"], float(value(r))) for r in ordered]

    totals = {
        "tracker_calls": series(lambda r: sum(r["calls"]["tracker"].values())),
        "write_units": series(lambda r: sum(r["units"]["write_units"].values())),
        "read_units": series(lambda r: sum(r["units"]["read_units"].values())),
        **{
            f"invocations {function}": [
                (r["n"], float(r["lambda"].get(function, {}).get("invocations", 0)))
                for r in ordered
            ]
            for function in sorted({f for r in ordered for f in r["lambda"]})
        },
    }
    derived: dict[str, Any] = {
        "method": "straight line through the two largest measured n (per join: calls = a n + b);"
        " derived, not measured",
        "from_n": [r["n"] for r in ordered[-2:]],
        "totals": {key: _derive(points, derived_sizes) for key, points in totals.items()},
        "tracker_calls": {
            name: _derive(
                [(r["n"], float(r["calls"]["tracker"].get(name, 0))) for r in ordered],
                derived_sizes,
            )
            for name in names
        },
        # Bounded by design (a chunk, a status change): the most measured, at any n; but
        # the join message's invocation sends one SendMessageBatch per 10 later chunks.
        "max_calls_per_invocation": {
            function: dict.fromkeys(
                (str(n) for n in derived_sizes),
                max(r["per_invocation"].get(function, {}).get("max_calls", 0) for r in ordered),
            )
            for function in ("process", "update-state")
        },
        "join_message_invocation_calls": _join_message_calls(largest, derived_sizes),
        "decision_invocation_calls": _derive(
            series(lambda r: r["per_invocation"].get("decision", {}).get("calls", 0)),
            derived_sizes,
        ),
    }
    process_max = derived["max_calls_per_invocation"]["process"]
    for n, calls in derived["join_message_invocation_calls"].items():
        process_max[n] = max(process_max[n], calls)
    per_member = {
        key: {n: round(value / int(n), 4) for n, value in by_n.items()}
        for key, by_n in derived["totals"].items()
        if key in ("tracker_calls", "write_units", "read_units")
    }
    derived["per_member"] = per_member
    return {
        "derived": derived,
        "hot_partitions": hot_partitions(largest),
        "map_write_units_per_edge": map_write_units_per_edge,
    }


# ------------------------------------------------------------------ registration on AWS

CASES = ("fast", "slow")


def registration_on_aws(result: dict[str, Any], assumptions: dict[str, Any]) -> dict[str, Any]:
    """A ``REGISTRATION_N``-member join's registration time on AWS, from a run's counted calls.

    A chunk's invocation makes the calls a chunk made in the run (the mean over its
    chunk invocations), each at an assumed latency plus the client's CPU, one after
    the other except the membership puts (``MEMBERSHIP_PUT_CONCURRENCY`` at once):
    ``m`` members a second per invocation. The join message's invocation first
    starts cold, reads and scans the manifest once and sends one ``SendMessageBatch``
    per 10 later chunks. Then, per ``JoinMaxConcurrency`` c and region::

        seconds = max(n / (c m), (n - bucket) / refill) + fan-out

    valid while the starts asked for, c m a second, leave the ``StartExecution``
    bucket something to the end (c m <= refill n / (n - bucket)); past that, starts
    are throttled, and a chunk whose start is still refused after botocore's retries
    comes back only after the join queue's visibility timeout. Two cases: every
    assumption at its fast end, and every one at its slow end.
    """
    registered = result.get("registration") or {}
    per_chunk: dict[str, float] = registered.get("chunk_calls_by_call") or {}
    if not per_chunk:
        return {}
    n, chunk_size = REGISTRATION_N, int(result["chunk_size"])
    chunks = math.ceil(n / chunk_size)
    sends = math.ceil((chunks - 1) / SQS_MAX_BATCH_ENTRIES)
    latency: dict[str, list[float]] = assumptions["latency_ms"]
    cpu: list[float] = assumptions["client_cpu_ms_per_call"]
    regions = {
        "large_regions": (START_EXECUTION_BUCKET, START_EXECUTION_PER_S),
        "other_regions": (START_EXECUTION_BUCKET_OTHER, START_EXECUTION_PER_S_OTHER),
    }
    cases: dict[str, dict[str, Any]] = {}
    rows: list[dict[str, Any]] = []
    for index, case in enumerate(CASES):
        chunk_ms = sum(
            count * (latency[name.split(".")[0]][index] + cpu[index])
            for name, count in per_chunk.items()
        )
        # The membership puts overlap (the CPU does not: one vCPU share, one GIL).
        chunk_ms -= chunk_size * latency["dynamodb"][index] * (1 - 1 / MEMBERSHIP_PUT_CONCURRENCY)
        per_invocation = chunk_size / (chunk_ms / 1000)
        manifest_mb = n * assumptions["manifest_bytes_per_member"][index] / 1e6
        fan_out_s = (
            assumptions["cold_start_s"][index]
            + (latency["s3"][index] + cpu[index]) / 1000
            + manifest_mb / assumptions["manifest_read_mb_per_s"][index]
            + sends * (latency["sqs"][index] + cpu[index]) / 1000
        )
        cases[case] = {
            "chunk_s": round(chunk_ms / 1000, 2),
            "members_per_s_per_invocation": round(per_invocation, 1),
            "manifest_mb": round(manifest_mb, 1),
            "fan_out_s": round(fan_out_s, 2),
        }
        for name, (bucket, refill) in regions.items():
            cases[case][name] = _concurrency_window(
                n, per_invocation=per_invocation, fan_out_s=fan_out_s, bucket=bucket, refill=refill
            )
        for concurrency in REGISTRATION_CONCURRENCIES:
            asked = concurrency * per_invocation
            row: dict[str, Any] = {
                "join_max_concurrency": concurrency,
                "case": case,
                "members_per_s": round(asked, 1),
                "by_invocations_s": round(n / asked, 1),
            }
            for name, (bucket, refill) in regions.items():
                seconds = max(n / asked, (n - bucket) / refill) + fan_out_s
                throttled = asked > refill * n / (n - bucket)
                row[name] = {
                    "by_start_execution_s": round((n - bucket) / refill, 1),
                    "seconds": round(seconds, 1),
                    "throttled": throttled,
                    "meets_goal": seconds <= REGISTRATION_GOAL_S and not throttled,
                }
            rows.append(row)
    return {
        "n": n,
        "chunk_size": chunk_size,
        "chunks": chunks,
        "send_message_batch_calls": sends,
        "counted_at_n": result["n"],
        "chunk_calls": per_chunk,
        "chunk_calls_total": round(sum(per_chunk.values()), 2),
        "fan_out_calls_counted": registered.get("fan_out_calls", {}),
        "membership_put_concurrency": MEMBERSHIP_PUT_CONCURRENCY,
        "assumptions": assumptions,
        "start_execution": {
            name: {"bucket": bucket, "refill_per_s": refill}
            for name, (bucket, refill) in regions.items()
        },
        "goal_s": REGISTRATION_GOAL_S,
        "cases": cases,
        "rows": rows,
    }


def _concurrency_window(
    n: int,
    *,
    per_invocation: float,
    fan_out_s: float,
    bucket: int,
    refill: int,
    goal_s: float = REGISTRATION_GOAL_S,
) -> dict[str, Any]:
    """The ``JoinMaxConcurrency`` settings that meet the goal unthrottled (None: none does)."""
    unthrottled = math.floor(refill * n / (n - bucket) / per_invocation)
    needed = math.ceil(n / (per_invocation * (goal_s - fan_out_s))) if goal_s > fan_out_s else None
    floor_s = (n - bucket) / refill + fan_out_s
    meets = needed is not None and needed <= unthrottled and floor_s <= goal_s
    return {
        "least_meeting_goal": max(needed, 2) if meets and needed is not None else None,
        "most_unthrottled": unthrottled,
        "fastest_s": round(floor_s, 1),
    }


def _join_message_calls(result: dict[str, Any], sizes: tuple[int, ...]) -> dict[str, int]:
    """The join message's invocation at ``sizes``: as measured, with a send per 10 chunks."""
    fan_out: dict[str, int] = (result.get("registration") or {}).get("fan_out_calls") or {}
    if not fan_out:
        return {}
    base = sum(fan_out.values()) - fan_out.get(SEND_BATCH, 0)
    chunk_size = int(result["chunk_size"])
    return {
        str(n): base + math.ceil((math.ceil(n / chunk_size) - 1) / SQS_MAX_BATCH_ENTRIES)
        for n in sizes
    }


SHARD_MEAN = "count shard, even share"


def hot_partitions(result: dict[str, Any]) -> dict[str, Any]:
    """The join's partitions' units per member, and the member rate each sustains on AWS.

    Per join, the ceiling is the lowest of the join's own partition and a count
    shard taking its even share of the members (the shards' mean); the hottest
    shard of the run itself is reported beside it (hashing n ids over 4 shards
    is uneven at small n).
    """
    partitions = dict(result["units"].get("join_partitions", {}))
    shards = [units for label, units in partitions.items() if label.startswith("count shard")]
    if shards:
        partitions[SHARD_MEAN] = {
            key: mean([float(shard[key]) for shard in shards]) or 0.0
            for key in ("write_units_per_member", "read_units_per_member")
        }
    rows = [_partition_row(label, units) for label, units in sorted(partitions.items())]
    rated = [row for row in rows if row["members_per_s"]]
    per_join = [row for row in rated if row["partition"] in (SHARD_MEAN, JOIN_ROW_LABEL)]
    binding = min(per_join, key=lambda row: row["members_per_s"]) if per_join else None
    hottest = min(rated, key=lambda row: row["members_per_s"]) if rated else None
    ceiling = binding["members_per_s"] if binding else None
    return {
        "n": result["n"],
        "shards": JOIN_COUNT_SHARDS,
        "partition_write_units_per_s": PARTITION_WRITE_UNITS_PER_S,
        "partition_read_units_per_s": PARTITION_READ_UNITS_PER_S,
        "partitions": rows,
        "hottest": binding["partition"] if binding else None,
        "members_per_s_per_join": ceiling,
        "hottest_in_run": hottest["partition"] if hottest else None,
        "members_per_s_hottest_in_run": hottest["members_per_s"] if hottest else None,
        "start_execution_per_s": START_EXECUTION_PER_S,
        "start_execution_bucket": START_EXECUTION_BUCKET,
        "headroom_over_start_execution": (
            round(ceiling / START_EXECUTION_PER_S, 1) if ceiling else None
        ),
    }


def _partition_row(label: str, units: dict[str, Any]) -> dict[str, Any]:
    writes = float(units["write_units_per_member"])
    reads = float(units["read_units_per_member"])
    by_writes = PARTITION_WRITE_UNITS_PER_S / writes if writes else None
    by_reads = PARTITION_READ_UNITS_PER_S / reads if reads else None
    limits = [x for x in (by_writes, by_reads) if x is not None]
    return {
        "partition": label,
        "write_units_per_member": round(writes, 4),
        "read_units_per_member": round(reads, 4),
        "members_per_s_by_writes": round(by_writes) if by_writes else None,
        "members_per_s_by_reads": round(by_reads) if by_reads else None,
        "members_per_s": round(min(limits)) if limits else None,
    }


def cost_row(result: dict[str, Any]) -> dict[str, Any]:
    """A run as a ``patterns`` summary row, for :func:`bench.costs.edge_costs`."""
    n = result["n"]
    sizes = result["sqs_message_bytes"]
    per = result["per_member"]
    units = result["units"]
    # The parent's message and one join_chunk message per later chunk (well under 64 KB;
    # the join message's invocation sends them ten to a SendMessageBatch).
    messages = len(sizes) + max(int(result["chunks"]) - 1, 0)
    return {
        "pattern": "join",
        "n": n,
        "transitions": result["transitions"],
        "child_transitions_each": result["child_transitions_each"],
        "lambda_per_edge": {
            name: {"records": stats["records"] / n} for name, stats in result["lambda"].items()
        },
        "calls_per_edge": {"tracker": per["tracker"]},
        "capacity_per_edge": {
            **{f"write_units_{t}": v / n for t, v in units["write_units"].items()},
            **{f"read_units_{t}": v / n for t, v in units["read_units"].items()},
            "state_machine_read_units": 0.0,
        },
        "sqs_messages_per_edge": messages / n,
        "sqs_message_bytes_mean": mean([float(size) for size in sizes]) or 0.0,
    }


def derived_cost_rows(
    results: list[dict[str, Any]], sizes: tuple[int, ...]
) -> list[dict[str, Any]]:
    """Cost rows at ``sizes``: the largest run's counts per member, its fixed costs per join.

    Per member everything is as measured at the largest n (an upper bound: it
    still carries that run's per-join share); the parent's transitions and its
    message are per join, the tracker's ``join_chunk`` messages one per chunk.
    """
    largest = max(results, key=lambda result: result["n"])
    base = cost_row(largest)
    rows = []
    for n in sizes:
        chunks = math.ceil(n / largest["chunk_size"])
        row = {**base, "n": n, "derived": True}
        row["sqs_messages_per_edge"] = (len(largest["sqs_message_bytes"]) + chunks - 1) / n
        rows.append(row)
    return rows
