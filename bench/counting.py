"""Counting AWS calls (botocore event hooks) and Lambda invocations (pump handlers).

Two kinds of callers are told apart by the client they use:

* **tracker**: the clients the handlers use (``dependency_tracker.clients.client``,
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
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from botocore.client import BaseClient

from bench.capacity import item_size, read_units, write_units
from dependency_tracker import clients

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from dependency_tracker.local import LocalStack
    from dependency_tracker.local.pumps import Handler

TRACKER = "tracker"
PLUMBING = "plumbing"
# Every service a handler may call through dependency_tracker.clients.client.
TRACKER_SERVICES = ("dynamodb", "stepfunctions", "s3", "sqs")

# (category, service, operation, table kind or "")
Key = tuple[str, str, str, str]


@dataclass
class CallStats:
    """Calls of one kind: how many, the time spent in them, how many came back empty."""

    count: int = 0
    seconds: float = 0.0
    empty: int = 0
    empty_seconds: float = 0.0
    items: int = 0  # messages or records returned by polling calls


@dataclass
class Capacity:
    """DynamoDB request units the counted calls would consume in AWS, by table kind."""

    write_units: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    read_units: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    # UpdateItems that returned no item: sized afterwards from the stored row.
    deferred_updates: list[tuple[str, str, str]] = field(default_factory=list)
    query_scanned: dict[str, int] = field(default_factory=lambda: defaultdict(int))


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
            name = params.get("TableName") or next(iter(params.get("RequestItems", {})), "")
            table = self._tables.get(str(name), "other")
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

    def _size(self, key: Key, params: dict[str, Any], parsed: dict[str, Any]) -> None:
        """Add the request units of one DynamoDB call (lock held)."""
        category, _, operation, table = key
        capacity = self._capacity[category]
        tokens = self._token_chars
        if operation == "PutItem":
            size = item_size(params.get("Item", {}), token_chars=tokens)
            capacity.write_units[table] += write_units(size)
        elif operation == "UpdateItem":
            new = parsed.get("Attributes")
            if new and params.get("ReturnValues") == "ALL_NEW":
                capacity.write_units[table] += write_units(item_size(new, token_chars=tokens))
            else:
                key_json = json.dumps(params.get("Key", {}), sort_keys=True)
                capacity.deferred_updates.append((table, str(params.get("TableName")), key_json))
        elif operation == "GetItem":
            size = item_size(parsed.get("Item", {}), token_chars=tokens)
            consistent = bool(params.get("ConsistentRead"))
            capacity.read_units[table] += read_units(size, consistent=consistent)
        elif operation == "Query":
            capacity.query_scanned[table] += int(parsed.get("ScannedCount", 0))
            capacity.read_units[table] += 0.0  # sized later from the rows' mean size
        elif operation == "BatchGetItem":
            for items in parsed.get("Responses", {}).values():
                for item in items:
                    size = item_size(item, token_chars=tokens)
                    capacity.read_units[table] += read_units(size, consistent=True)


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


class Invocations:
    """Wraps the pumps' handlers to count Lambda invocations and their records."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stats: dict[str, InvocationStats] = defaultdict(InvocationStats)
        self.in_flight = 0
        self.last_end = time.perf_counter()
        self.delivered: set[str] = set()  # execution ARNs whose status change was delivered

    def wrap(self, function: str, handler: Handler) -> Handler:
        """``handler``, counted under ``function``."""

        def invoke(event: dict[str, Any], context: Any) -> Any:
            with self._lock:
                self.in_flight += 1
            start = time.perf_counter()
            try:
                return handler(event, context)
            finally:
                elapsed = time.perf_counter() - start
                records = len(event.get("Records", ())) or 1
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

        return invoke

    def drain(self) -> dict[str, InvocationStats]:
        """Invocations since the last drain; starts a new window."""
        with self._lock:
            stats = dict(self._stats)
            self._stats = defaultdict(InvocationStats)
        return stats


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


def instrument(stack: LocalStack, *, token_chars: int | None) -> Instruments:
    """Attach the hooks to a running stack's tracker clients and pumps."""
    outputs = stack.outputs
    counter = CallCounter(
        tables={outputs["StateTableName"]: "state", outputs["DependencyTableName"]: "dependency"},
        token_chars=token_chars,
    )
    for service in TRACKER_SERVICES:
        # The same cached clients the flows get from clients.client(service).
        counter.attach(clients.client(service), TRACKER)
    invocations = Invocations()
    for pump in stack.pumps.values():
        for value in vars(pump).values():
            if isinstance(value, BaseClient):
                counter.attach(value, PLUMBING)
        function = str(getattr(pump, "function_name", pump.name))
        pump.handler = invocations.wrap(function, pump.handler)
    return Instruments(calls=counter, invocations=invocations)
