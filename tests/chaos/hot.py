"""A hot partition: many real parents wait on one payload, and all of them resume once.

The parents are real Step Functions executions on moto (the one-task parent of
:func:`tests.harness.parent_definition`: ``sqs:sendMessage.waitForTaskToken``,
about three moto threads each, where a ``wait-for-dependencies`` Map would hold
~18). They all send the same payload with their own task token to the process
queue. The pumps of :class:`tests.harness.Pumps` (real handlers, real event
shapes) are driven one phase at a time, so every phase is timed on its own:

* **register**: the SQS pump feeds the process handler until the queue is empty:
  one waiter row per parent, one child execution for all of them;
* **resolve**: the child has finished; the execution pump delivers its status
  change and update-state resolves every waiter (``DependencyTable.resolve_all``);
* **callbacks**: the stream pump feeds the callback handler until every waiter row
  is notified, and every parent told (``SendTaskSuccess``) has finished.

Nothing in the run is random: one payload, parents named in order, each phase
driven to completion before the next. Thread scheduling only moves the timings
and how many ``UpdateItem`` calls overlap, which is checked against the bound.

Probes on the handlers' own boto3 clients (botocore events, no wrapper) count
update-state's ``Query`` pages on the dependency table and the ``UpdateItem``
calls in flight at once, and record every ``SendTask*`` with its token.

moto's task tokens are 36 characters where AWS's run to hundreds (up to 2,048),
so moto fits several times more waiter rows into DynamoDB's 1 MB ``Query`` page
than AWS does: a hot partition that spans pages on AWS fits in one locally. The
run therefore shrinks moto's page (``page_bytes``, :func:`moto_query_page`) so
the waiters span several pages, as they would on AWS.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dependency_tracker.core import clients
from dependency_tracker.core.enums import PayloadState
from dependency_tracker.table.dependency_table import DEFAULT_RESOLVE_CONCURRENCY
from dependency_tracker.table.prefixes import PARENT_LINK_PARTITION_PREFIX
from tests.conftest import ROLE_ARN, Aws, payload, payload_id
from tests.harness import Pumps, managed_running, parent_definition, queue_empty

if TYPE_CHECKING:
    from collections.abc import Callable

    from dependency_tracker.table.items import WaiterItem

HOT_PARENT = "hot-parent"
HOT_ITEM = "hot-item"
HOT_WORKFLOW = "pass"
QUIET_ROUNDS = 10  # empty stream rounds (of up to 1,000 records each) that end the wait


@dataclass
class QueryPage:
    """One ``Query`` call on the dependency table, as DynamoDB answered it."""

    scanned: int
    returned: int
    more: bool  # a LastEvaluatedKey came back


@dataclass
class ResolveProbe:
    """Counts the dependency table's ``Query`` pages and concurrent ``UpdateItem`` calls.

    ``latency`` (seconds) holds each counted ``UpdateItem`` in flight that much longer,
    off the GIL, as the network does on AWS. moto answers in-process and under the GIL,
    so without it even an unbounded pool rarely has more than a few calls in flight.
    """

    table: str
    latency: float = 0.0
    active: bool = False
    pages: list[QueryPage] = field(default_factory=list)
    updates: int = 0
    updates_refused: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def attach(self, client: Any) -> None:
        events = client.meta.events
        for operation in ("Query", "UpdateItem"):
            events.register(f"before-parameter-build.dynamodb.{operation}", self._tag)
        events.register("before-call.dynamodb.UpdateItem", self._update_started)
        events.register("after-call.dynamodb.UpdateItem", self._update_ended)
        events.register("after-call-error.dynamodb.UpdateItem", self._update_failed)
        events.register("after-call.dynamodb.Query", self._queried)

    def _ours(self, context: dict[str, Any]) -> bool:
        return self.active and context.get("hot_table") == self.table

    def _tag(self, params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        # Only this event sees the API parameters; the later ones see the context.
        context["hot_table"] = params.get("TableName")
        # Update-state also reads the ended execution's parent links (one Query of another
        # partition, joins/parent_links.py): not a page of the waiters it resolves.
        partition = params.get("ExpressionAttributeValues", {}).get(":pid", {}).get("S", "")
        context["hot_link"] = str(partition).startswith(PARENT_LINK_PARTITION_PREFIX)

    def _update_started(self, context: dict[str, Any], **_: Any) -> None:
        if not self._ours(context):
            return
        with self._lock:
            context["hot_counted"] = True
            self.updates += 1
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        if self.latency:
            time.sleep(self.latency)

    def _update_ended(self, context: dict[str, Any], parsed: dict[str, Any], **_: Any) -> None:
        if context.pop("hot_counted", False):
            with self._lock:
                self.in_flight -= 1
                self.updates_refused += "Error" in parsed

    def _update_failed(self, context: dict[str, Any], **_: Any) -> None:
        if context.pop("hot_counted", False):
            with self._lock:
                self.in_flight -= 1
                self.updates_refused += 1

    def _queried(self, context: dict[str, Any], parsed: dict[str, Any], **_: Any) -> None:
        if not self._ours(context) or context.get("hot_link") or "Error" in parsed:
            return
        page = QueryPage(
            scanned=int(parsed.get("ScannedCount", 0)),
            returned=int(parsed.get("Count", 0)),
            more=bool(parsed.get("LastEvaluatedKey")),
        )
        with self._lock:
            self.pages.append(page)


@dataclass
class Send:
    """One ``SendTaskSuccess``/``SendTaskFailure`` the callback handler made."""

    token: str
    operation: str
    output: str | None
    status: int = 0
    code: str | None = None


@dataclass
class SendProbe:
    """Records every ``SendTask*`` on the handlers' Step Functions client, and its answer."""

    sends: list[Send] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def attach(self, client: Any) -> None:
        events = client.meta.events
        for operation in ("SendTaskSuccess", "SendTaskFailure"):
            events.register(f"before-parameter-build.sfn.{operation}", self._started)
            events.register(f"after-call.sfn.{operation}", self._answered)

    def detach(self, client: Any) -> None:
        events = client.meta.events
        for operation in ("SendTaskSuccess", "SendTaskFailure"):
            events.unregister(f"before-parameter-build.sfn.{operation}", self._started)
            events.unregister(f"after-call.sfn.{operation}", self._answered)

    def _started(
        self, params: dict[str, Any], model: Any, context: dict[str, Any], **_: Any
    ) -> None:
        send = Send(
            token=str(params.get("taskToken", "")),
            operation=str(model.name),
            output=params.get("output"),
        )
        context["hot_send"] = send
        with self._lock:
            self.sends.append(send)

    def _answered(
        self, http_response: Any, parsed: dict[str, Any], context: dict[str, Any], **_: Any
    ) -> None:
        send = context.get("hot_send")
        if isinstance(send, Send):
            send.status = int(http_response.status_code)
            send.code = parsed.get("Error", {}).get("Code")

    def by_token(self) -> dict[str, list[Send]]:
        grouped: dict[str, list[Send]] = {}
        for send in self.sends:
            grouped.setdefault(send.token, []).append(send)
        return grouped


@dataclass
class HotReport:
    """What one hot run measured and found."""

    parents: int
    page_bytes: int
    bound: int
    update_latency: float = 0.0
    seconds: dict[str, float] = field(default_factory=dict)
    handler_seconds: dict[str, float] = field(default_factory=dict)
    pages: list[QueryPage] = field(default_factory=list)
    max_in_flight: int = 0
    updates: int = 0
    resolved: int = 0
    sends: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def render(self) -> str:
        timings = ", ".join(f"{name}={value:.2f}s" for name, value in self.seconds.items())
        handlers = ", ".join(f"{n}={s:.2f}s" for n, s in sorted(self.handler_seconds.items()))
        scanned = sum(page.scanned for page in self.pages)
        lines = [
            (
                f"hot partition: parents={self.parents} on one payload, "
                f"query page={self.page_bytes} B, "
                f"added UpdateItem latency={self.update_latency * 1000:g} ms"
            ),
            f"times: {timings}",
            f"handler time: {handlers}",
            (
                f"update-state: {len(self.pages)} Query pages (scanned {scanned}, rows per page "
                f"{[page.scanned for page in self.pages]}), {self.updates} UpdateItem, "
                f"{self.resolved} resolved, max {self.max_in_flight} UpdateItem in flight "
                f"(bound {self.bound})"
            ),
            f"callbacks: {self.sends} SendTask* calls",
            "verdict: " + ("OK" if self.ok else f"{len(self.problems)} problem(s)"),
        ]
        lines.extend(f"    {problem}" for problem in self.problems[:20])
        return "\n".join(lines)


class HotRun:
    """``parents`` real parents on one payload, driven phase by phase on the ``aws`` account.

    Call inside :func:`moto_query_page` to make the waiters span several pages.
    """

    def __init__(
        self,
        aws: Aws,
        *,
        parents: int,
        page_bytes: int,
        parent_timeout: int,
        update_latency: float = 0.0,
    ) -> None:
        self.aws = aws
        self.parents = parents
        self.page_bytes = page_bytes
        self.parent_timeout = parent_timeout
        self.pumps = Pumps.create(aws)
        self.resolve_probe = ResolveProbe(table=aws.dependencies.table_name, latency=update_latency)
        self.send_probe = SendProbe()
        self.handler_seconds: dict[str, float] = {}
        self.failures: list[str] = []
        self.update_actions: list[Any] = []
        self.payload_id = payload_id(HOT_ITEM, HOT_WORKFLOW)

    # -------------------------------------------------------------- set-up

    def _timed(
        self, name: str, handler: Callable[[dict[str, Any], Any], Any]
    ) -> Callable[[dict[str, Any], Any], Any]:
        def invoke(event: dict[str, Any], context: Any) -> Any:
            started = time.perf_counter()
            try:
                response = handler(event, context)
            finally:
                elapsed = time.perf_counter() - started
                self.handler_seconds[name] = self.handler_seconds.get(name, 0.0) + elapsed
            if name == "update-state":
                self.update_actions.append(response)
            elif response and response.get("batchItemFailures"):
                self.failures.append(f"{name} reported {response['batchItemFailures']}")
            return response

        return invoke

    def _setup(self) -> str:
        # Probes go on the handlers' own clients (the flows build theirs from this cache).
        self.resolve_probe.attach(clients.client("dynamodb"))
        self.send_probe.attach(clients.client("stepfunctions"))
        self.pumps.sqs.handler = self._timed("process", self.pumps.sqs.handler)
        self.pumps.executions.handler = self._timed("update-state", self.pumps.executions.handler)
        self.pumps.stream.handler = self._timed("callback", self.pumps.stream.handler)
        created = self.aws.sfn.create_state_machine(
            name=HOT_PARENT,
            roleArn=ROLE_ARN,
            definition=json.dumps(parent_definition(self.aws.queue_url, self.parent_timeout)),
        )
        return str(created["stateMachineArn"])

    # -------------------------------------------------------------- running

    def execute(self, timeout: float) -> HotReport:
        """Run every phase; raises ``TimeoutError`` past ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        report = HotReport(
            parents=self.parents,
            page_bytes=self.page_bytes,
            bound=DEFAULT_RESOLVE_CONCURRENCY,
            update_latency=self.resolve_probe.latency,
        )
        parent_machine = self._setup()
        began = time.perf_counter()
        parents = self._start_parents(parent_machine, deadline)
        report.seconds["start_parents"] = time.perf_counter() - began

        phase = time.perf_counter()
        self._register(deadline)
        report.seconds["register"] = time.perf_counter() - phase
        child = self._child(deadline)

        phase = time.perf_counter()
        self.resolve_probe.active = True
        delivered = self.pumps.executions.pump_once()
        self.resolve_probe.active = False
        report.seconds["resolve"] = time.perf_counter() - phase

        phase = time.perf_counter()
        self._callbacks(parent_machine, deadline)
        report.seconds["callbacks"] = time.perf_counter() - phase
        report.seconds["total"] = time.perf_counter() - began

        report.handler_seconds = self.handler_seconds
        report.pages = list(self.resolve_probe.pages)
        report.max_in_flight = self.resolve_probe.max_in_flight
        report.updates = self.resolve_probe.updates
        report.resolved = self.resolve_probe.updates - self.resolve_probe.updates_refused
        report.sends = len(self.send_probe.sends)
        if delivered != 1 or self.update_actions != [{"action": "recorded"}]:
            report.problems.append(
                f"update-state: {delivered} status changes, answered {self.update_actions}"
            )
        report.problems.extend(self.failures)
        report.problems.extend(self._check(parents, child, report))
        return report

    def _start_parents(self, machine: str, deadline: float) -> list[str]:
        body = payload(HOT_ITEM, HOT_WORKFLOW)
        arns = [
            str(
                self.aws.sfn.start_execution(
                    stateMachineArn=machine, name=f"hot-{index:04d}", input=json.dumps(body)
                )["executionArn"]
            )
            for index in range(self.parents)
        ]
        # Every parent has sent its message (and so paused) before anything is pumped.
        while self._queued() < self.parents:
            _check_deadline(deadline, "parents did not all send their message")
            time.sleep(0.05)
        return arns

    def _queued(self) -> int:
        attributes = self.aws.sqs.get_queue_attributes(
            QueueUrl=self.aws.queue_url, AttributeNames=["ApproximateNumberOfMessages"]
        )["Attributes"]
        return int(attributes["ApproximateNumberOfMessages"])

    def _register(self, deadline: float) -> None:
        while self.pumps.sqs.pump_once() or not queue_empty(self.aws):
            _check_deadline(deadline, "the process queue did not drain")

    def _child(self, deadline: float) -> str:
        """The one child execution, once it has stopped (update-state has not run yet)."""
        item = self.aws.states.get(self.payload_id)
        if item is None or item.execution_arn is None:
            msg = f"no child started for {self.payload_id}"
            raise AssertionError(msg)
        while managed_running(self.aws):
            _check_deadline(deadline, "the child did not finish")
            time.sleep(0.01)
        return item.execution_arn

    def _callbacks(self, parent_machine: str, deadline: float) -> None:
        # A GetRecords call returns at most 1,000 records, filtered ones too (the waiters'
        # INSERTs): a round that delivers nothing is not proof of the stream's end. Pump
        # until every row is notified; a record the callback never gets past (retries, then
        # dead letters) leaves a row unnotified, so stop after enough empty rounds too.
        quiet = 0
        while quiet < QUIET_ROUNDS:
            stream = self.pumps.stream
            moved = stream.pump_once() or any(stream._pending.values())
            quiet = 0 if moved else quiet + 1
            if quiet >= 2 and self._all_notified():
                break
            _check_deadline(deadline, "the callbacks did not all go out")
        # The parents that were told finish; any other one would wait for its timeout.
        told = len({send.token for send in self.send_probe.sends if send.status == 200})
        while self._running_parents(parent_machine) > self.parents - told:
            _check_deadline(deadline, "parents still running after their callbacks")
            time.sleep(0.02)

    def _all_notified(self) -> bool:
        return all(
            row.notified_at is not None for row in self.aws.dependencies.waiters(self.payload_id)
        )

    def _running_parents(self, machine: str) -> int:
        pages = self.aws.sfn.get_paginator("list_executions").paginate(
            stateMachineArn=machine, statusFilter="RUNNING"
        )
        return sum(len(page["executions"]) for page in pages)

    # ------------------------------------------------------------- checking

    def _check(self, parents: list[str], child: str, report: HotReport) -> list[str]:
        problems = self._check_resolution(report)
        child_output = json.loads(
            self.aws.sfn.describe_execution(executionArn=child).get("output") or "null"
        )
        if not isinstance(child_output, dict) or child_output.get("features") != payload(
            HOT_ITEM, HOT_WORKFLOW
        ).get("features"):
            problems.append(f"child output {child_output}")
        expected = {
            "payload_id": self.payload_id,
            "state": "SUCCEEDED",
            "execution_arn": child,
            "replayed": False,
            "result": {
                "items": [{"id": HOT_ITEM, "collection": "sentinel-2-l2a"}],
                "output": child_output,
            },
        }
        rows = {row.parent_execution: row for row in self.aws.dependencies.waiters(self.payload_id)}
        sends = self.send_probe.by_token()
        if len(rows) != self.parents or set(rows) != set(parents):
            problems.append(f"{len(rows)} waiter rows for {self.parents} parents")
        if set(sends) - {row.task_token for row in rows.values()}:
            problems.append("SendTask* for a token no waiter row holds")
        for arn in parents:
            row = rows.get(arn)
            if row is not None:
                problems.extend(self._check_parent(arn, row, sends.get(row.task_token), expected))
        state = self.aws.states.get(self.payload_id)
        if state is None or (state.state, state.executions) != (PayloadState.SUCCEEDED, [child]):
            problems.append(f"payload state {state}")
        children = self.aws.sfn.list_executions(
            stateMachineArn=self.aws.settings.state_machine_arn(HOT_WORKFLOW)
        )["executions"]
        if len(children) != 1:
            problems.append(f"{len(children)} child executions")
        problems.extend(
            f"{name} dead letters: {len(pump.dead_letters)}"
            for name, pump in (("stream", self.pumps.stream), ("events", self.pumps.executions))
            if pump.dead_letters
        )
        return problems

    def _check_parent(
        self, arn: str, row: WaiterItem, sends: list[Send] | None, expected: dict[str, Any]
    ) -> list[str]:
        """One parent: sent once and accepted, row resolved and notified, finished with it."""
        name = arn.rsplit(":", 1)[-1]
        problems: list[str] = []
        mine = sends or []
        if [(s.operation, s.status) for s in mine] != [("SendTaskSuccess", 200)]:
            problems.append(f"{name}: sends {[(s.operation, s.status, s.code) for s in mine]}")
        elif json.loads(mine[0].output or "null") != expected:
            problems.append(f"{name}: sent {mine[0].output}")
        if row.workflow_state is not PayloadState.SUCCEEDED or row.replayed:
            problems.append(f"{name}: row {row.workflow_state} replayed={row.replayed}")
        if row.notify_outcome != "SENT:SUCCEEDED" or row.notified_at is None:
            problems.append(f"{name}: row notified {row.notify_outcome}")
        described = self.aws.sfn.describe_execution(executionArn=arn)
        if described["status"] != "SUCCEEDED":
            problems.append(f"{name}: {described['status']} {described.get('error')}")
        elif json.loads(described.get("output") or "null") != expected:
            problems.append(f"{name}: output {described.get('output')}")
        return problems

    def _check_resolution(self, report: HotReport) -> list[str]:
        problems: list[str] = []
        pages = report.pages
        if len(pages) < 2:
            problems.append(f"update-state read the waiters in {len(pages)} Query page(s)")
        if pages and (pages[-1].more or not all(page.more for page in pages[:-1])):
            problems.append("Query pages did not follow LastEvaluatedKey to the end")
        if sum(page.scanned for page in pages) < self.parents:
            problems.append(f"Query pages scanned {sum(p.scanned for p in pages)} rows")
        if report.resolved != self.parents or report.updates != self.parents:
            problems.append(f"{report.updates} UpdateItem, {report.resolved} resolved")
        if not 1 < report.max_in_flight <= report.bound:
            problems.append(
                f"{report.max_in_flight} UpdateItem in flight at once (bound {report.bound})"
            )
        return problems


def _check_deadline(deadline: float, what: str) -> None:
    if time.monotonic() > deadline:
        msg = f"hot run: {what} before the deadline"
        raise TimeoutError(msg)
