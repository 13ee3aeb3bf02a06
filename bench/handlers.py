"""Handler costs, one invocation at a time, on a stack whose pumps are parked.

* update-state resolving 1, 100, 1,000 waiters of one payload (the status
  change of the payload's execution; ``DependencyTable.resolve_all`` resolves
  the waiters with a thread pool), plus ``resolve_all`` alone with its default
  pool and with one thread, to show what the pool buys under moto;
* process on one SQS batch (10 by default, the template's batch size) in three
  cases: every payload new (claim and start), every payload already running
  (register the waiter only), every payload already succeeded (replay).

Each invocation is timed in the main thread and its DynamoDB (and other) calls
counted with the same hooks as everywhere else.
"""

from __future__ import annotations

import contextlib
import io
import json
import time
import uuid
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING, Any

from bench.counting import TRACKER, CallCounter, instrument
from bench.stack import CHILD, attempt_one_item, local_stack, payload, payload_id
from bench.stats import median, rounded
from dependency_tracker.core import naming
from dependency_tracker.core.enums import PayloadState
from dependency_tracker.handlers import process, update_state
from dependency_tracker.payloads.state_table import StateTable
from dependency_tracker.table.dependency_table import DEFAULT_RESOLVE_CONCURRENCY, DependencyTable
from dependency_tracker.table.items import Resolution, WaiterItem, waiter_id_for
from dependency_tracker_local.context import LocalContext
from dependency_tracker_local.events import sqs_event, status_change_event

if TYPE_CHECKING:
    from collections.abc import Callable

    from bench.config import HandlerConfig
    from dependency_tracker_local import EmbeddedStack

ACCOUNT = "123456789012"
BATCH_WRITE = 25


def run(config: HandlerConfig, *, log: Callable[[str], None]) -> dict[str, Any]:
    """Every handler measurement."""
    with local_stack(idle_pumps=True) as stack:
        tools = instrument(stack, token_chars=None)
        bench = _Handlers(stack, tools.calls)
        update = [bench.update_state(waiters, config.reps) for waiters in config.waiters]
        for row in update:
            log(
                f"  update-state resolving {row['waiters']:>5d} waiters: "
                f"{row['seconds']['p50']:.3f} s, {row['dynamodb_calls_total']} DynamoDB calls"
            )
        largest = max(config.waiters)
        pools = [
            bench.resolve_all(largest, concurrency, config.reps)
            for concurrency in (DEFAULT_RESOLVE_CONCURRENCY, 1)
        ]
        batches = [bench.process_batch(case, config.batch, config.reps) for case in _CASES]
        for row in batches:
            log(
                f"  process, batch of {row['batch']} ({row['case']}): "
                f"{row['seconds']['p50']:.3f} s, {row['dynamodb_calls_total']} DynamoDB calls"
            )
    return {"update_state": update, "resolve_all": pools, "process_batch": batches}


_CASES = ("new", "running", "succeeded")


def _quiet() -> contextlib.AbstractContextManager[object]:
    """Handler output (EMF metric lines, logs) away from the benchmark's stdout."""
    return contextlib.redirect_stdout(io.StringIO())


class _Handlers:
    def __init__(self, stack: EmbeddedStack, calls: CallCounter) -> None:
        self.stack = stack
        self.calls = calls
        ddb = stack.client("dynamodb")
        self.ddb = ddb
        self.states = StateTable(ddb, stack.outputs["StateTableName"])
        self.dependencies = DependencyTable(ddb, stack.outputs["DependencyTableName"])
        self.child_arn = str(stack.outputs["StateMachines"][CHILD])
        self.queue_arn = str(stack.outputs["ProcessQueueArn"])
        self._serial = 0

    def _tag(self, kind: str) -> str:
        self._serial += 1
        return f"{kind}-{self._serial:04d}"

    # ------------------------------------------------------------------ setup

    def _seed(self, document: dict[str, Any], state: PayloadState) -> str:
        """Store ``document``'s state item as attempt 1 in ``state``; that attempt's ARN."""
        pid = payload_id(document)
        arn = naming.execution_arn(self.child_arn, naming.execution_name(pid, 1))
        self.ddb.put_item(TableName=self.states.table_name, Item=attempt_one_item(pid, state, arn))
        return arn

    def _waiters(self, pid: str, count: int) -> None:
        now = datetime.now(UTC)
        rows = [
            WaiterItem(
                payload_id=pid,
                waiter_id=waiter_id_for(token),
                task_token=token,
                created_at=now,
                updated_at=now,
                parent_execution=f"arn:aws:states:us-east-1:{ACCOUNT}:execution:deptrack-p:{i}",
            ).to_item()
            for i, token in enumerate(str(uuid.uuid4()) for _ in range(count))
        ]
        table = self.dependencies.table_name
        for start in range(0, len(rows), BATCH_WRITE):
            request = {table: [{"PutRequest": {"Item": row}} for row in rows[start : start + 25]]}
            while request:
                request = self.ddb.batch_write_item(RequestItems=request).get(
                    "UnprocessedItems", {}
                )

    def _measure(self, call: Callable[[], object]) -> tuple[float, dict[str, int]]:
        self.calls.drain()
        started = time.perf_counter()
        with _quiet():
            call()
        elapsed = time.perf_counter() - started
        window = self.calls.drain()
        counted: dict[str, int] = {}
        for (category, service, operation, table), stats in window.calls.items():
            if category == TRACKER:
                name = f"{service}.{operation}" + (f"@{table}" if table else "")
                counted[name] = counted.get(name, 0) + stats.count
        return elapsed, dict(sorted(counted.items()))

    # ------------------------------------------------------------------ measurements

    def update_state(self, waiters: int, reps: int) -> dict[str, Any]:
        """The update-state handler on a SUCCEEDED status change of a payload with waiters."""
        times: list[float] = []
        calls: dict[str, int] = {}
        for _ in range(reps):
            document = payload(self._tag(f"update{waiters}"), seconds=0)
            arn = self._seed(document, PayloadState.PROCESSING)
            self._waiters(payload_id(document), waiters)
            now = datetime.now(UTC)
            described = {
                "executionArn": arn,
                "stateMachineArn": self.child_arn,
                "name": arn.rsplit(":", 1)[1],
                "status": "SUCCEEDED",
                "startDate": now,
                "stopDate": now,
                "input": json.dumps(document),
                "output": json.dumps(document),
            }
            event = status_change_event(described, region="us-east-1", account=ACCOUNT)
            elapsed, calls = self._measure(
                partial(update_state.lambda_handler, event, LocalContext("update-state"))
            )
            times.append(elapsed)
        return {
            "waiters": waiters,
            "samples": reps,
            "seconds": _spread(times),
            "dynamodb_calls": {k: v for k, v in calls.items() if k.startswith("dynamodb.")},
            "dynamodb_calls_total": sum(v for k, v in calls.items() if k.startswith("dynamodb.")),
            "other_calls": {k: v for k, v in calls.items() if not k.startswith("dynamodb.")},
            "resolve_concurrency": DEFAULT_RESOLVE_CONCURRENCY,
        }

    def resolve_all(self, waiters: int, concurrency: int, reps: int) -> dict[str, Any]:
        """``DependencyTable.resolve_all`` alone, with ``concurrency`` threads."""
        table = DependencyTable(
            self.stack.client("dynamodb"),
            self.dependencies.table_name,
            resolve_concurrency=concurrency,
        )
        times = []
        for _ in range(reps):
            document = payload(self._tag(f"resolve{waiters}"), seconds=0)
            arn = self._seed(document, PayloadState.PROCESSING)
            pid = payload_id(document)
            self._waiters(pid, waiters)
            resolution = Resolution(state=PayloadState.SUCCEEDED, execution_arn=arn)
            started = time.perf_counter()
            resolved = table.resolve_all(pid, resolution)
            times.append(time.perf_counter() - started)
            if resolved != waiters:
                msg = f"resolve_all moved {resolved} of {waiters} waiters"
                raise RuntimeError(msg)
        return {"waiters": waiters, "concurrency": concurrency, "seconds": _spread(times)}

    def process_batch(self, case: str, size: int, reps: int) -> dict[str, Any]:
        """The process handler on one SQS batch of ``size`` messages with task tokens."""
        times: list[float] = []
        calls: dict[str, int] = {}
        for _ in range(reps):
            documents = [payload(self._tag(f"batch-{case}"), seconds=600) for _ in range(size)]
            for document in documents:
                if case == "running":
                    self._seed(document, PayloadState.PROCESSING)
                elif case == "succeeded":
                    self._seed(document, PayloadState.SUCCEEDED)
            messages = [
                {
                    "MessageId": str(uuid.uuid4()),
                    "ReceiptHandle": str(uuid.uuid4()),
                    "Body": json.dumps(
                        {"payload": document, "callback": {"task_token": str(uuid.uuid4())}}
                    ),
                    "Attributes": {"ApproximateReceiveCount": "1"},
                    "MD5OfBody": "",
                }
                for document in documents
            ]
            event = sqs_event(messages, queue_arn=self.queue_arn, region="us-east-1")
            elapsed, calls = self._measure(
                partial(process.lambda_handler, event, LocalContext("process"))
            )
            times.append(elapsed)
        return {
            "case": case,
            "batch": size,
            "samples": reps,
            "seconds": _spread(times),
            "dynamodb_calls": {k: v for k, v in calls.items() if k.startswith("dynamodb.")},
            "dynamodb_calls_total": sum(v for k, v in calls.items() if k.startswith("dynamodb.")),
            "other_calls": {k: v for k, v in calls.items() if not k.startswith("dynamodb.")},
        }


def _spread(times: list[float]) -> dict[str, float | None]:
    return {
        "p50": rounded(median(times), 4),
        "min": rounded(min(times), 4),
        "max": rounded(max(times), 4),
    }
