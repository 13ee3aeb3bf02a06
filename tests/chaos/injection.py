"""The chaos harness's own faults around the deliveries, and their bookkeeping.

:class:`~tests.chaos.faults.FaultInjector` fails the handlers' AWS calls; the faults
here are the event sources' and the platform's: a delivery made twice
(``duplicate_delivery``), a crashed invocation turned into a failed one, an Express
run's status report lost (``express_report_lost``), a status-change event held back
until a lease recovered its run (``late_event``) or delivered again once the run is
quiet (``stale_redelivery``), and the sweeper that answers a callback storm's
discarded records. A lost report or a held event brings a later parent, whose lease
check must recover the run.
"""

from __future__ import annotations

import copy
import json
import random
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dependency_tracker import app
from dependency_tracker.core import naming
from dependency_tracker.handlers import sweeper as sweeper_handler
from dependency_tracker.payloads.model import ProcessPayload
from dependency_tracker_local.context import LocalContext
from dependency_tracker_local.pumps import scheduled_event
from tests.chaos.faults import Crash, running
from tests.chaos.workload import FAILURE_ERRORS, Parent, random_token
from tests.conftest import ACCOUNT, REGION

if TYPE_CHECKING:
    from collections.abc import Callable

    from dependency_tracker.table.items import PayloadStateItem
    from tests.chaos.faults import FakeParents, FaultInjector
    from tests.chaos.workload import Records, Workload
    from tests.conftest import Aws
    from tests.harness import Pumps

    Handler = Callable[[dict[str, Any], Any], Any]

DEFAULT_RATES = {
    "throttle": 0.02,
    "server": 0.02,
    "conditional_race": 0.04,
    "crash": 0.04,
    "task_timed_out": 0.02,
    "invalid_token": 0.01,
    # Issue 15's cases. Per Express StartExecution of the tracker:
    "express_twin": 0.5,
    # per SendTask* call (a storm lasts until the stream discards the record):
    "callback_storm": 0.01,
    # drawn by the harness: per Express status report,
    "express_report_lost": 0.3,
    # per SUCCEEDED Standard status-change event (held until a lease recovered the run),
    "late_event": 0.1,
    # per status-change event delivered (delivered again once the run is quiet).
    "stale_redelivery": 0.1,
    # Per join parent of more than one chunk (at most one of the two each):
    "join_id_reuse": 0.25,
    "manifest_overwrite": 0.25,
    # Per parent (not in a ring, no join fault): its send is throttled once, before or after
    # SQS took the message; its Task's Retry sends again with a new token.
    "parent_send_throttled": 0.15,
    # Per moment of a round (three a round; at most one per 8 parents each, at least 2):
    # an operator releases a live parent, or reruns a failed payload (tests/chaos/operator_faults).
    "operator_release": 0.04,
    "operator_rerun": 0.04,
}
MAX_RECEIVE_COUNT = 20
# Later parents sent again, per lost-report payload, while a takeover is left CLAIMED.
MORE_PARENTS = 8
# The sweeper sends terminal un-notified rows older than this.
CHAOS_SWEEPER_MIN_AGE_SECONDS = 1


@dataclass
class Held:
    """A status-change event held back (``late_event``) until a lease has recovered its run."""

    event: dict[str, Any]
    payload_id: str
    attempt: int
    released: bool = False
    recovered_first: bool = False
    action: str | None = None
    tries: int = 0


@dataclass
class Redelivery:
    """An event delivered again late (``stale_redelivery``), and what it changed."""

    event: dict[str, Any]
    payload_id: str
    action: str | None = None
    changed: str | None = None
    tries: int = 0


def draw(injector: FaultInjector, seed: int, kind: str, key: str) -> bool:
    """One harness fault of ``kind`` for ``key`` (seeded; only while faults are on)."""
    rate = injector.rates.get(kind, 0.0)
    if not injector.enabled or rate <= 0:
        return False
    hit = random.Random(f"{seed}|{kind}|{key}").random() < rate
    if hit:
        injector.injected[kind] += 1
    return hit


def reported_payload(body: str) -> str:
    """The payload id an Express run's status report is about (its input)."""
    report = json.loads(body)["status_report"]
    return ProcessPayload.model_validate_json(report["input"]).id


def final(state: PayloadStateItem | None) -> tuple[Any, ...] | None:
    """What a status change may change on a state item."""
    if state is None:
        return None
    return (state.state, state.attempt, state.execution_arn, state.result_json, state.last_error)


class DeliveryFaults:
    """Wraps the handlers' deliveries with the harness's faults and keeps what they did."""

    def __init__(
        self,
        *,
        aws: Aws,
        workload: Workload,
        records: Records,
        injector: FaultInjector,
        fake: FakeParents,
        pumps: Pumps,
        duplicates: float,
    ) -> None:
        self.aws = aws
        self.workload = workload
        self.records = records
        self.injector = injector
        self.fake = fake
        self.pumps = pumps
        self.duplicates = duplicates
        self.seed = workload.seed
        # update-state without the held events (set by the run once it is wrapped).
        self.update_state: Handler = pumps.executions.handler
        self.lost_reports: dict[str, str] = {}  # message id -> payload id
        self.lost_runs: set[str] = set()  # execution ARNs whose every report was lost
        self._report_draws: dict[str, bool] = {}
        self.held: dict[str, Held] = {}  # execution ARN -> held event
        self._held_draws: set[str] = set()
        self.redeliveries: dict[str, Redelivery] = {}  # execution ARN -> its late repeat
        self.late: list[tuple[float, int]] = []  # (due, parent index): later parents to send
        self.late_parents: list[int] = []
        self.late_parents_enabled = True
        # Lost-report payloads -> later parents sent again because the first one's takeover
        # was itself left CLAIMED (its start failed): see more_parents.
        self._watched: dict[str, int] = {}
        self.late_parents_again = 0
        self.storms: dict[str, bool] = {}  # storm token -> its record was discarded
        self.sweeps = 0
        self.sweeper_enabled = True
        self.sweep_failures = 0
        self._last_sweep = 0.0
        self._swept_last = False

    def _draw(self, kind: str, key: str) -> bool:
        return draw(self.injector, self.seed, kind, key)

    # ------------------------------------------------------------ wrappers

    def wrap(
        self,
        name: str,
        handler: Handler,
        *,
        sqs_source: bool = False,
        between: Callable[[], None] | None = None,
    ) -> Handler:
        """``handler`` as its event source invokes it: crashes fail the invocation, some
        events are delivered twice; on the SQS source, ``between`` runs before the next
        delivery and the messages handled are recorded."""

        def once(event: dict[str, Any], context: Any) -> Any:
            self.records.invocations[name] += 1
            with running(name):
                try:
                    return handler(event, context)
                except Crash as exc:
                    # The Lambda died: the whole invocation fails, the source redelivers.
                    self.records.crashes[name] += 1
                    raise RuntimeError(f"{name} crashed: {exc}") from None

        def invoke(event: dict[str, Any], context: Any) -> Any:
            count = self.records.invocations[name] + 1
            twice = random.Random(f"{self.seed}|duplicate|{name}|{count}").random()
            try:
                if twice < self.duplicates:
                    # At-least-once: the same event is delivered twice (the first answer is lost).
                    self.injector.injected["duplicate_delivery"] += 1
                    once(event, context)
                response = once(event, context)
            finally:
                if sqs_source and between is not None:
                    # Before the next delivery, even after a crash: it may read the next chunk.
                    between()
            if sqs_source:
                self.records.seen.update(r["messageId"] for r in event["Records"])
                failed = {item["itemIdentifier"] for item in response["batchItemFailures"]}
                self.records.processed.update(
                    r["messageId"] for r in event["Records"] if r["messageId"] not in failed
                )
            return response

        return invoke

    def lose_reports(self, deliver: Handler) -> Handler:
        """``express_report_lost``: an Express run's report never reaches update-state."""

        def lose(event: dict[str, Any], context: Any) -> Any:
            kept = []
            for record in event["Records"]:
                message_id = record["messageId"]
                if message_id not in self._report_draws:
                    key = str(len(self._report_draws))
                    self._report_draws[message_id] = self._draw("express_report_lost", key)
                    if self._report_draws[message_id]:
                        pid = reported_payload(record["body"])
                        self.lost_reports[message_id] = pid
                        report = json.loads(record["body"])["status_report"]
                        self.lost_runs.add(str(report["executionArn"]))
                        self.later_parent(pid)
                        self._watched.setdefault(pid, 0)
                if not self._report_draws[message_id]:
                    kept.append(record)
            if not kept:
                return {"batchItemFailures": []}
            return deliver({**event, "Records": kept}, context)

        return lose

    def hold_events(self, deliver: Handler) -> Handler:
        """``late_event`` and ``stale_redelivery`` around the EventBridge deliveries."""

        def hold(event: dict[str, Any], context: Any) -> Any:
            detail = event.get("detail", {})
            arn = str(detail.get("executionArn", ""))
            if arn not in self._held_draws and detail.get("status") == "SUCCEEDED":
                self._held_draws.add(arn)
                if self._hold(arn, event):
                    return {"action": "held"}
            response = deliver(event, context)
            if arn not in self.redeliveries and self._draw("stale_redelivery", arn):
                pid = ProcessPayload.model_validate_json(detail["input"]).id
                self.redeliveries[arn] = Redelivery(copy.deepcopy(event), pid)
            return response

        return hold

    def _hold(self, arn: str, event: dict[str, Any]) -> bool:
        """Hold back a SUCCEEDED run's event while its attempt is live; a later parent comes."""
        pid = ProcessPayload.model_validate_json(event["detail"]["input"]).id
        state = self.aws.states.get(pid)
        if state is None or state.state.is_terminal or self.workload.item_of(pid) is None:
            return False
        if any(held.payload_id == pid for held in self.held.values()):
            return False  # one held event per payload
        attempt = naming.attempt_of(str(event["detail"]["name"]), pid)
        if attempt is None or attempt != state.attempt or not self._draw("late_event", arn):
            return False
        self.held[arn] = Held(copy.deepcopy(event), pid, attempt)
        self.later_parent(pid)
        return True

    # ------------------------------------------------------- later parents

    def later_parent(self, pid: str) -> None:
        """A parent that arrives after the lease ran out, waiting on ``pid``: the message
        whose lease check must recover the run (without one, nothing ever looks again)."""
        workload = self.workload
        item = workload.item_of(pid)
        if item is None or not self.late_parents_enabled:
            return
        index = len(workload.parents)
        rng = random.Random(f"{self.seed}|late|{index}")
        token = random_token(rng, f"AQB-chaos-{self.seed}-late{index:04d}-")
        if pid == workload.pid(item):
            parent = Parent(token, [item], None, FAILURE_ERRORS.get(workload.deps[item]))
        else:
            parent = Parent(token, [item], None, None, wait_for=pid)
        workload.parents.append(parent)
        self.fake.tokens.add(token)
        lease = app.current().settings.claim_lease_seconds
        self.late.append((time.monotonic() + lease + 1.0, index))
        self.late_parents.append(index)

    def more_parents(self) -> None:
        """A lost-report payload still live once its later parents are in: one more comes.

        The later parent's lease check takes the payload over, but if that new attempt's
        start fails (throttled, or a crash between claim and start), the attempt stays
        CLAIMED and the parent's redelivery waits (an Express claim is never started
        twice): only the next message after another lease recovers it. Up to MORE_PARENTS.
        """
        if self.late:
            return
        for pid, again in self._watched.items():
            state = self.aws.states.get(pid)
            if again < MORE_PARENTS and state is not None and not state.state.is_terminal:
                self._watched[pid] += 1
                self.late_parents_again += 1
                self.later_parent(pid)

    def send_due(self) -> int:
        """Send the later parents whose lease has run out; how many."""
        now = time.monotonic()
        due = [index for when, index in self.late if when <= now]
        self.late = [(when, index) for when, index in self.late if when > now]
        for index in due:
            self.workload.send_one(self.aws, self.records, index)
        return len(due)

    # ------------------------------------------------- held and late events

    def watch_held(self) -> None:
        """Release a held event once a lease check recorded its run (or moved past it)."""
        for arn, held in self.held.items():
            if held.released:
                continue
            state = self.aws.states.get(held.payload_id)
            if state is None:
                continue
            if state.attempt > held.attempt:
                held.action = f"a second attempt ({state.attempt}) started first"
                held.released = True
            elif state.state.is_terminal and state.execution_arn == arn:
                held.recovered_first = True
                self._release(held)

    def _release(self, held: Held) -> None:
        """Deliver the held event now, as EventBridge's retry finally does."""
        try:
            response = self.update_state(held.event, LocalContext("update-state"))
        except Exception:  # noqa: BLE001  (EventBridge retries it; so does the next round)
            held.tries += 1
            if held.tries >= MAX_RECEIVE_COUNT:
                held.released, held.action = True, "failed every delivery"
            return
        held.released, held.action = True, str(response.get("action"))

    def _redeliver(self, late: Redelivery) -> None:
        """Deliver an event again after everything newer: it must change nothing."""
        before = final(self.aws.states.get(late.payload_id))
        try:
            response = self.update_state(late.event, LocalContext("update-state"))
        except Exception:  # noqa: BLE001  (retried at the next quiet point)
            late.tries += 1
            if late.tries >= MAX_RECEIVE_COUNT:
                late.action = "failed every delivery"
            return
        late.action = str(response.get("action"))
        after = final(self.aws.states.get(late.payload_id))
        if after != before:
            late.changed = f"{before} -> {after}"

    # ------------------------------------------------------------ storms

    def watch_storms(self) -> None:
        """A storm ends when the stream discards its record; the sweeper then answers it."""
        for token in self.injector.storm:
            self.storms.setdefault(token, False)
        discarded = {
            record["dynamodb"].get("NewImage", {}).get("task_token", {}).get("S")
            for record in self.pumps.stream.dead_letters
        }
        for token in list(self.injector.storm):
            if token in discarded:
                self.injector.storm.discard(token)
                self.storms[token] = True
        due = time.monotonic() - self._last_sweep > CHAOS_SWEEPER_MIN_AGE_SECONDS / 2
        if due and self.sweeper_enabled and (self.unanswered_storms() or self.unswept()):
            self._sweep()

    def unanswered_storms(self) -> list[str]:
        """Storm tokens whose record the stream discarded and nobody answered yet."""
        return [
            token
            for token, discarded in self.storms.items()
            if discarded and token not in self.fake.sent and token not in self.fake.gone
        ]

    def unswept(self) -> list[str]:
        """Rows whose stream record was discarded (a storm's, or one whose batch failed every
        retry) still resolved and never notified: the sweeper's, as on its schedule.

        (Not only the storms' tokens nobody answered: a sweep that sent and then failed
        before its mark leaves the parent answered and the row unmarked; the next sweep
        marks it.)
        """
        left: list[str] = []
        for record in self.pumps.stream.dead_letters:
            keys = record["dynamodb"].get("Keys", {})
            item = self.aws.dynamodb.get_item(
                TableName=self.aws.dependencies.table_name, Key=keys, ConsistentRead=True
            ).get("Item")
            if item is None or "notified_at" in item:
                continue
            if item.get("workflow_state", {}).get("S", "PROCESSING") != "PROCESSING":
                left.append(str(keys["waiter_id"]["S"]))
        return left

    def _sweep(self) -> None:
        """One run of the sweeper function, as its schedule would start it."""
        self._last_sweep = time.monotonic()
        self.sweeps += 1
        self.records.invocations["sweeper"] += 1
        event = scheduled_event(
            rule_arn=f"arn:aws:events:{REGION}:{ACCOUNT}:rule/sweeper",
            region=REGION,
            account=ACCOUNT,
        )
        with running("sweeper"):
            try:
                sweeper_handler.lambda_handler(event, LocalContext("sweeper", timeout_seconds=120))
            except Crash:
                self.records.crashes["sweeper"] += 1
            except Exception:  # noqa: BLE001  (a failed sweep is simply the next sweep)
                self.sweep_failures += 1

    def finish(self) -> bool:
        """At a quiet point: the late deliveries and the last sweep. True if anything ran."""
        did = False
        for held in self.held.values():
            if not held.released:
                self._release(held)  # never recovered: EventBridge's retry delivers it anyway
                did = True
        for late in self.redeliveries.values():
            if late.action is None:
                self._redeliver(late)
                did = True
        if self.injector.storm:
            self.injector.storm.clear()  # storms pass; their records were not discarded
            did = True
        discarded = self.storms or self.pumps.stream.dead_letters
        if discarded and self.sweeper_enabled and not self._swept_last:
            self._swept_last = True
            self._sweep()
            did = True
        return did
