"""Event pumps: stand-ins for Lambda event sources and EventBridge, for local mode.

Each pump reads one source, shapes what it read into the real event
(:mod:`dependency_tracker_local.events`), hands it to the same handler Lambda
runs, and applies the source's retry semantics to the handler's answer. No pump
looks inside a payload or decides anything about one: that is the handlers' job.

``pump_once()`` does one round and returns how much it delivered, so tests can
drive a pump step by step; :class:`~dependency_tracker_local.runner.PumpRunner`
runs them in threads.

Each pump also plays Lambda's part in the platform model
(:mod:`dependency_tracker_local.platform`, on unless ``DEPTRACK_PLATFORM=0``): every
invocation runs in a chain's lineage, and the SQS pump stops a record whose chain
would invoke its function a 17th time, and holds the trigger's maximum concurrency.
Every invocation is bounded by its function's timeout
(:mod:`dependency_tracker_local.timeouts`): one that runs past it fails as Lambda fails
it, the handler's response discarded.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from botocore.exceptions import ClientError

from dependency_tracker_local.events import sqs_event, status_change_event, stream_record
from dependency_tracker_local.filters import CALLBACK_STREAM_FILTER, matches
from dependency_tracker_local.platform import PlatformModel, default_model, invocation
from dependency_tracker_local.timeouts import FunctionTimedOutError, FunctionTimeouts, invoke

Handler = Callable[[dict[str, Any], Any], Any]
_log = logging.getLogger(__name__)


class Pump(Protocol):
    """Something that delivers events when asked.

    A pump may also define ``rest_limit() -> float | None``: the longest the
    runner may leave it idle now (None: as long as the runner likes).
    """

    name: str

    def pump_once(self) -> int:
        """Deliver what is available now; return how many events or records."""
        ...


def _failed_ids(response: Any) -> set[str]:
    if not isinstance(response, dict):
        return set()
    return {str(item["itemIdentifier"]) for item in response.get("batchItemFailures", [])}


def _timeouts(platform: PlatformModel | None) -> FunctionTimeouts | None:
    """The timeouts that bound a pump's invocations (none with the model off)."""
    return None if platform is None else platform.timeouts


def _new_chain(
    platform: PlatformModel | None, function: str
) -> contextlib.AbstractContextManager[None]:
    """An invocation by a source outside Lambda's chains (EventBridge, a stream): a new one."""
    return contextlib.nullcontext() if platform is None else invocation(platform.start(function))


@dataclass
class SqsPump:
    """SQS event source mapping: batches of up to 10, partial batch failures.

    A failed record is not deleted: it becomes visible again after the
    queue's visibility timeout and, past ``maxReceiveCount``, SQS moves it to
    the DLQ (the queue's redrive policy), exactly as with Lambda.

    With ``platform`` (the default unless ``DEPTRACK_PLATFORM=0``) a record
    whose chain already invoked ``function_name`` 16 times is not delivered and
    not deleted, so the redrive policy takes it to the DLQ (Lambda's recursive
    loop detection); the handler runs in the batch's lineage. With
    ``maximum_concurrency`` (the trigger's ``ScalingConfig.MaximumConcurrency``)
    no more than that many rounds run at once: one more finds the mapping at
    its limit and receives nothing, leaving the messages on the queue. An
    invocation past its function's timeout deletes nothing: the whole batch
    returns after the visibility timeout, as from a crash.
    """

    sqs: Any
    queue_url: str
    queue_arn: str
    handler: Handler
    region: str
    function_name: str = "process"
    batch_size: int = 10
    name: str = "sqs"
    platform: PlatformModel | None = field(default_factory=default_model)
    maximum_concurrency: int | None = None
    peak_concurrency: int = 0
    _running: int = 0
    _slots: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def pump_once(self) -> int:
        """Receive one batch, invoke the handler, delete what succeeded."""
        if not self._enter():
            return 0
        try:
            return self._round()
        finally:
            with self._slots:
                self._running -= 1

    def _enter(self) -> bool:
        """Take a concurrency slot; False when the trigger is at its maximum."""
        with self._slots:
            if self.maximum_concurrency is not None and self._running >= self.maximum_concurrency:
                return False
            self._running += 1
            self.peak_concurrency = max(self.peak_concurrency, self._running)
            return True

    def _round(self) -> int:
        received = self.sqs.receive_message(
            QueueUrl=self.queue_url,
            MaxNumberOfMessages=self.batch_size,
            AttributeNames=["All"],
            MessageAttributeNames=["All"],
            WaitTimeSeconds=0,
        ).get("Messages", [])
        if not received:
            return 0
        admitted = received
        chain: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
        if self.platform is not None:
            admitted, lineage = self.platform.admit(self.function_name, received)
            chain = invocation(lineage)
        if not admitted:  # every record stopped: left on the queue for its redrive policy
            return len(received)
        event = sqs_event(admitted, queue_arn=self.queue_arn, region=self.region)
        try:
            with chain:
                response = invoke(_timeouts(self.platform), self.function_name, self.handler, event)
            failed = _failed_ids(response)
        except FunctionTimedOutError:  # logged by the model; the whole batch returns
            return len(received)
        except Exception:  # noqa: BLE001  (a crashed invocation fails the whole batch, as in Lambda)
            _log.exception("%s handler crashed; the batch will be redelivered", self.function_name)
            return len(received)
        done = [m for m in admitted if m["MessageId"] not in failed]
        if done:
            self.sqs.delete_message_batch(
                QueueUrl=self.queue_url,
                Entries=[
                    {"Id": str(index), "ReceiptHandle": m["ReceiptHandle"]}
                    for index, m in enumerate(done)
                ],
            )
        return len(received)


@dataclass
class ExecutionPump:
    """EventBridge rule on "Step Functions Execution Status Change" for ``{prefix}-*``.

    moto emits no such events, so the pump watches the executions of every
    state machine named ``{prefix}-*`` (including ones created later) and
    delivers each stopped execution once. A handler error is retried
    ``retry_attempts`` times, then the event goes to ``dead_letters``.

    A round reads only what changed: the executions started since the last
    round (``ListExecutions`` is newest first: pages are read until one holds
    nothing new) and which of those seen running still run (``statusFilter``
    ``RUNNING``), not every execution ever started, so a round costs about the
    same at 10 executions or 10,000. The list of state machines is read again
    only every ``machine_refresh_seconds``: one created meanwhile is picked up
    then, with every execution it started. For ``watch_seconds`` after it first
    sees an execution running, the pump asks the runner not to rest long
    (``rest_limit``): most executions end soon, and nothing else wakes it then.
    """

    sfn: Any
    handler: Handler
    prefix: str
    region: str
    account: str
    function_name: str = "update-state"
    retry_attempts: int = 3
    name: str = "executions"
    platform: PlatformModel | None = field(default_factory=default_model)
    dead_letters: list[dict[str, Any]] = field(default_factory=list)
    machine_refresh_seconds: float = 1.0
    watch_seconds: float = 3.0
    clock: Callable[[], float] = time.monotonic
    _young: dict[str, float] = field(default_factory=dict)
    _machines: list[str] | None = None
    _machines_listed_at: float = 0.0
    _delivered: set[str] = field(default_factory=set)
    _failures: dict[str, int] = field(default_factory=dict)
    _seen: set[str] = field(default_factory=set)
    _running: dict[str, set[str]] = field(default_factory=dict)

    def pump_once(self) -> int:
        """Deliver the status change of every execution that stopped since last time."""
        delivered = 0
        for machine in self._managed_machines():
            try:
                stopped = self._stopped(machine)
            except ClientError as error:
                if error.response.get("Error", {}).get("Code") != "StateMachineDoesNotExist":
                    raise
                self._machines = None  # deleted since the list was read: list them again
                continue
            for arn in stopped:
                described = self.sfn.describe_execution(executionArn=arn)
                if described["status"] == "RUNNING":  # listed as ended a moment too soon
                    self._running.setdefault(machine, set()).add(arn)
                    continue
                event = status_change_event(described, region=self.region, account=self.account)
                self._deliver(arn, event)
                delivered += 1
        return delivered

    def _stopped(self, machine_arn: str) -> list[str]:
        """Executions of the machine that stopped and are not delivered yet (failed ones too)."""
        running = self._running.setdefault(machine_arn, set())
        name = machine_arn.split(":")[6]
        stopped = [arn for arn in self._failures if arn.split(":")[6] == name]
        for execution in self._started_since(machine_arn):
            if execution["status"] == "RUNNING":
                running.add(execution["executionArn"])
                self._young[execution["executionArn"]] = self.clock()
            else:
                stopped.append(execution["executionArn"])
        if running:
            still = {e["executionArn"] for e in self._executions(machine_arn, "RUNNING")}
            ended = running - still
            running -= ended
            for arn in ended:
                self._young.pop(arn, None)
            stopped.extend(sorted(ended))
        return [arn for arn in dict.fromkeys(stopped) if arn not in self._delivered]

    def rest_limit(self) -> float | None:
        """No long rest while an execution it saw start recently still runs."""
        now = self.clock()
        self._young = {
            arn: seen for arn, seen in self._young.items() if now - seen < self.watch_seconds
        }
        return 0.0 if self._young else None

    def _started_since(self, machine_arn: str) -> list[dict[str, Any]]:
        """Executions not listed before, newest first.

        Pages are read until one holds nothing new: a page's worth of margin for
        an execution whose start time sorts it below one already listed.
        """
        found: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            more = {"nextToken": token} if token else {}
            page = self.sfn.list_executions(stateMachineArn=machine_arn, maxResults=100, **more)
            fresh = [e for e in page["executions"] if e["executionArn"] not in self._seen]
            self._seen.update(e["executionArn"] for e in fresh)
            found.extend(fresh)
            token = page.get("nextToken")
            if not fresh or token is None:
                return found

    def _deliver(self, arn: str, event: dict[str, Any]) -> None:
        try:
            with _new_chain(self.platform, self.function_name):
                invoke(_timeouts(self.platform), self.function_name, self.handler, event)
        except Exception as exc:  # noqa: BLE001  (EventBridge retries any failed invocation)
            attempts = self._failures.get(arn, 0) + 1
            self._failures[arn] = attempts
            if not isinstance(exc, FunctionTimedOutError):  # a timeout is logged by the model
                _log.exception(
                    "%s failed (%d/%d)", self.function_name, attempts, self.retry_attempts
                )
            if attempts <= self.retry_attempts:
                return
            self.dead_letters.append(event)
        self._delivered.add(arn)
        self._failures.pop(arn, None)

    def _managed_machines(self) -> list[str]:
        """The managed state machines, listed again once the last list is old."""
        now = self.clock()
        if self._machines is None or now - self._machines_listed_at >= self.machine_refresh_seconds:
            self._machines = self._list_machines()
            self._machines_listed_at = now
        return self._machines

    def _list_machines(self) -> list[str]:
        arns: list[str] = []
        for page in self.sfn.get_paginator("list_state_machines").paginate():
            # Express executions emit no status-change events on AWS (they
            # report themselves), so the pump does not invent any for them.
            arns.extend(
                m["stateMachineArn"]
                for m in page["stateMachines"]
                if m["name"].startswith(f"{self.prefix}-") and m.get("type") != "EXPRESS"
            )
        return arns

    def _executions(self, machine_arn: str, status: str) -> list[dict[str, Any]]:
        executions: list[dict[str, Any]] = []
        pages = self.sfn.get_paginator("list_executions").paginate(
            stateMachineArn=machine_arn, statusFilter=status
        )
        for page in pages:
            executions.extend(page["executions"])
        return executions


@dataclass
class StreamPump:
    """DynamoDB stream event source mapping with the callback function's filter.

    Records are delivered in order per shard, in batches, after the same
    ``FilterCriteria`` the template declares. On a partial failure the batch
    is retried from the first failed record (Lambda's checkpoint behaviour);
    after ``max_retries`` the failed record goes to ``dead_letters``, like the
    on-failure destination.

    The shard list is described again only when a shard ends (its children
    appear then) or every ``shard_refresh_seconds``, not every round: moto's
    stream is one shard that never splits.
    """

    streams: Any
    stream_arn: str
    handler: Handler
    region: str
    filter_pattern: dict[str, Any] = field(default_factory=lambda: CALLBACK_STREAM_FILTER)
    function_name: str = "callback"
    batch_size: int = 100
    max_retries: int = 3
    name: str = "stream"
    platform: PlatformModel | None = field(default_factory=default_model)
    dead_letters: list[dict[str, Any]] = field(default_factory=list)
    shard_refresh_seconds: float = 30.0
    clock: Callable[[], float] = time.monotonic
    _shard_ids: list[str] | None = None
    _shards_listed_at: float = 0.0
    _iterators: dict[str, str | None] = field(default_factory=dict)
    _pending: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    _retries: dict[str, int] = field(default_factory=dict)

    def pump_once(self) -> int:
        """Read new records of every shard and deliver the ones the filter passes."""
        delivered = 0
        for shard_id in self._shards():
            pending = self._pending.setdefault(shard_id, [])
            pending.extend(self._read(shard_id))
            while pending:
                batch = pending[: self.batch_size]
                failed_at = self._invoke(batch)
                if failed_at is None:
                    delivered += len(batch)
                    del pending[: len(batch)]
                    self._retries.pop(shard_id, None)
                    continue
                delivered += failed_at
                del pending[:failed_at]
                retries = self._retries.get(shard_id, 0) + 1
                self._retries[shard_id] = retries
                if retries > self.max_retries:
                    self.dead_letters.append(pending.pop(0))
                    self._retries.pop(shard_id, None)
                break  # retry the rest on the next round, in order
        return delivered

    def rest_limit(self) -> float | None:
        """No long rest while a batch waits for its retry: retries keep their pace."""
        return 0.0 if any(self._pending.values()) else None

    def _invoke(self, batch: list[dict[str, Any]]) -> int | None:
        """Index of the first failed record, or None if the whole batch succeeded."""
        try:
            with _new_chain(self.platform, self.function_name):
                response = invoke(
                    _timeouts(self.platform), self.function_name, self.handler, {"Records": batch}
                )
        except FunctionTimedOutError:  # logged by the model; the whole batch is retried
            return 0
        except Exception:  # noqa: BLE001  (a crashed invocation retries the whole batch)
            _log.exception("%s handler crashed; retrying the batch", self.function_name)
            return 0
        failed = _failed_ids(response)
        for index, record in enumerate(batch):
            if record["dynamodb"]["SequenceNumber"] in failed:
                return index
        return None

    def _shards(self) -> list[str]:
        """The stream's shards, described again once a shard ended or the list is old."""
        now = self.clock()
        if self._shard_ids is None or now - self._shards_listed_at >= self.shard_refresh_seconds:
            description = self.streams.describe_stream(StreamArn=self.stream_arn)
            shards = [shard["ShardId"] for shard in description["StreamDescription"]["Shards"]]
            # No shard yet is not cached: the first one is read as soon as it appears.
            self._shard_ids = shards or None
            self._shards_listed_at = now
            return shards
        return self._shard_ids

    def _read(self, shard_id: str) -> list[dict[str, Any]]:
        if shard_id not in self._iterators:
            self._iterators[shard_id] = self.streams.get_shard_iterator(
                StreamArn=self.stream_arn, ShardId=shard_id, ShardIteratorType="TRIM_HORIZON"
            )["ShardIterator"]
        iterator = self._iterators[shard_id]
        if iterator is None:  # the shard is closed and fully read
            return []
        response = self.streams.get_records(ShardIterator=iterator)
        self._iterators[shard_id] = response.get("NextShardIterator")
        if self._iterators[shard_id] is None:  # closed: its children are in the next description
            self._shard_ids = None
        shaped = (
            stream_record(record, stream_arn=self.stream_arn, region=self.region)
            for record in response.get("Records", [])
        )
        return [record for record in shaped if matches(self.filter_pattern, record)]


def scheduled_event(*, rule_arn: str, region: str, account: str) -> dict[str, Any]:
    """The event an EventBridge schedule (``rate(...)``) invokes its target with."""
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": account,
        "time": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": region,
        "resources": [rule_arn],
        "detail": {},
    }


@dataclass
class SchedulePump:
    """An EventBridge schedule: invokes its function every ``interval`` seconds.

    The first invocation is one interval after the first round, as with a
    ``rate()`` rule. A failed invocation is logged and counted; the next tick
    runs the function again (Lambda's own retries of an asynchronous
    invocation are not modelled: a sweep that failed is simply the next sweep).
    An invocation past its function's timeout is such a failure.
    """

    handler: Handler
    interval: float
    region: str
    account: str
    function_name: str = "sweeper"
    # Its timeout when the model has none for it (the template's, 120 s).
    timeout_seconds: float = 120
    name: str = "sweeper"
    # The rule's constant Input: EventBridge sends it instead of the scheduled event.
    input: dict[str, Any] | None = None
    clock: Callable[[], float] = time.monotonic
    platform: PlatformModel | None = field(default_factory=default_model)
    invocations: int = 0
    failures: int = 0
    _next: float | None = None

    @property
    def rule_arn(self) -> str:
        """ARN of the schedule rule the event names."""
        return f"arn:aws:events:{self.region}:{self.account}:rule/{self.function_name}-schedule"

    def pump_once(self) -> int:
        """Invoke the function if its tick is due; 1 if it was invoked."""
        now = self.clock()
        if self._next is None:
            self._next = now + self.interval
        if now < self._next:
            return 0
        self._next = now + self.interval
        try:
            self.invoke()
        except FunctionTimedOutError:  # logged by the model
            self.failures += 1
        except Exception:  # noqa: BLE001  (a failed tick must not stop the schedule)
            self.failures += 1
            _log.exception("%s failed; the next tick runs it again", self.function_name)
        return 1

    def rest_limit(self) -> float | None:
        """Seconds to the next tick, so a resting runner does not make it late."""
        return None if self._next is None else max(0.0, self._next - self.clock())

    def invoke(self) -> Any:
        """Invoke the function once now, as a tick would; its response.

        Raises:
            FunctionTimedOutError: It ran past its timeout (the model's, else
                ``timeout_seconds``); any error of the handler.
        """
        self.invocations += 1
        event = (
            dict(self.input)
            if self.input is not None
            else scheduled_event(rule_arn=self.rule_arn, region=self.region, account=self.account)
        )
        with _new_chain(self.platform, self.function_name):
            return invoke(
                _timeouts(self.platform),
                self.function_name,
                self.handler,
                event,
                fallback=self.timeout_seconds,
            )
