"""The engine bound: each moto operation an edge needs, timed in isolation.

On a stack whose pumps are parked (nothing else touches moto), with tables,
queue and executions filled to the size the throughput run reached, every
operation is run ``calls`` times and its mean wall time taken. Weighted by how
often one edge needed it in the throughput run, the sum is the engine's cost
of one edge; its inverse is the most edges per second the engine could
resolve if it did nothing else (one core: moto is pure Python under the GIL).

Two bounds are reported:

* ``calls``: the moto *calls* an edge needs (tracker calls, the pumps' data
  calls, the parent's ``sqs:sendMessage`` the way moto's interpreter makes it,
  starting the parents), as the issue defines it;
* ``engine``: the same with the interpreter's own work added (a Map iteration
  publishing, a child execution running to its end, a parent iteration
  resuming after ``SendTaskSuccess``), measured as composites.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from moto.stepfunctions.parser.asl.utils.boto_client import boto_client_for

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
from dependency_tracker.table.items import WaiterItem, waiter_id_for

if TYPE_CHECKING:
    from collections.abc import Callable

    from bench.config import CalibrationConfig
    from dependency_tracker_local import EmbeddedStack

BATCH_WRITE = 25
# Calls whose cost the engine bound replaces by an interpreter composite.
COMPOSITES = {
    "sqs.SendMessage": "engine.MapIterationPublish",
    "stepfunctions.StartExecution": "engine.ChildExecution",
    "stepfunctions.SendTaskSuccess": "engine.ParentIterationResume",
}


def _now() -> datetime:
    return datetime.now(UTC)


def run(
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


def bound(mix: dict[str, float], per_call_ms: dict[str, float]) -> dict[str, Any]:
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
        self.results: dict[str, float] = {}
        self.filled_ids: list[str] = []
        self.stalled: set[str] = set()
        self._serial = 0

    # ------------------------------------------------------------------ setup

    def _id(self, tag: str) -> str:
        self._serial += 1
        return f"cal/workflow-{CHILD}/{tag}-{self._serial:06d}"

    def _state_item(self, payload_id: str, state: PayloadState) -> dict[str, Any]:
        arn = f"{self.child.replace(':stateMachine:', ':execution:')}:{payload_id[-40:]}-1"
        return attempt_one_item(payload_id, state, arn)

    def _waiter_item(self, payload_id: str, token: str, *, notified: bool) -> dict[str, Any]:
        now = _now()
        waiter = WaiterItem(
            payload_id=payload_id,
            waiter_id=waiter_id_for(token),
            task_token=token,
            created_at=now,
            updated_at=now,
            workflow_state=PayloadState.SUCCEEDED if notified else PayloadState.PROCESSING,
            notified_at=now if notified else None,
            parent_execution="arn:aws:states:us-east-1:123456789012:execution:deptrack-x:p",
        )
        return waiter.to_item()

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
            self._waiter_item(pid, f"token-{pid}-{w}", notified=True)
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

    def _time(self, name: str, call: Callable[[int], object], k: int | None = None) -> None:
        count = k or self.k
        started = time.perf_counter()
        for i in range(count):
            call(i)
        self.results[name] = round((time.perf_counter() - started) / count * 1000, 3)

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
        """What only a join does: count a member, read the counts, read a manifest slice."""
        k = self.k
        ddb = self.ddb
        join = "join#cal"
        members = [self._id("member") for _ in range(k)]
        membership = "membership#cal"
        now = _now().isoformat()
        for pid in members:
            ddb.put_item(
                TableName=self.dependency_table,
                Item={
                    "payload_id": {"S": pid},
                    "waiter_id": {"S": membership},
                    "join_id": {"S": "cal"},
                    "workflow_state": {"S": "SUCCEEDED"},
                    "created_at": {"S": now},
                },
            )

        def count(i: int) -> object:
            return ddb.transact_write_items(
                TransactItems=[
                    {
                        "Update": {
                            "TableName": self.dependency_table,
                            "Key": {
                                "payload_id": {"S": members[i]},
                                "waiter_id": {"S": membership},
                            },
                            "UpdateExpression": "SET notified_at = :now, notify_outcome = :o",
                            "ConditionExpression": "attribute_not_exists(notified_at) "
                            "AND workflow_state = :s",
                            "ExpressionAttributeValues": {
                                ":now": {"S": now},
                                ":o": {"S": "COUNTED:SUCCEEDED"},
                                ":s": {"S": "SUCCEEDED"},
                            },
                        }
                    },
                    {
                        "Update": {
                            "TableName": self.dependency_table,
                            "Key": {
                                "payload_id": {"S": f"{join}#counts#{i % 4}"},
                                "waiter_id": {"S": "counts"},
                            },
                            "UpdateExpression": "ADD succeeded :one SET updated_at = :now",
                            "ExpressionAttributeValues": {":one": {"N": "1"}, ":now": {"S": now}},
                        }
                    },
                ]
            )

        self._time("dynamodb.TransactWriteItems@dependency", count)
        keys = [{"payload_id": {"S": join}, "waiter_id": {"S": "join"}}] + [
            {"payload_id": {"S": f"{join}#counts#{shard}"}, "waiter_id": {"S": "counts"}}
            for shard in range(4)
        ]
        self._time(
            "dynamodb.BatchGetItem@dependency",
            lambda _: ddb.batch_get_item(
                RequestItems={self.dependency_table: {"Keys": keys, "ConsistentRead": True}}
            ),
        )
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
        k = self.k
        ddb = self.ddb
        new_ids = [self._id("new") for _ in range(k)]
        tokens = [f"token-new-{i}" for i in range(k)]
        # process: register the waiter, read the state, claim, record the start
        self._time(
            "dynamodb.PutItem@dependency",
            lambda i: ddb.put_item(
                TableName=self.dependency_table,
                Item=self._waiter_item(new_ids[i], tokens[i], notified=False),
                ConditionExpression="attribute_not_exists(waiter_id)",
            ),
        )
        self._time(
            "dynamodb.GetItem@state",
            lambda i: ddb.get_item(
                TableName=self.state_table,
                Key={"payload_id": {"S": self.filled_ids[i % len(self.filled_ids)]}},
                ConsistentRead=True,
            ),
        )
        self._time(
            "dynamodb.PutItem@state",
            lambda i: ddb.put_item(
                TableName=self.state_table,
                Item=self._state_item(new_ids[i], PayloadState.CLAIMED),
                ConditionExpression="attribute_not_exists(payload_id)",
            ),
        )
        self._time("dynamodb.UpdateItem@state", lambda i: self._state_update(new_ids[i], i))
        # update-state: find the waiters, resolve them; callback: read, mark notified
        self._time(
            "dynamodb.Query@dependency",
            lambda i: ddb.query(
                TableName=self.dependency_table,
                KeyConditionExpression="payload_id = :pid",
                FilterExpression="workflow_state = :processing",
                ProjectionExpression="payload_id, waiter_id",
                ExpressionAttributeValues={
                    ":pid": {"S": new_ids[i]},
                    ":processing": {"S": "PROCESSING"},
                },
                ConsistentRead=True,
            ),
        )
        self._time(
            "dynamodb.UpdateItem@dependency",
            lambda i: self._waiter_update(new_ids[i], tokens[i], i),
        )
        self._time(
            "dynamodb.GetItem@dependency",
            lambda i: ddb.get_item(
                TableName=self.dependency_table,
                Key={"payload_id": {"S": new_ids[i]}, "waiter_id": {"S": waiter_id_for(tokens[i])}},
                ConsistentRead=True,
            ),
        )
        self._time(
            "dynamodb.BatchGetItem@state",
            lambda i: ddb.batch_get_item(
                RequestItems={
                    self.state_table: {
                        "Keys": [{"payload_id": {"S": pid}} for pid in self.filled_ids[:100]],
                        "ConsistentRead": True,
                    }
                }
            ),
            k=max(1, k // 10),
        )

    def _state_update(self, payload_id: str, i: int) -> object:
        """Alternately set_processing-like and set_final-like (the two frequent updates)."""
        now = _now().isoformat()
        if i % 2 == 0:
            return self.ddb.update_item(
                TableName=self.state_table,
                Key={"payload_id": {"S": payload_id}},
                UpdateExpression="SET #s = :p, execution_arn = :arn, updated_at = :now "
                "ADD executions :arns",
                ConditionExpression="#s = :claimed AND attempt = :one",
                ExpressionAttributeNames={"#s": "state"},
                ExpressionAttributeValues={
                    ":p": {"S": "PROCESSING"},
                    ":claimed": {"S": "CLAIMED"},
                    ":one": {"N": "1"},
                    ":arn": {"S": f"arn-{payload_id}"},
                    ":arns": {"SS": [f"arn-{payload_id}"]},
                    ":now": {"S": now},
                },
            )
        return self.ddb.update_item(
            TableName=self.state_table,
            Key={"payload_id": {"S": payload_id}},
            UpdateExpression="SET #s = :done, finished_at = :now, updated_at = :now "
            "ADD executions :arns REMOVE last_error, last_cause",
            ConditionExpression="attribute_not_exists(payload_id) OR attempt = :one",
            ExpressionAttributeNames={"#s": "state"},
            ExpressionAttributeValues={
                ":done": {"S": "SUCCEEDED"},
                ":one": {"N": "1"},
                ":arns": {"SS": [f"arn-{payload_id}"]},
                ":now": {"S": now},
            },
            ReturnValues="ALL_NEW",
        )

    def _waiter_update(self, payload_id: str, token: str, i: int) -> object:
        """Alternately resolve-like and mark_notified-like."""
        key = {"payload_id": {"S": payload_id}, "waiter_id": {"S": waiter_id_for(token)}}
        now = _now().isoformat()
        if i % 2 == 0:
            return self.ddb.update_item(
                TableName=self.dependency_table,
                Key=key,
                UpdateExpression="SET workflow_state = :s, replayed = :r, resolved_at = :now, "
                "updated_at = :now, execution_arn = :arn",
                ConditionExpression="workflow_state = :processing",
                ExpressionAttributeValues={
                    ":s": {"S": "SUCCEEDED"},
                    ":r": {"BOOL": False},
                    ":now": {"S": now},
                    ":arn": {"S": f"arn-{payload_id}"},
                    ":processing": {"S": "PROCESSING"},
                },
            )
        return self.ddb.update_item(
            TableName=self.dependency_table,
            Key=key,
            UpdateExpression="SET notified_at = :now, notify_outcome = :o, "
            "expiration_time = :e, updated_at = :now",
            ConditionExpression="attribute_exists(waiter_id) AND attribute_not_exists(notified_at)",
            ExpressionAttributeValues={
                ":now": {"S": now},
                ":o": {"S": "SENT:SUCCEEDED"},
                ":e": {"N": "1900000000"},
            },
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
