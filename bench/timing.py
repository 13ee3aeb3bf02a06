"""``python -m bench.timing``: this machine's wall-clock figures (optional).

Not run by ``make test`` or ``make bench``: what carries over to AWS is the
counts (``python -m bench``, ``bench/budgets.json``); these figures are the
embedded engine's on this machine. One run:

* **throughput**: many parents on overlapping dependencies (``bench/throughput.py``),
  edges per second, with where the CPU went (per-thread sampling, :class:`ThreadCpu`);
* **calibration**: each moto operation an edge needs, timed in isolation on a
  stack whose pumps are parked, with tables, queue and executions filled to the
  size the largest throughput scale reached. Every DynamoDB call is made by the
  tracker's own store method (``StateTable``, ``DependencyTable``, ``JoinStore``),
  so the expressions timed are the ones the tracker sends. Weighted by how often
  one edge needed each, the sum is the engine's cost of an edge; its inverse the
  most edges per second the engine could resolve doing nothing else (one core:
  moto is pure Python under the GIL). Two bounds:

  * ``calls``: the moto *calls* an edge needs (tracker calls, the pumps' data
    calls, the parent's ``sqs:sendMessage`` the way moto's interpreter makes it,
    starting the parents);
  * ``engine``: the same with the interpreter's own work added (a Map iteration
    publishing, a child execution running to its end, a parent iteration
    resuming after ``SendTaskSuccess``), measured as composites;

* **joins**: one all-of join per size (``bench/joins.py``, profiled), the join's
  own operations calibrated at the size nearest ``calibrate_at``, and each
  join's wall time against its bound.

Results go to ``build/bench/timing.json`` (git-ignored); the tables to stdout.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import os
import platform
import re
import sys
import threading
import time
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from moto.stepfunctions.parser.asl.utils.boto_client import boto_client_for

from bench import costs, joins, report, throughput
from bench.config import FULL_TIMING, SMOKE_TIMING, TimingConfig
from bench.run import emit, section, sizes
from bench.stack import (
    CHILD,
    MAP_MACHINE,
    attempt_one_item,
    local_stack,
    payload,
    wait_stopped,
    warm_interpreter,
)
from dependency_tracker.core.enums import PayloadState
from dependency_tracker.joins.store import JoinStore
from dependency_tracker.payloads.model import ProcessPayload
from dependency_tracker.payloads.state_table import StateTable
from dependency_tracker.table.dependency_table import DependencyTable
from dependency_tracker.table.items import (
    MembershipItem,
    Resolution,
    WaiterItem,
    membership_id_for,
    waiter_id_for,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from bench.config import CalibrationConfig
    from dependency_tracker_local import EmbeddedStack

DEFAULT_OUTPUT = Path(__file__).resolve().parent.parent / "build" / "bench" / "timing.json"
BATCH_WRITE = 25
CAL_JOIN = "cal"
RETENTION_DAYS = 7
# The targets: the local pipeline, and each join, reach half the engine bound.
BOUND_RATIO = 0.5


# ------------------------------------------------------------------ where the CPU goes
# Every thread of the process is sampled from ``/proc/self/task/<tid>/stat`` (user +
# system time) every ``interval`` seconds and mapped to its Python thread name. In
# local mode each pump thread also runs its handler (the pumps call handlers
# in-line), moto runs every execution in its own threads, and the driver's own
# polling runs in the main thread. CPU of threads that ended between two samples is
# partly lost: it shows as ``unattributed``. Linux only; elsewhere the breakdown is empty.

_TASKS = Path("/proc/self/task")
_TARGET = re.compile(r"\((?P<target>[^)]*)\)$")
GROUPS = {
    "pump-sqs": "process: SQS pump + process handler",
    "pump-reports": "status reports: SQS pump + update-state handler",
    "pump-executions": "update-state: execution pump + update-state handler",
    "pump-stream": "callback: stream pump + callback handler",
    "MainThread": "benchmark driver (starts parents, waits)",
}


def group_of(name: str) -> str:
    """A readable group for a thread name."""
    if name in GROUPS:
        return GROUPS[name]
    if name.startswith("ThreadPoolExecutor"):
        return "update-state: resolve_all thread pool"
    if name.startswith("bench-"):
        return "benchmark samplers"
    if name.startswith("native-"):
        return "moto interpreter: threads that ended before they were named"
    match = _TARGET.search(name)
    if match:
        return f"moto interpreter: {match.group('target')}"
    return f"moto interpreter: {name.split('_', 1)[0]}"


class ThreadCpu:
    """Samples per-thread CPU time in the background."""

    def __init__(self, interval: float = 0.25) -> None:
        self.interval = interval
        self._ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self._seen: dict[int, tuple[str, float]] = {}
        self._ended: list[tuple[str, float]] = []  # threads whose id was reused
        self._baseline: dict[int, tuple[str, float]] = {}  # CPU before start()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._cpu_start = 0.0
        self._wall_start = 0.0

    def start(self) -> None:
        """Begin sampling."""
        self._sample()
        self._baseline = dict(self._seen)
        self._cpu_start = time.process_time()
        self._wall_start = time.perf_counter()
        self._thread = threading.Thread(target=self._run, name="bench-cpu", daemon=True)
        self._thread.start()

    def stop(self) -> dict[str, object]:
        """Stop; CPU seconds by group, process CPU, wall time and utilization."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample()
        cpu = time.process_time() - self._cpu_start
        wall = time.perf_counter() - self._wall_start
        groups: dict[str, float] = defaultdict(float)
        for name, seconds in self._ended:
            groups[group_of(name)] += seconds
        for tid, (name, seconds) in self._seen.items():
            before = self._baseline.get(tid)
            spent = seconds - before[1] if before is not None and before[0] == name else seconds
            groups[group_of(name)] += spent
        attributed = sum(groups.values())
        ordered = dict(sorted(groups.items(), key=lambda kv: -kv[1]))
        return {
            "wall_s": round(wall, 3),
            "process_cpu_s": round(cpu, 3),
            "cpu_per_wall": round(cpu / wall, 3) if wall else None,
            "by_thread_group_s": {key: round(value, 3) for key, value in ordered.items()},
            "unattributed_s": round(max(0.0, cpu - attributed), 3),
        }

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def _sample(self) -> None:
        if not _TASKS.is_dir():
            return
        names = {thread.native_id: thread.name for thread in threading.enumerate()}
        for entry in _TASKS.iterdir():
            tid = int(entry.name)
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue  # the thread ended meanwhile
            seconds = (int(fields[11]) + int(fields[12])) / self._ticks
            previous = self._seen.get(tid)
            name = names.get(tid) or (previous[0] if previous else f"native-{tid}")
            if previous is not None and (previous[0] != name or previous[1] > seconds):
                self._ended.append(previous)  # the kernel reused the id of an ended thread
            self._seen[tid] = (name, seconds)


# ------------------------------------------------------------------ the engine bound

# Calls whose cost the engine bound replaces by an interpreter composite.
COMPOSITES = {
    "sqs.SendMessage": "engine.MapIterationPublish",
    "stepfunctions.StartExecution": "engine.ChildExecution",
    "stepfunctions.SendTaskSuccess": "engine.ParentIterationResume",
}


def _now() -> datetime:
    return datetime.now(UTC)


def calibrate(
    config: CalibrationConfig,
    sizes: dict[str, int],
    *,
    log: Callable[[str], None],
    joins: bool = True,
) -> dict[str, Any]:
    """Per-call cost (ms) of every operation, on tables/queue/executions of ``sizes``.

    ``joins`` (the default) adds the operations only a join needs (its two-item counting
    transaction, its five-key read of the join row and shards, a manifest
    slice, the summary object, the tracker's own ``join_chunk`` send).
    """
    with local_stack(idle_pumps=True) as stack:
        warm_interpreter(stack)
        bench = _Calibration(stack, config, sizes, log)
        bench.fill()
        per_call = bench.measure(joins=joins)
    return {
        "sizes": sizes,
        "calls_per_operation": config.calls,
        "per_call_ms": per_call,
        "stalled_executions": len(bench.stalled),
    }


def engine_bound(mix: dict[str, float], per_call_ms: dict[str, float]) -> dict[str, Any]:
    """Engine bounds (edges/s) from a per-edge call mix and per-call costs."""
    calls_ms = 0.0
    engine_ms = 0.0
    terms: dict[str, float] = {}
    missing = []
    for name, per_edge in sorted(mix.items()):
        cost = per_call_ms.get(name)
        if cost is None:
            missing.append(name)
            continue
        terms[name] = round(per_edge * cost, 3)
        calls_ms += per_edge * cost
        composite = per_call_ms.get(COMPOSITES.get(_base(name), ""))
        engine_ms += per_edge * (composite if composite is not None else cost)
    return {
        "ms_per_edge": {"calls": round(calls_ms, 3), "engine": round(engine_ms, 3)},
        "edges_per_s": {
            "calls": round(1000 / calls_ms, 3) if calls_ms else None,
            "engine": round(1000 / engine_ms, 3) if engine_ms else None,
        },
        "ms_per_edge_by_call": dict(sorted(terms.items(), key=lambda kv: -kv[1])),
        "not_calibrated": missing,
    }


def _base(name: str) -> str:
    return name.split("@", 1)[0]


def mix_of(scale: dict[str, Any]) -> dict[str, float]:
    """Calls one edge needed in a throughput run: tracker, pumps' data calls, interpreter."""
    mix: dict[str, float] = {}
    for group in ("tracker", "plumbing_data"):
        for name, stats in scale["calls"].get(group, {}).items():
            mix[name] = mix.get(name, 0.0) + float(stats["per_edge"])
    for name, per_edge in scale["state_machine_calls_per_edge"].items():
        mix[name] = mix.get(name, 0.0) + float(per_edge)
    mix["stepfunctions.StartExecution (parent)"] = 1 / scale["dependencies_per_parent"]
    return mix


def sizes_of(scale: dict[str, Any]) -> dict[str, int]:
    """How large the throughput run left tables, queue and executions."""
    reads = scale["calls"].get("plumbing_data", {}).get("dynamodbstreams.GetRecords", {})
    return {
        "state_items": int(scale["distinct_payloads"]),
        "waiter_rows": int(scale["edges"]),
        "queue_depth": round(scale["queue_depth_mean"] or 0),
        "executions": int(scale["distinct_payloads"] + scale["parents"]),
        "records_per_read": round(reads.get("items_per_call", 10)),
    }


class _Calibration:
    def __init__(
        self,
        stack: EmbeddedStack,
        config: CalibrationConfig,
        sizes: dict[str, int],
        log: Callable[[str], None],
    ) -> None:
        self.stack = stack
        self.k = config.calls
        self.waiters = config.waiters_per_payload
        self.sizes = sizes
        self.log = log
        outputs = stack.outputs
        self.state_table = str(outputs["StateTableName"])
        self.dependency_table = str(outputs["DependencyTableName"])
        self.queue = str(outputs["ProcessQueueUrl"])
        self.child = str(outputs["StateMachines"][CHILD])
        self.parent = str(outputs["StateMachines"][MAP_MACHINE])
        self.ddb = stack.client("dynamodb")
        self.sqs = stack.client("sqs")
        self.sfn = stack.client("stepfunctions")
        self.streams = stack.client("dynamodbstreams")
        # The tracker's own stores, on uncounted clients: the rules are theirs, spelled once.
        self.states = StateTable(self.ddb, self.state_table)
        self.dependencies = DependencyTable(self.ddb, self.dependency_table)
        self.joins = JoinStore(self.ddb, self.dependency_table)
        self.results: dict[str, float] = {}
        self.filled_ids: list[str] = []
        self.stalled: set[str] = set()
        self._serial = 0

    # ------------------------------------------------------------------ setup

    def _id(self, tag: str) -> str:
        self._serial += 1
        return f"cal/workflow-{CHILD}/{tag}-{self._serial:06d}"

    def _execution_arn(self, payload_id: str) -> str:
        return f"{self.child.replace(':stateMachine:', ':execution:')}:{payload_id[-40:]}-1"

    def _state_item(self, payload_id: str, state: PayloadState) -> dict[str, Any]:
        return attempt_one_item(payload_id, state, self._execution_arn(payload_id))

    def _waiter(self, payload_id: str, token: str, *, notified: bool) -> WaiterItem:
        now = _now()
        return WaiterItem(
            payload_id=payload_id,
            waiter_id=waiter_id_for(token),
            task_token=token,
            created_at=now,
            updated_at=now,
            workflow_state=PayloadState.SUCCEEDED if notified else PayloadState.PROCESSING,
            notified_at=now if notified else None,
            parent_execution="arn:aws:states:us-east-1:123456789012:execution:deptrack-x:p",
        )

    def _batch_write(self, table: str, items: list[dict[str, Any]]) -> None:
        for start in range(0, len(items), BATCH_WRITE):
            chunk = items[start : start + BATCH_WRITE]
            request = {table: [{"PutRequest": {"Item": item}} for item in chunk]}
            while request:
                request = self.ddb.batch_write_item(RequestItems=request).get(
                    "UnprocessedItems", {}
                )

    def fill(self) -> None:
        """Tables, queue and executions as large as the throughput run left them."""
        started = time.perf_counter()
        payloads = max(1, self.sizes.get("state_items", 0))
        self.filled_ids = [self._id("fill") for _ in range(payloads)]
        self._batch_write(
            self.state_table,
            [self._state_item(pid, PayloadState.SUCCEEDED) for pid in self.filled_ids],
        )
        rows = [
            self._waiter(pid, f"token-{pid}-{w}", notified=True).to_item()
            for pid in self.filled_ids
            for w in range(self.waiters)
        ]
        self._batch_write(self.dependency_table, rows[: max(1, self.sizes.get("waiter_rows", 0))])
        executions = int(self.sizes.get("executions", 0))
        for i in range(executions):
            self.sfn.start_execution(
                stateMachineArn=self.child,
                name=f"fill-{i:06d}",
                input=json.dumps(payload(f"fill-{i}", seconds=None)),
            )
        self._drain_executions()
        self.log(
            f"  calibration stack filled in {time.perf_counter() - started:.1f} s: {self.sizes}"
        )

    def _drain_executions(self, timeout: float = 300.0, stall: float = 30.0) -> None:
        """Wait until no child or parent runs, but for the ones that stopped progressing.

        moto's interpreter parses each execution's definition in the execution's
        own thread, and the parser is not thread-safe: when hundreds start at
        once, one now and then dies with an ``IndexError`` in its thread and
        stays RUNNING for ever (moto cannot stop it either). After ``stall``
        seconds with no execution ending, the ones left are no longer waited
        for (counted in ``stalled_executions``).
        """
        deadline = time.monotonic() + timeout
        for machine in (self.child, self.parent):
            last, since = -1, time.monotonic()
            while True:
                running = [arn for arn in self._running(machine) if arn not in self.stalled]
                if not running:
                    break
                now = time.monotonic()
                if len(running) != last:
                    last, since = len(running), now
                elif now - since > stall:
                    self.stalled.update(running)
                    self.log(f"  {len(running)} executions of {machine} stalled (moto)")
                    break
                if now > deadline:
                    msg = "calibration executions still running"
                    raise TimeoutError(msg)
                time.sleep(0.05)

    def _running(self, machine: str) -> list[str]:
        arns: list[str] = []
        pages = self.sfn.get_paginator("list_executions").paginate(
            stateMachineArn=machine, statusFilter="RUNNING"
        )
        for page in pages:
            arns.extend(execution["executionArn"] for execution in page["executions"])
        return arns

    # ------------------------------------------------------------------ timing

    def _time(
        self, name: str, call: Callable[[int], object], k: int | None = None, *, calls: int = 1
    ) -> None:
        """Mean ms per call of ``call(i)`` for i < k; ``calls``: AWS calls each one makes."""
        count = k or self.k
        started = time.perf_counter()
        for i in range(count):
            call(i)
        self.results[name] = round((time.perf_counter() - started) / (count * calls) * 1000, 3)

    def measure(self, *, joins: bool = True) -> dict[str, float]:
        """Time every operation; ms per call."""
        self._dynamodb()
        if joins:
            self._join_operations()
        self._sqs()
        self._executions()
        self._map_parent()
        self._streams()
        return dict(sorted(self.results.items()))

    def _join_operations(self) -> None:
        """What only a join does: count a member, read the counts, read a manifest slice.

        The counting transaction and the read are the join store's own
        (:class:`JoinStore`), so the calls timed are the ones the tracker makes.
        """
        now = _now()
        members = [
            MembershipItem(
                payload_id=self._id("member"),
                waiter_id=membership_id_for(CAL_JOIN),
                join_id=CAL_JOIN,
                workflow_state=PayloadState.SUCCEEDED,
                created_at=now,
                updated_at=now,
            )
            for _ in range(self.k)
        ]
        for member in members:
            self.dependencies.register(member)
        succeeded = Resolution(state=PayloadState.SUCCEEDED)
        self._time(
            "dynamodb.TransactWriteItems@dependency",
            lambda i: self.joins.count(members[i], succeeded, retention_days=RETENTION_DAYS),
        )
        self._time("dynamodb.BatchGetItem@dependency", lambda _: self.joins.read(CAL_JOIN))
        # A manifest slice: one ranged GetObject of a 64 KB block; the summary object.
        s3 = self.stack.client("s3")
        bucket = str(self.stack.outputs["PayloadBucketName"])
        line = json.dumps(payload("cal-manifest", seconds=None), separators=(",", ":")) + "\n"
        s3.put_object(Bucket=bucket, Key="manifests/cal.jsonl", Body=(line * 1000).encode())
        self._time(
            "s3.GetObject",
            lambda _: s3.get_object(
                Bucket=bucket, Key="manifests/cal.jsonl", Range="bytes=0-65535"
            )["Body"].read(),
        )
        summary = json.dumps({"succeeded": [f"cal-{i:06d}" for i in range(1000)]}).encode()
        self._time(
            "s3.PutObject",
            lambda i: s3.put_object(Bucket=bucket, Key=f"outputs/cal-{i}.json", Body=summary),
        )
        chunk = json.dumps(
            {"join_chunk": {"join_id": "cal", "index": 1, "offset": 1, "payloads_url": "s3://x/y"}}
        )
        self._time(
            "sqs.SendMessage (tracker)",
            lambda _: self.sqs.send_message(QueueUrl=self.queue, MessageBody=chunk),
        )
        # The join message's invocation sends the later chunks' messages ten at a time.
        batch = [{"Id": str(i), "MessageBody": chunk} for i in range(10)]
        self._time(
            "sqs.SendMessageBatch",
            lambda _: self.sqs.send_message_batch(QueueUrl=self.queue, Entries=batch),
        )
        self._purge_queue()

    def _dynamodb(self) -> None:
        """The edge's DynamoDB calls, each made by the store method the tracker calls."""
        k = self.k
        states, dependencies = self.states, self.dependencies
        documents = [ProcessPayload.model_validate(payload(self._id("new"), seconds=None))]
        documents += [
            ProcessPayload.model_validate(payload(self._id("new"), seconds=None))
            for _ in range(k - 1)
        ]
        new_ids = [document.id for document in documents]
        tokens = [f"token-new-{i}" for i in range(k)]
        waiters = [self._waiter(new_ids[i], tokens[i], notified=False) for i in range(k)]
        arns = [self._execution_arn(pid) for pid in new_ids]
        # process: register the waiter, read the state, claim, record the start
        self._time("dynamodb.PutItem@dependency", lambda i: dependencies.register(waiters[i]))
        self._time(
            "dynamodb.GetItem@state",
            lambda i: states.get(self.filled_ids[i % len(self.filled_ids)]),
        )
        self._time("dynamodb.PutItem@state", lambda i: states.claim(documents[i], None))

        # The two frequent state updates: the start recorded, then the end.
        def state_updates(i: int) -> object:
            states.set_processing(new_ids[i], 1, arns[i])
            return states.set_final(
                payload_id=new_ids[i],
                workflow=CHILD,
                state=PayloadState.SUCCEEDED,
                execution_arn=arns[i],
                attempt=1,
            )

        self._time("dynamodb.UpdateItem@state", state_updates, calls=2)
        # update-state: find the waiters, resolve them; callback: read, mark notified
        self._time(
            "dynamodb.Query@dependency", lambda i: list(dependencies.pending_ids(new_ids[i]))
        )
        resolution = Resolution(state=PayloadState.SUCCEEDED)

        def waiter_updates(i: int) -> object:
            waiter_id = waiter_id_for(tokens[i])
            dependencies.resolve(
                new_ids[i], waiter_id, resolution.model_copy(update={"execution_arn": arns[i]})
            )
            return dependencies.mark_notified(
                new_ids[i],
                waiter_id,
                outcome=f"SENT:{PayloadState.SUCCEEDED.value}",
                retention_days=RETENTION_DAYS,
            )

        self._time("dynamodb.UpdateItem@dependency", waiter_updates, calls=2)
        self._time(
            "dynamodb.GetItem@dependency",
            lambda i: dependencies.get(new_ids[i], waiter_id_for(tokens[i])),
        )
        self._time(
            "dynamodb.BatchGetItem@state",
            lambda _: states.batch_get(self.filled_ids[:100]),
            k=max(1, k // 10),
        )

    def _sqs(self) -> None:
        body = json.dumps(
            {"payload": payload("cal", seconds=None), "callback": {"task_token": "t" * 36}}
        )

        def send(_: int) -> object:
            # What moto's interpreter does for every sqs:sendMessage task: a new client.
            client: Any = boto_client_for("us-east-1", "sqs")
            return client.send_message(QueueUrl=self.queue, MessageBody=body)

        self._time("sqs.SendMessage", send)
        # Receive a batch, then delete it: the depth stays what the run saw (moto scans
        # the whole queue on every call, so its cost grows with the depth).
        depth = int(self.sizes.get("queue_depth", 0))
        self._purge_queue()
        self._fill_queue(max(10, depth), body)
        receive_s = delete_s = 0.0
        batches = max(1, self.k // 5)
        for _ in range(batches):
            started = time.perf_counter()
            messages = self.sqs.receive_message(
                QueueUrl=self.queue,
                MaxNumberOfMessages=10,
                AttributeNames=["All"],
                MessageAttributeNames=["All"],
            ).get("Messages", [])
            received = time.perf_counter()
            self.sqs.delete_message_batch(QueueUrl=self.queue, Entries=_entries(messages))
            receive_s += received - started
            delete_s += time.perf_counter() - received
            self._fill_queue(len(messages), body)
        self.results["sqs.ReceiveMessage"] = round(receive_s / batches * 1000, 3)
        self.results["sqs.DeleteMessageBatch"] = round(delete_s / batches * 1000, 3)
        self._purge_queue()

    def _fill_queue(self, count: int, body: str) -> None:
        for start in range(0, count, 10):
            entries = [{"Id": str(i), "MessageBody": body} for i in range(min(10, count - start))]
            self.sqs.send_message_batch(QueueUrl=self.queue, Entries=entries)

    def _executions(self) -> None:
        names = [f"cal-{i:06d}" for i in range(self.k)]
        child_input = json.dumps(payload("cal", seconds=None))
        started = time.perf_counter()
        self._time(
            "stepfunctions.StartExecution",
            lambda i: self.sfn.start_execution(
                stateMachineArn=self.child, name=names[i], input=child_input
            ),
        )
        self._drain_executions()
        self.results["engine.ChildExecution"] = round(
            (time.perf_counter() - started) / self.k * 1000, 3
        )
        arn = self.child.replace(":stateMachine:", ":execution:")
        self._time(
            "stepfunctions.DescribeExecution",
            lambda i: self.sfn.describe_execution(executionArn=f"{arn}:{names[i]}"),
        )
        empty = json.dumps({"dependencies": []})
        self._time(
            "stepfunctions.StartExecution (parent)",
            lambda i: self.sfn.start_execution(
                stateMachineArn=self.parent, name=f"cal-parent-{i:06d}", input=empty
            ),
        )
        self._drain_executions()

    def _map_parent(self) -> None:
        """A Map parent with ``k`` dependencies: publish, then resume every iteration."""
        self._purge_queue()
        k = self.k
        body = {
            "dependencies": [payload(f"cal-map-{i}", seconds=None) for i in range(k)],
            "timeout_seconds": 3600,
        }
        started = time.perf_counter()
        arn = self.sfn.start_execution(
            stateMachineArn=self.parent, name="cal-map", input=json.dumps(body)
        )["executionArn"]
        while self._depth() < k:
            time.sleep(0.005)
        self.results["engine.MapIterationPublish"] = round(
            (time.perf_counter() - started) / k * 1000, 3
        )
        tokens: list[str] = []
        while len(tokens) < k:
            for message in self.sqs.receive_message(
                QueueUrl=self.queue, MaxNumberOfMessages=10, VisibilityTimeout=600
            ).get("Messages", []):
                body = json.loads(message["Body"])
                feature = body.get("payload", {}).get("features", [{}])[0]
                if str(feature.get("id", "")).startswith("cal-map-"):  # not a leftover
                    tokens.append(body["callback"]["task_token"])
        # moto's interpreter registers a task token after its sendMessage returns: an
        # answer sent at once may find it unknown (InvalidToken). Let the last ones settle.
        time.sleep(0.5)
        # What the callback sends a Map iteration (its ResultSelector reads both fields).
        output = json.dumps({"payload_id": "cal-map", "state": "SUCCEEDED", "replayed": False})
        started = time.perf_counter()
        self._time(
            "stepfunctions.SendTaskSuccess",
            lambda i: self.sfn.send_task_success(taskToken=tokens[i], output=output),
        )
        wait_stopped(self.sfn, arn, timeout=300.0, every=0.005)
        self.results["engine.ParentIterationResume"] = round(
            (time.perf_counter() - started) / k * 1000, 3
        )

    def _purge_queue(self) -> None:
        while True:
            messages = self.sqs.receive_message(
                QueueUrl=self.queue, MaxNumberOfMessages=10, VisibilityTimeout=600
            ).get("Messages", [])
            if not messages:
                return
            self.sqs.delete_message_batch(QueueUrl=self.queue, Entries=_entries(messages))

    def _depth(self) -> int:
        attributes = self.sqs.get_queue_attributes(
            QueueUrl=self.queue,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return sum(int(value) for value in attributes.values())

    def _streams(self) -> None:
        """GetRecords returning as many records as a data read did in the throughput run."""
        stream = str(self.stack.outputs["DependencyStreamArn"])
        shards = self.streams.describe_stream(StreamArn=stream)["StreamDescription"]["Shards"]
        limit = max(1, int(self.sizes.get("records_per_read", 10)))

        def read(_: int) -> object:
            iterator = self.streams.get_shard_iterator(
                StreamArn=stream, ShardId=shards[0]["ShardId"], ShardIteratorType="TRIM_HORIZON"
            )["ShardIterator"]
            return self.streams.get_records(ShardIterator=iterator, Limit=limit)

        started = time.perf_counter()
        for i in range(self.k):
            read(i)
        both = (time.perf_counter() - started) / self.k
        started = time.perf_counter()
        for _ in range(self.k):
            self.streams.get_shard_iterator(
                StreamArn=stream, ShardId=shards[0]["ShardId"], ShardIteratorType="TRIM_HORIZON"
            )
        iterator_only = (time.perf_counter() - started) / self.k
        self.results["dynamodbstreams.GetRecords"] = round((both - iterator_only) * 1000, 3)


def _entries(messages: list[dict[str, Any]]) -> list[dict[str, str]]:
    """``DeleteMessageBatch`` entries for received messages."""
    return [{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)]


# ------------------------------------------------------------------ the join's engine bound


def join_mix_of(result: dict[str, Any]) -> dict[str, float]:
    """Calls one member of a join run needed: tracker, pumps' data calls, interpreter, parent."""
    n = result["n"]
    mix: dict[str, float] = {}
    for name, count in result["calls"]["tracker"].items():
        key = joins.TRACKER_SEND if name == "sqs.SendMessage" else name
        mix[key] = mix.get(key, 0.0) + count / n
    for name, count in result["calls"]["plumbing_data"].items():
        mix[name] = mix.get(name, 0.0) + count / n
    for name, count in result["state_machine_calls"].items():
        mix[name] = mix.get(name, 0.0) + count / n
    mix["stepfunctions.StartExecution (parent)"] = 1 / n
    return mix


def join_sizes_of(result: dict[str, Any]) -> dict[str, int]:
    """Tables, queue and executions as large as a join of ``n`` left them."""
    n = int(result["n"])
    reads = result["calls"]["plumbing_data"].get("dynamodbstreams.GetRecords", 0)
    records = result["lambda"].get("callback", {}).get("records", 0)
    return {
        "state_items": n,
        "waiter_rows": n,
        "queue_depth": 1,
        "executions": n + 1,
        "records_per_read": max(1, round(records / reads)) if reads else 10,
    }


def join_bounds(results: list[dict[str, Any]], calibration: dict[str, Any]) -> None:
    """Add each run's engine bound and its ratio (achieved / bound) in place."""
    per_call = calibration["per_call_ms"]
    for result in results:
        bound = engine_bound(join_mix_of(result), per_call)
        result["bound"] = bound
        achieved = float(result["members_per_s"])
        result["ratio"] = {
            key: round(achieved / value, 3) if value else None
            for key, value in bound["edges_per_s"].items()
        }
        # The same against the process's CPU rather than the wall: what the ratio
        # would be had the machine given the run a whole core (others' load aside).
        cpu_ms = float(result["cpu_s"]) * 1000 / result["n"]
        result["ratio_cpu"] = {
            key: round(value / cpu_ms, 3) if cpu_ms else None
            for key, value in bound["ms_per_edge"].items()
        }


# ------------------------------------------------------------------ the run


def _scale(
    parents: int, dependencies: int, config: Any, *, log: Callable[[str], None]
) -> dict[str, Any]:
    return throughput.run_scale(parents, dependencies, config, log=log, profiler=ThreadCpu)


def _join(n: int, config: Any, token_chars: int, *, log: Callable[[str], None]) -> dict[str, Any]:
    return joins.run_size(n, config, token_chars, log=log, profiler=ThreadCpu)


def run_throughput(config: TimingConfig) -> dict[str, Any]:
    """Each scale (a failed scale is recorded, not fatal), then the engine bound."""
    scales: list[dict[str, Any]] = []
    for parents, dependencies in config.throughput.scales:
        label = f"{parents} parents x {dependencies}"
        try:
            result = section(
                config, f"throughput {label}", _scale, parents, dependencies, config.throughput
            )
        except Exception as exc:  # noqa: BLE001  (the largest scale the engine sustains is a result)
            emit(f"  {label} failed: {exc!r}")
            scales.append({"label": label, "parents": parents, "error": repr(exc)})
            continue
        result["label"] = label
        scales.append(result)
    done = [scale for scale in scales if "error" not in scale]
    out: dict[str, Any] = {"scales": scales}
    if not done:
        return out
    largest = max(done, key=lambda scale: scale["edges"])
    out["largest"] = largest
    calibration = section(config, "calibration", calibrate, config.calibration, sizes_of(largest))
    bound = engine_bound(mix_of(largest), calibration["per_call_ms"])
    out["calibration"] = calibration
    out["bound"] = bound
    achieved = float(largest["edges_per_s"])
    out["ratio"] = {
        key: round(achieved / value, 3) if value else None
        for key, value in bound["edges_per_s"].items()
    }
    return out


def run_joins(config: TimingConfig) -> dict[str, Any]:
    """Each join size, profiled; the join's calibration; each size's wall against its bound."""
    token_chars = int(costs.assumption(costs.load_prices(), "aws_task_token_chars"))
    sizes: list[dict[str, Any]] = []
    for n in config.joins.sizes:
        try:
            sizes.append(section(config, f"join n={n}", _join, n, config.joins, token_chars))
        except Exception as exc:  # noqa: BLE001  (the largest n the engine manages is a result)
            emit(f"  join n={n} failed: {exc!r}")
            sizes.append({"n": n, "error": repr(exc)})
    done = [result for result in sizes if "error" not in result]
    out: dict[str, Any] = {"sizes": sizes}
    if not done:
        return out
    basis = min(done, key=lambda result: abs(result["n"] - config.calibrate_at))
    out["calibrated_at_n"] = basis["n"]
    try:
        calibration = section(
            config, "join calibration", calibrate, config.calibration, join_sizes_of(basis)
        )
    except Exception as exc:  # noqa: BLE001  (the runs stand without the bound)
        emit(f"  join calibration failed: {exc!r}")
        calibration = {"error": repr(exc)}
    out["calibration"] = calibration
    if "per_call_ms" in calibration:
        join_bounds(done, calibration)
    return out


def collect(config: TimingConfig) -> dict[str, Any]:
    """The throughput and join timings, their bounds and the targets on them."""
    started = time.perf_counter()
    results: dict[str, Any] = {
        "meta": {
            "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "cpu_count": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "config": config.as_dict(),
        }
    }
    results["throughput"] = run_throughput(config)
    if "calibration" in results["throughput"]:
        results["calibration"] = results["throughput"].pop("calibration")
    results["joins"] = run_joins(config)
    results["targets"] = targets(results)
    results["meta"]["duration_s"] = round(time.perf_counter() - started, 1)
    return results


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The wall-clock targets, reported (never asserted)."""
    out: list[dict[str, Any]] = []
    section_ = results.get("throughput", {})
    if section_.get("ratio"):
        ratio = section_["ratio"]["calls"]
        out.append(
            {
                "name": "throughput_vs_bound",
                "target": "local pipeline reaches >= 1/2 of the engine bound (moto calls per edge)",
                "measured": f"{ratio:.2f} ({section_['largest']['edges_per_s']:.2f} of "
                f"{section_['bound']['edges_per_s']['calls']:.2f} edges/s, "
                f"{section_['largest']['label']})",
                "value": ratio,
                "met": ratio >= BOUND_RATIO,
            }
        )
    joined = results.get("joins", {})
    timed = [
        row
        for row in joined.get("sizes", [])
        if "ratio" in row and row["n"] >= joined.get("calibrated_at_n", 0)
    ]
    if timed:
        ratios = [row["ratio"]["calls"] for row in timed]
        out.append(
            {
                "name": "join_wall_vs_bound",
                "target": "join: embedded-stack wall time >= 1/2 of the engine bound at every "
                "n (linear in n)",
                "measured": ", ".join(
                    f"{row['ratio']['calls']:.2f} at n = {row['n']:,} ({row['wall_s']:.0f} s)"
                    for row in timed
                ),
                "value": min(ratios),
                "met": min(ratios) >= BOUND_RATIO,
            }
        )
    return out


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m bench.timing``."""
    parser = argparse.ArgumentParser(prog="python -m bench.timing", description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one process")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="timing.json path")
    parser.add_argument("--no-isolate", action="store_true", help="run sections in this process")
    parser.add_argument(
        "--join-sizes",
        type=sizes,
        help="members of the timed joins, comma-separated (default: "
        + ",".join(str(n) for n in FULL_TIMING.joins.sizes)
        + "; empty: none)",
    )
    args = parser.parse_args(argv)
    config = SMOKE_TIMING if args.smoke else FULL_TIMING
    if args.no_isolate:
        config = dataclasses.replace(config, isolate=False)
    if args.join_sizes is not None:
        config = dataclasses.replace(
            config, joins=dataclasses.replace(config.joins, sizes=args.join_sizes)
        )
    results = collect(config)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=2, default=str) + "\n", encoding="utf-8")
    sys.stdout.write(report.render_timing(results))
    emit(f"timing written to {args.output}")
    return 0


if __name__ == "__main__":
    # Section processes are handed functions by module name: bench.timing's, not __main__'s.
    sys.exit(importlib.import_module("bench.timing").main())
