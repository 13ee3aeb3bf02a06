"""Counting AWS calls (botocore event hooks) and Lambda invocations (pump handlers).

Two kinds of callers are told apart by the client they use:

* **tracker**: the clients the handlers use (the stack's ``app.clients``,
  one cached client per service). These are the calls the tracker makes in AWS.
* **plumbing**: the pumps' own clients (SQS receive/delete, execution listing,
  stream reads). In AWS, Lambda's event source mappings and EventBridge do this
  work; locally it is moto-only plumbing.

State machine service integrations (``sqs:sendMessage``, ``dynamodb:getItem``)
run inside moto's interpreter and are counted from the execution history
instead (:mod:`bench.history`).

A ``before-call``/``after-call`` hook pair counts each call, times it, sees
whether a polling call came back empty, and adds up the DynamoDB capacity units
the call would consume in AWS (:mod:`bench.capacity`).
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from botocore.client import BaseClient

from bench.capacity import item_size, read_units, write_units

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from dependency_tracker_local import EmbeddedStack
    from dependency_tracker_local.pumps import Handler

TRACKER = "tracker"
PLUMBING = "plumbing"
# Every service a handler may call through its app's clients.
TRACKER_SERVICES = ("dynamodb", "stepfunctions", "s3", "sqs")

# (category, service, operation, table kind or "")
Key = tuple[str, str, str, str]
# DynamoDB bills each item of a transactional write as two writes (prepare, commit).
TRANSACTION_FACTOR = 2


@dataclass
class CallStats:
    """Calls of one kind: how many, the time spent in them, how many came back empty."""

    count: int = 0
    seconds: float = 0.0
    empty: int = 0
    empty_seconds: float = 0.0
    items: int = 0  # messages or records returned by polling calls


# An UpdateItem sized afterwards: (table kind, table name, key as sorted JSON, unit factor).
Deferred = tuple[str, str, str, int]
# (table kind, partition key value)
Partition = tuple[str, str]


@dataclass
class Capacity:
    """DynamoDB request units the counted calls would consume in AWS, by table kind.

    Items written in a ``TransactWriteItems`` count twice (DynamoDB bills a
    transactional write as two: prepare and commit); ``BatchGetItem`` counts
    every key it was asked for, a missing item at the minimum unit (as AWS
    bills a read of an item that does not exist), keys returned unprocessed
    not at all. Units are also kept by partition (``by_partition_*``), to find
    a join's hottest partition.
    """

    write_units: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    read_units: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    # UpdateItems (alone or in a transaction) that returned no item: sized afterwards
    # from the stored row, times the factor (2 in a transaction).
    deferred_updates: list[Deferred] = field(default_factory=list)
    # Queries with a projection: rows scanned, sized later from the rows' mean size.
    query_scanned: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    deferred_queries: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    by_partition_write: dict[Partition, float] = field(default_factory=lambda: defaultdict(float))
    by_partition_read: dict[Partition, float] = field(default_factory=lambda: defaultdict(float))
    transactional_items: int = 0

    def write(self, table: str, key: Any, units: float) -> None:
        """Add ``units`` written to ``key``'s partition of ``table``."""
        self.write_units[table] += units
        self.by_partition_write[(table, partition_of(key))] += units

    def read(self, table: str, key: Any, units: float) -> None:
        """Add ``units`` read from ``key``'s partition of ``table``."""
        self.read_units[table] += units
        self.by_partition_read[(table, partition_of(key))] += units


BATCH_GET_LIMIT = 100


def resolve_deferred(
    capacity: Capacity, dynamodb: Any, *, token_chars: int | None
) -> dict[str, int]:
    """Size the deferred updates from the rows as stored now, and add their units.

    Rows only grow here, so each is an upper bound of the write it stands for.
    Returns each row's size by key (JSON); the deferred list is emptied.
    """
    by_table: dict[str, set[str]] = defaultdict(set)
    for _, table_name, key, _ in capacity.deferred_updates:
        by_table[table_name].add(key)
    sizes: dict[str, int] = {}
    for table_name, keys in by_table.items():
        ordered = sorted(keys)
        for start in range(0, len(ordered), BATCH_GET_LIMIT):
            chunk = [json.loads(key) for key in ordered[start : start + BATCH_GET_LIMIT]]
            names = sorted(chunk[0])
            request: dict[str, Any] = {table_name: {"Keys": chunk}}
            while request:
                response = dynamodb.batch_get_item(RequestItems=request)
                for item in response.get("Responses", {}).get(table_name, []):
                    sizes[_key_json(item, names)] = item_size(item, token_chars=token_chars)
                request = response.get("UnprocessedKeys") or {}
    for table, _, key, factor in capacity.deferred_updates:
        capacity.write(table, json.loads(key), factor * write_units(sizes.get(key, 0)))
    capacity.deferred_updates = []
    return sizes


def partition_of(key: Any) -> str:
    """The partition key value of an item or key (attribute-value form); "" when unknown."""
    if isinstance(key, dict):
        value = key.get("payload_id")
        if isinstance(value, dict):
            return str(value.get("S", ""))
    return ""


@dataclass
class CallWindow:
    """What the hooks saw between two drains."""

    calls: dict[Key, CallStats]
    capacity: dict[str, Capacity]


class CallCounter:
    """Counts, times and sizes every call of the clients it is attached to."""

    def __init__(self, *, tables: Mapping[str, str], token_chars: int | None) -> None:
        self._tables = dict(tables)  # table name -> kind ("state", "dependency")
        self._token_chars = token_chars
        self._lock = threading.Lock()
        self._calls: dict[Key, CallStats] = defaultdict(CallStats)
        self._capacity: dict[str, Capacity] = defaultdict(Capacity)
        self.last_call: dict[str, float] = defaultdict(float)
        # Told of every call once counted (Invocations.note: calls per invocation).
        self.listener: Callable[[Key], None] | None = None

    def attach(self, client: BaseClient, category: str) -> None:
        """Count ``client``'s calls under ``category`` (idempotent per client)."""
        service = client.meta.service_model.service_name
        events = client.meta.events
        uid = f"bench-{id(self)}"

        def params(**kwargs: Any) -> None:
            self._params(category, service, **kwargs)

        def before(*, context: Any, **_: Any) -> None:
            context["bench.start"] = time.perf_counter()

        def after(**kwargs: Any) -> None:
            self._after(**kwargs)

        # before-parameter-build sees the API parameters; before-call only the wire request.
        events.register("before-parameter-build", params, unique_id=f"{uid}-params")
        events.register("before-call", before, unique_id=f"{uid}-before")
        events.register("after-call", after, unique_id=f"{uid}-after")

    def _kind(self, name: str) -> str:
        return self._tables.get(name, "other")

    def drain(self) -> CallWindow:
        """Everything counted since the last drain; starts a new window."""
        with self._lock:
            window = CallWindow(calls=dict(self._calls), capacity=dict(self._capacity))
            self._calls = defaultdict(CallStats)
            self._capacity = defaultdict(Capacity)
        return window

    # ------------------------------------------------------------------ hooks

    def _params(
        self, category: str, service: str, *, model: Any, params: Any, context: Any, **_: Any
    ) -> None:
        table = ""
        if service == "dynamodb" and isinstance(params, dict):
            table = self._kind(_table_name(params))
        context["bench.key"] = (category, service, str(model.name), table)
        context["bench.params"] = params

    def _after(self, *, parsed: Any, context: Any, **_: Any) -> None:
        start = context.get("bench.start")
        key = context.get("bench.key")
        if start is None or key is None:
            return
        elapsed = time.perf_counter() - start
        items = _returned(key[2], parsed)
        with self._lock:
            stats = self._calls[key]
            stats.count += 1
            stats.seconds += elapsed
            if items is not None:
                stats.items += items
                if items == 0:
                    stats.empty += 1
                    stats.empty_seconds += elapsed
            self.last_call[key[0]] = time.perf_counter()
            if key[1] == "dynamodb" and isinstance(parsed, dict):
                self._size(key, context.get("bench.params") or {}, parsed)
        if self.listener is not None:
            self.listener(key)

    def _size(self, key: Key, params: dict[str, Any], parsed: dict[str, Any]) -> None:
        """Add the request units of one DynamoDB call (lock held)."""
        category, _, operation, table = key
        capacity = self._capacity[category]
        tokens = self._token_chars
        if operation == "PutItem":
            item = params.get("Item", {})
            capacity.write(table, item, write_units(item_size(item, token_chars=tokens)))
        elif operation == "UpdateItem":
            new = parsed.get("Attributes")
            if new and params.get("ReturnValues") == "ALL_NEW":
                units = write_units(item_size(new, token_chars=tokens))
                capacity.write(table, params.get("Key", {}), units)
            else:
                key_json = json.dumps(params.get("Key", {}), sort_keys=True)
                capacity.deferred_updates.append((table, str(params.get("TableName")), key_json, 1))
        elif operation == "TransactWriteItems":
            self._transaction(capacity, params)
        elif operation == "GetItem":
            size = item_size(parsed.get("Item", {}), token_chars=tokens)
            consistent = bool(params.get("ConsistentRead"))
            capacity.read(table, params.get("Key", {}), read_units(size, consistent=consistent))
        elif operation == "Query":
            self._query(capacity, table, params, parsed)
        elif operation == "BatchGetItem":
            self._batch_get(capacity, params, parsed)

    def _query(
        self, capacity: Capacity, table: str, params: dict[str, Any], parsed: dict[str, Any]
    ) -> None:
        """A ``Query`` is billed on the rows it scanned, whole (not as projected).

        Without a projection the rows returned are sized now (scaled up to the
        rows scanned when a filter dropped some); with one, only the rows
        scanned are known and the query is sized later from the rows' mean
        size (``query_scanned``, ``deferred_queries``).
        """
        scanned = int(parsed.get("ScannedCount", 0))
        items = parsed.get("Items", [])
        consistent = bool(params.get("ConsistentRead"))
        partition = params.get("ExpressionAttributeValues", {}).get(":pid")
        key = {"payload_id": partition} if isinstance(partition, dict) else {}
        if params.get("ProjectionExpression") or (scanned and not items):
            capacity.query_scanned[table] += scanned
            capacity.deferred_queries[table] += 1
            capacity.read_units[table] += 0.0
            return
        size = sum(item_size(item, token_chars=self._token_chars) for item in items)
        if items and scanned > len(items):
            size = math.ceil(size * scanned / len(items))
        capacity.read(table, key, read_units(size, consistent=consistent))

    def _transaction(self, capacity: Capacity, params: dict[str, Any]) -> None:
        """Every item of a ``TransactWriteItems``, at twice its standard write units."""
        for entry in params.get("TransactItems", []):
            ((action, request),) = entry.items()
            name = str(request.get("TableName"))
            kind = self._kind(name)
            capacity.transactional_items += 1
            if action == "Put":
                item = request.get("Item", {})
                units = TRANSACTION_FACTOR * write_units(
                    item_size(item, token_chars=self._token_chars)
                )
                capacity.write(kind, item, units)
            else:  # Update, Delete, ConditionCheck: the stored row's size, afterwards
                key_json = json.dumps(request.get("Key", {}), sort_keys=True)
                capacity.deferred_updates.append((kind, name, key_json, TRANSACTION_FACTOR))

    def _batch_get(
        self, capacity: Capacity, params: dict[str, Any], parsed: dict[str, Any]
    ) -> None:
        """Each key asked for: its item's units, or the minimum for an item not found."""
        unprocessed = parsed.get("UnprocessedKeys") or {}
        for name, request in params.get("RequestItems", {}).items():
            kind = self._kind(str(name))
            consistent = bool(request.get("ConsistentRead"))
            keys = request.get("Keys", [])
            found = parsed.get("Responses", {}).get(name, [])
            for item in found:
                size = item_size(item, token_chars=self._token_chars)
                capacity.read(kind, item, read_units(size, consistent=consistent))
            if not keys:
                continue
            names = sorted(keys[0])
            seen = {_key_json(item, names) for item in found}
            seen |= {_key_json(key, names) for key in unprocessed.get(name, {}).get("Keys", [])}
            for key in keys:
                if _key_json(key, names) not in seen:
                    capacity.read(kind, key, read_units(0, consistent=consistent))


def _key_json(item: Mapping[str, Any], names: list[str]) -> str:
    return json.dumps({name: item.get(name) for name in names}, sort_keys=True)


def _table_name(params: dict[str, Any]) -> str:
    """The table a DynamoDB call is about (a batch's or a transaction's first)."""
    name = params.get("TableName") or next(iter(params.get("RequestItems", {})), "")
    if not name:
        for entry in params.get("TransactItems", []):
            for request in entry.values():
                name = request.get("TableName", "")
                break
            if name:
                break
    return str(name)


def _returned(operation: str, parsed: Any) -> int | None:
    """Messages or records a polling call returned (None for other calls)."""
    if not isinstance(parsed, dict):
        return None
    if operation == "ReceiveMessage":
        return len(parsed.get("Messages", ()))
    if operation == "GetRecords":
        return len(parsed.get("Records", ()))
    return None


@dataclass
class InvocationStats:
    """Invocations of one function: how many, how many records, wall time.

    The wall time includes waiting for the local invocation lock (local mode
    runs one handler at a time), so it is an upper bound of the handler's own time.
    """

    invocations: int = 0
    records: int = 0
    seconds: float = 0.0


@dataclass
class InvocationRecord:
    """One invocation: its function, how many records it got, the tracker calls it made.

    ``started`` and ``ended`` are ``time.perf_counter()`` readings (when the pump called
    the handler and when it returned), to time a stretch of invocations such as a join's
    registration.
    """

    function: str
    records: int
    calls: dict[str, int]
    started: float = 0.0
    ended: float = 0.0

    @property
    def total(self) -> int:
        """Every tracker call of the invocation."""
        return sum(self.calls.values())


class Invocations:
    """Wraps the pumps' handlers to count Lambda invocations, their records and calls.

    The local stack runs one handler at a time (its invoker's lock); the
    wrapper takes a lock of its own around the handler too, in the same order,
    so every tracker call made meanwhile (the handler's pool threads included)
    is the running invocation's. Each invocation's calls are kept
    (:meth:`drain_records`) when ``keep_records`` is set.
    """

    def __init__(self, *, keep_records: bool = False) -> None:
        self._lock = threading.Lock()
        self._running = threading.Lock()
        self._stats: dict[str, InvocationStats] = defaultdict(InvocationStats)
        self._current: dict[str, int] | None = None
        self._records: list[InvocationRecord] = []
        self.keep_records = keep_records
        self.in_flight = 0
        self.last_end = time.perf_counter()
        self.delivered: set[str] = set()  # execution ARNs whose status change was delivered

    def note(self, key: Key) -> None:
        """A tracker call was counted: add it to the running invocation's calls."""
        category, service, operation, table = key
        if category != TRACKER:
            return
        name = f"{service}.{operation}" + (f"@{table}" if table else "")
        with self._lock:
            if self._current is not None:
                self._current[name] = self._current.get(name, 0) + 1

    def wrap(self, function: str, handler: Handler) -> Handler:
        """``handler``, counted under ``function``."""

        def invoke(event: dict[str, Any], context: Any) -> Any:
            with self._lock:
                self.in_flight += 1
            start = time.perf_counter()
            records = len(event.get("Records", ())) or 1
            calls: dict[str, int] = {}
            try:
                with self._running:
                    with self._lock:
                        self._current = calls
                    try:
                        return handler(event, context)
                    finally:
                        with self._lock:
                            self._current = None
            finally:
                elapsed = time.perf_counter() - start
                arn = event.get("detail", {}).get("executionArn")
                with self._lock:
                    stats = self._stats[function]
                    stats.invocations += 1
                    stats.records += records
                    stats.seconds += elapsed
                    self.in_flight -= 1
                    self.last_end = time.perf_counter()
                    if isinstance(arn, str):
                        self.delivered.add(arn)
                    if self.keep_records:
                        self._records.append(
                            InvocationRecord(function, records, calls, start, self.last_end)
                        )

        return invoke

    def drain(self) -> dict[str, InvocationStats]:
        """Invocations since the last drain; starts a new window."""
        with self._lock:
            stats = dict(self._stats)
            self._stats = defaultdict(InvocationStats)
        return stats

    def drain_records(self) -> list[InvocationRecord]:
        """Each invocation since the last drain, with its calls (``keep_records`` only)."""
        with self._lock:
            records, self._records = self._records, []
        return records


@dataclass
class Instruments:
    """The hooks of one running stack."""

    calls: CallCounter
    invocations: Invocations

    def settle(
        self,
        *,
        parent_arn: str | None = None,
        quiet: float = 0.3,
        timeout: float = 120.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """Wait until nothing runs, and the parent's own status change was delivered.

        Nothing runs: no handler invocation and no tracker call for ``quiet``
        seconds. update-state sees every parent's status change too, so a
        parent's window closes only after that invocation.

        Raises:
            TimeoutError: Still busy after ``timeout`` seconds.
        """
        deadline = time.perf_counter() + timeout
        while True:
            now = time.perf_counter()
            idle = (
                self.invocations.in_flight == 0
                and now - self.invocations.last_end >= quiet
                and now - self.calls.last_call[TRACKER] >= quiet
            )
            delivered = parent_arn is None or parent_arn in self.invocations.delivered
            if idle and delivered:
                return
            if now > deadline:
                msg = f"stack still busy after {timeout} s (parent delivered: {delivered})"
                raise TimeoutError(msg)
            sleep(quiet / 6)


def instrument(
    stack: EmbeddedStack, *, token_chars: int | None, keep_records: bool = False
) -> Instruments:
    """Attach the hooks to a running stack's tracker clients and pumps.

    ``keep_records`` keeps every invocation's own calls (for the most calls
    any one invocation made).
    """
    outputs = stack.outputs
    counter = CallCounter(
        tables={outputs["StateTableName"]: "state", outputs["DependencyTableName"]: "dependency"},
        token_chars=token_chars,
    )
    if stack.app is None:
        msg = "the stack is not running"
        raise RuntimeError(msg)
    for service in TRACKER_SERVICES:
        # The clients the stack's app hands its stores and flows.
        counter.attach(stack.app.clients.get(service), TRACKER)
    invocations = Invocations(keep_records=keep_records)
    counter.listener = invocations.note
    for pump in stack.pumps.values():
        for value in vars(pump).values():
            if isinstance(value, BaseClient):
                counter.attach(value, PLUMBING)
        function = str(getattr(pump, "function_name", pump.name))
        pump.handler = invocations.wrap(function, pump.handler)
    return Instruments(calls=counter, invocations=invocations)
