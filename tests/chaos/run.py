"""A seeded chaos run: parents on overlapping dependencies, faults everywhere, then invariants.

Parents are task tokens (:class:`~tests.chaos.faults.FakeParents` plays Step
Functions' side of them). Each one waits on one dependency, on a k-of-n join
over several, or (``wait_for``) on the second step a two-step payload chains
to. Dependencies succeed, fail or are invalid, and many parents share each.
A few parents (:class:`Ring`) wait on each other in a dependency cycle, naming
their ``waiter_payload_id``: of each cycle at least one wait must be refused
with ``DependencyCycle``, and the others may only wait (unless the rows prove the
cycle never stood: a "join" ring's join decided before its member's wait began).
The messages go to the process queue; the harness pumps (real handlers over
moto) run them while :class:`~tests.chaos.faults.FaultInjector` throttles,
fails, races and crashes the handlers' own AWS calls, and some deliveries are
duplicated. Redelivery follows the sources: SQS leaves a failed message for
the next receive (the queue's visibility timeout is 0) and dead-letters it
after ``maxReceiveCount``; the stream retries from the first failed record;
EventBridge retries the event.

A parent's own send may be throttled (``parent_send_throttled``): its Task's ``Retry``
sends again on a new token. Throttled before SQS took the message, nothing of the
first token reaches the tracker; after, its message is delivered and answered, and
the answer is refused (``TaskTimedOut``, the first attempt's task is closed): the
tracker must drop it as a parent gone, and the parent hears only its retry's answer.

Joins meet two faults of their own: ``join_id_reuse`` (another parent's join names
the same ``join_id`` as the owner's registration moves on to its second chunk) and
``manifest_overwrite`` (the owner's manifest is replaced, same key, once its first
chunk registered). No parent may then be answered with a member it did not name.

After the run settles, the invariants are checked (rows and parents of
dead-lettered messages exempt); if the DLQ holds anything, it is redriven with
faults off, and every invariant is checked again without exemptions.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import json
import random
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from dependency_tracker import clients, definitions, naming, settings
from dependency_tracker.handlers import callback as callback_handler
from dependency_tracker.handlers import process as process_handler
from dependency_tracker.handlers import sweeper as sweeper_handler
from dependency_tracker.handlers import update_state as update_state_handler
from dependency_tracker.keys import partition_key
from dependency_tracker.local.context import LocalContext
from dependency_tracker.local.pumps import SqsPump, scheduled_event
from dependency_tracker.models import (
    DependencyError,
    JoinItem,
    PayloadState,
    ProcessPayload,
    WaiterItem,
    edge_id_for,
    edge_partition_for,
    is_bookkeeping_item,
    join_partition_for,
    membership_id_for,
    row_from_item,
    waiter_id_for,
)
from dependency_tracker.stores.joins import JoinStore
from dependency_tracker.stores.manifest import manifest_text
from dependency_tracker.tokens import token_hash
from tests.chaos.faults import Crash, FakeParents, FaultInjector, Sent, running
from tests.conftest import (
    ACCOUNT,
    PASS_WORKFLOW,
    PREFIX,
    REGION,
    ROLE_ARN,
    Aws,
    payload,
    payload_id,
)
from tests.harness import Pumps, managed_running, queue_empty

if TYPE_CHECKING:
    from collections.abc import Callable

    from dependency_tracker.models import MemberOutcome, PayloadStateItem

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
    "parent_send_throttled": 0.1,
}
MAX_RECEIVE_COUNT = 20
# The stream's retries before it discards a record (the template's MaximumRetryAttempts).
STREAM_MAX_RETRIES = 10
# Small, so that a lease runs out within the run (Express: min(this, 600 s)).
CHAOS_CLAIM_LEASE_SECONDS = 2
# Later parents sent again, per lost-report payload, while a takeover is left CLAIMED.
MORE_PARENTS = 8
# The sweeper sends terminal un-notified rows older than this.
CHAOS_SWEEPER_MIN_AGE_SECONDS = 1
# "chain": a two-step payload (pass, then chain2): update-state publishes step 2 to the queue.
# "express"/"express_fail": the stack's Express workflow (simulate-express), which reports its
# own end on the status-report queue.
WORKFLOW_WEIGHTS = {
    "pass": 0.38,
    "chain": 0.12,
    "fail": 0.15,
    "invalid": 0.08,
    "express": 0.21,
    "express_fail": 0.06,
}
WINS = frozenset({"pass", "chain", "express"})
CHAIN_STEP = "chain2"
EXPRESS = "simulate-express"
WORKFLOW_OF = {"chain": "pass", "express": EXPRESS, "express_fail": EXPRESS}
FAILURE_ERRORS = {
    "fail": "DependencyFailed",
    "invalid": "DependencyInvalid",
    "express_fail": "DependencyFailed",
}
# Dependency cycles: this share more parents (at least one ring of each shape) wait on each
# other in rings. Shapes, by the parents in them: "pair" (a waits on b, b on a), "join" (a
# quorum-1 join whose waiter is j, over one payload w whose wait is on j), "triangle" (a on
# b on c on a) and "self" (a waits on itself). The first rings are one of each, in that
# order; the rest are drawn by weight.
CYCLE_SHARE = 0.05
RING_SIZES = {"pair": 2, "join": 2, "triangle": 3, "self": 1}
RING_WEIGHTS = {"pair": 0.4, "join": 0.2, "triangle": 0.25, "self": 0.15}
CYCLE = DependencyError.CYCLE.value
SUCCEEDED_JOIN = frozenset({"succeeded", "succeeded_gone"})  # a "join" ring's join let through
INVALID_JOIN = DependencyError.INVALID_JOIN.value
JOIN_FAULTS = ("join_id_reuse", "manifest_overwrite")
# What the refusals must say: the join_id is another parent's; the manifest changed.
IN_USE = re.compile(r"in use|already used|belongs to|owned by", re.IGNORECASE)
CHANGED = re.compile(r"chang|overwrit|modif", re.IGNORECASE)
FIRST_ATTEMPTS = "a throttled send's first token: answered, refused, recorded gone"
TOKEN_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


@dataclass
class Parent:
    """One waiting parent: its token, what it waits on, and what it must hear."""

    token: str
    members: list[str]  # dependency item ids
    quorum: int | None  # None: a single wait (Map pattern), else a join
    expected_error: str | None  # None: SendTaskSuccess
    wait_for: str | None = None  # a wait-only parent: the payload id it waits on
    ring: Ring | None = None  # a parent in a dependency cycle (checked on its own)
    position: int = 0  # ... its place in the ring: it waits as ring.ids[position]
    fault: str | None = None  # a join's own fault: one of JOIN_FAULTS
    join_id: str | None = None  # named in its join message (else the token's hash)
    manifest_url: str | None = None  # its members come from this manifest (payloads_url)

    @property
    def join_key(self) -> str:
        """The id of its join, as the tracker derives it."""
        return self.join_id or token_hash(self.token)


@dataclass(frozen=True)
class Ring:
    """Parents waiting on each other in a cycle: the parent at ``i`` waits, as ``ids[i]``,
    on ``ids[i + 1]`` (the last on ``ids[0]``). None of the ids is a payload the tracker
    runs (so each counts as live and its waits never end otherwise), except the "join"
    shape's member ``ids[1]``, which the join starts if it is let through.
    """

    index: int
    shape: str
    ids: tuple[str, ...]
    member: str | None = None  # "join": the item id of the join's one payload (ids[1])

    def waits_on(self, position: int) -> str:
        return self.ids[(position + 1) % len(self.ids)]

    def cycle_from(self, position: int) -> list[str]:
        """The cycle a refused wait at ``position`` reports: itself round to itself."""
        rotated = self.ids[position:] + self.ids[:position]
        return [*rotated, self.ids[position]]


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


@dataclass
class Intrusion:
    """``join_id_reuse``: another parent's join naming the owner's ``join_id``."""

    owner: Parent
    token: str
    members: list[str]
    message_id: str | None = None  # set once sent


@dataclass
class Overwrite:
    """``manifest_overwrite``: the owner's manifest replaced by another member list."""

    owner: Parent
    key: str
    members: list[str]  # the list written over the owner's
    done: bool = False


@dataclass
class Report:
    """What one chaos run found."""

    seed: int
    parents: int
    dependencies: int
    cycle_parents: int
    faults: dict[str, int]
    invariants: dict[str, list[str]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not any(self.invariants.values())

    def render(self) -> str:
        lines = [
            (
                f"chaos seed={self.seed} parents={self.parents} "
                f"(+{self.cycle_parents} in dependency cycles) "
                f"dependencies={self.dependencies} seconds={self.seconds:.1f}"
            ),
            "faults injected: "
            + ", ".join(f"{kind}={n}" for kind, n in self.faults.items())
            + f" (total {sum(self.faults.values())})",
            "counts: " + ", ".join(f"{k}={v}" for k, v in self.counts.items()),
        ]
        for name, problems in self.invariants.items():
            verdict = "OK" if not problems else f"VIOLATED ({len(problems)})"
            lines.append(f"invariant {name}: {verdict}")
            lines.extend(f"    {problem}" for problem in problems[:10])
        return "\n".join(lines)


EXPRESS_RUNS = "express: one run per attempt, one outcome per payload"
LOST_REPORTS = "lost Express reports: recovered by the lease, parents answered once"
LATE_EVENTS = "late events: the lease recorded the run, no second attempt, event repeated"
REDELIVERIES = "older events delivered again: stale or repeated, nothing changed"
STORMS = "callback storms: nothing dropped, each parent answered once"
NAMED_MEMBERS = "no parent answered with a member it did not name"


def _queue_arn(sqs: Any, queue_url: str) -> str:
    attributes = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])
    return str(attributes["Attributes"]["QueueArn"])


def _reported_payload(body: str) -> str:
    """The payload id an Express run's status report is about (its input)."""
    report = json.loads(body)["status_report"]
    return ProcessPayload.model_validate_json(report["input"]).id


def _final(state: PayloadStateItem | None) -> tuple[Any, ...] | None:
    """What a status change may change on a state item."""
    if state is None:
        return None
    return (state.state, state.attempt, state.execution_arn, state.result_json, state.last_error)


def random_token(rng: random.Random, prefix: str) -> str:
    return prefix + "".join(rng.choices(TOKEN_ALPHABET, k=300))


def make_parents(
    rng: random.Random,
    parents: int,
    dependencies: int,
    workflow_weights: dict[str, float] | None = None,
) -> dict[str, str]:
    """Dependency item id -> workflow."""
    chosen = WORKFLOW_WEIGHTS if workflow_weights is None else workflow_weights
    workflows = list(chosen)
    weights = list(chosen.values())
    return {f"dep-{i:03d}": rng.choices(workflows, weights)[0] for i in range(dependencies)}


class ChaosRun:
    """Builds, runs and checks one seeded chaos run on the ``aws`` fixture's account."""

    def __init__(
        self,
        aws: Aws,
        *,
        seed: int,
        parents: int,
        dependencies: int,
        rates: dict[str, float] | None = None,
        join_share: float = 0.25,
        duplicates: float = 0.15,
        workflow_weights: dict[str, float] | None = None,
        plan: dict[tuple[str, int], str] | None = None,
    ) -> None:
        self.duplicates = duplicates
        self.aws = aws
        self.seed = seed
        self.rng = random.Random(seed)
        self.deps = make_parents(self.rng, parents, dependencies, workflow_weights)
        self.parents = [self._parent(index, join_share) for index in range(parents)]
        # On top of the others (which stay those of the seed): about CYCLE_SHARE more.
        self.rings = self._rings(max(sum(RING_SIZES.values()), round(parents * CYCLE_SHARE)))
        self.fake = FakeParents(tokens={p.token for p in self.parents})
        self.injector = FaultInjector(
            seed=seed,
            rates=dict(DEFAULT_RATES if rates is None else rates),
            twin=aws.dynamodb,
            on_parent_gone=self.fake.parent_gone,
            plan=dict(plan or {}),
            sfn_twin=aws.sfn,
        )
        self.sent: dict[str, str] = {}  # message id -> parent token
        self.processed: set[str] = set()
        self.seen: set[str] = set()  # every message the process handler was given
        self.dead: set[str] = set()  # message ids in the process DLQ
        self.dead_bodies: dict[str, str] = {}  # ... and their bodies, taken out for a redrive
        self.redriven: dict[str, str] = {}  # dead-lettered message id -> id after the redrive
        self.invocations: Counter[str] = Counter()
        self.crashes: Counter[str] = Counter()
        self.dlq_url = ""
        self.pumps = Pumps.create(aws)
        # Issue 15's faults: what the harness did, for the invariants.
        self.reports: SqsPump | None = None  # the status-report queue -> update-state
        self.report_url = ""
        self.lost_reports: dict[str, str] = {}  # message id -> payload id
        self._report_draws: dict[str, bool] = {}
        self.held: dict[str, Held] = {}  # execution ARN -> held event
        self._held_draws: set[str] = set()
        self.redeliveries: dict[str, Redelivery] = {}  # execution ARN -> its late repeat
        self.late: list[tuple[float, int]] = []  # (due, parent index): later parents to send
        self.late_parents: list[int] = []
        self.lease_outcomes: Counter[str] = Counter()  # after_lease: recovered, took_over
        self.lease_by_payload: dict[str, list[str]] = {}
        self.storms: dict[str, bool] = {}  # storm token -> its record was discarded
        self.sweeps = 0
        self.sweeper_enabled = True
        self.late_parents_enabled = True
        self.backoff_waits = 0
        self.sweep_failures = 0
        self.express_unstarted = 0  # Express attempts claimed, never started, taken over
        # Lost-report payloads -> later parents sent again because the first one's takeover
        # was itself left CLAIMED (its start failed): see _more_parents.
        self._watched: dict[str, int] = {}
        self.late_parents_again = 0
        self._last_sweep = 0.0
        self._swept_last = False
        self._update_state: Callable[[dict[str, Any], Any], Any] = self.pumps.executions.handler
        # The joins' own faults: by the owner's join_id, and by the owner's token.
        self.intrusions: dict[str, Intrusion] = {}
        self.overwrites: dict[str, Overwrite] = {}
        # parent_send_throttled after the send: the first attempt's token -> its parent.
        self.first_attempts: dict[str, Parent] = {}

    # ------------------------------------------------------------- building

    def _parent(self, index: int, join_share: float) -> Parent:
        rng = self.rng
        token = random_token(rng, f"AQB-chaos-{self.seed}-{index:04d}-")
        items = sorted(self.deps)
        chains = [item for item in items if self.deps[item] == "chain"]
        roll = rng.random()
        if roll < join_share:
            members = rng.sample(items, rng.randint(2, 4))
            quorum = rng.randint(1, len(members))
            wins = sum(self.deps[m] in WINS for m in members)
            return Parent(token, members, quorum, None if wins >= quorum else "QuorumUnreachable")
        if chains and roll < join_share + 0.1:
            # Waits, without starting it, for the step a chain publishes later.
            (member,) = rng.sample(chains, 1)
            return Parent(token, [member], None, None, wait_for=payload_id(member, CHAIN_STEP))
        (member,) = rng.sample(items, 1)
        return Parent(token, [member], None, FAILURE_ERRORS.get(self.deps[member]))

    def _rings(self, budget: int) -> list[Ring]:
        """Rings of parents waiting on each other, ``budget`` parents in all, spread among
        the others at random places (so over every wave, in any order).

        Drawn from their own generator: the other parents stay those of the seed.
        """
        rng = random.Random(f"{self.seed}|cycles")
        rings: list[Ring] = []
        members: list[Parent] = []
        while budget > 0:
            shapes = [s for s in RING_WEIGHTS if RING_SIZES[s] <= budget]
            if len(rings) < len(RING_SIZES) and list(RING_SIZES)[len(rings)] in shapes:
                shape = list(RING_SIZES)[len(rings)]
            else:
                shape = rng.choices(shapes, [RING_WEIGHTS[s] for s in shapes])[0]
            k = len(rings)
            if shape == "join":
                item = f"loop-{self.seed}-{k}-w"
                ids: tuple[str, ...] = (f"loop/{self.seed}/{k}/j", payload_id(item, "pass"))
                ring = Ring(k, shape, ids, member=item)
            else:
                letters = "abc"[: RING_SIZES[shape]]
                ring = Ring(k, shape, tuple(f"loop/{self.seed}/{k}/{x}" for x in letters))
            rings.append(ring)
            for position in range(len(ring.ids)):
                letter = ("jw" if shape == "join" else "abc")[position]
                token = random_token(rng, f"AQB-chaos-{self.seed}-loop{k}{letter}-")
                quorum = 1 if shape == "join" and position == 0 else None
                members.append(Parent(token, [], quorum, CYCLE, ring=ring, position=position))
            budget -= len(ring.ids)
        for parent in members:
            self.parents.insert(rng.randint(0, len(self.parents)), parent)
        return rings

    @property
    def dead_tokens(self) -> set[str]:
        return {self.sent[m] for m in self.dead if m in self.sent}

    def _payload(self, item: str, **extra: Any) -> dict[str, Any]:
        kind = self.deps[item]
        if kind == "chain":
            steps = [{"workflow": "pass"}, {"workflow": CHAIN_STEP}]
            return payload(item, "pass", **extra, process=steps)
        if kind in {"express", "express_fail"}:
            outcome = "succeed" if kind == "express" else "fail"
            step = {"workflow": EXPRESS, "tasks": {"simulate": {"outcome": outcome}}}
            return payload(item, EXPRESS, **extra, process=[step])
        return payload(item, kind, **extra)

    def _pid(self, item: str) -> str:
        kind = self.deps[item]
        return payload_id(item, WORKFLOW_OF.get(kind, kind))

    def _item_of(self, pid: str) -> str | None:
        """The dependency item whose payload (or chained step) is ``pid``."""
        for item, kind in self.deps.items():
            if pid == self._pid(item) or (kind == "chain" and pid == payload_id(item, CHAIN_STEP)):
                return item
        return None

    def _body(self, index: int, parent: Parent) -> dict[str, Any]:
        execution = f"arn:aws:states:us-east-1:123456789012:execution:parent:p{index}"
        callback = {"task_token": parent.token, "parent_execution": execution}
        if parent.ring is not None:
            return self._ring_body(parent, parent.ring, callback)
        if parent.wait_for is not None:
            return {"wait_for": parent.wait_for, "callback": callback}
        if parent.quorum is None:
            (member,) = parent.members
            return self._payload(member, callback=callback)
        join: dict[str, Any] = {
            "task_token": parent.token,
            "quorum": parent.quorum,
            "parent_execution": execution,
        }
        if parent.join_id is not None:
            join["join_id"] = parent.join_id
        if parent.manifest_url is not None:
            return {"join": join, "payloads_url": parent.manifest_url}
        return {"join": join, "payloads": [self._payload(m) for m in parent.members]}

    @staticmethod
    def _ring_body(parent: Parent, ring: Ring, callback: dict[str, str]) -> dict[str, Any]:
        waiter = ring.ids[parent.position]
        if parent.quorum is None:
            # Wait-only: the tracker never starts what it waits on.
            callback = {**callback, "waiter_payload_id": waiter}
            return {"wait_for": ring.waits_on(parent.position), "callback": callback}
        assert ring.member is not None
        join = {
            "task_token": parent.token,
            "quorum": 1,
            "parent_execution": callback["parent_execution"],
            "waiter_payload_id": waiter,
        }
        return {"join": join, "payloads": [payload(ring.member, "pass")]}

    def setup(self) -> None:
        """DLQ and fast redelivery on the process queue; hooks on the handlers' clients.

        The handlers' settings must name the process queue (chaining publishes to it).
        """
        if settings.get_settings().process_queue_url != self.aws.queue_url:
            msg = f"set {settings.ENV_PROCESS_QUEUE_URL} to the process queue first"
            raise RuntimeError(msg)
        self.aws.create_workflow(CHAIN_STEP, PASS_WORKFLOW)
        sqs = self.aws.sqs
        self.dlq_url = sqs.create_queue(QueueName="deptrack-process-dlq")["QueueUrl"]
        dlq_arn = sqs.get_queue_attributes(QueueUrl=self.dlq_url, AttributeNames=["QueueArn"])[
            "Attributes"
        ]["QueueArn"]
        redrive = {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": str(MAX_RECEIVE_COUNT)}
        sqs.set_queue_attributes(
            QueueUrl=self.aws.queue_url,
            Attributes={"VisibilityTimeout": "0", "RedrivePolicy": json.dumps(redrive)},
        )
        for service in ("dynamodb", "stepfunctions", "sqs", "s3"):
            self.injector.attach(clients.client(service))
        self.fake.attach(clients.client("stepfunctions"))
        self.pumps.stream.batch_size = 10
        self.pumps.stream.max_retries = STREAM_MAX_RETRIES
        self.pumps.executions.retry_attempts = 50
        self.pumps.sqs.handler = self._wrap("process", self.pumps.sqs.handler, sqs_source=True)
        self._update_state = self._wrap("update-state", self.pumps.executions.handler)
        self.pumps.executions.handler = self._hold_events(self._update_state)
        self.pumps.stream.handler = self._wrap("callback", self.pumps.stream.handler)
        self._setup_express(sqs)
        self._instrument()
        self._plan_join_faults()
        for operation in ("SendMessage", "SendMessageBatch"):
            clients.client("sqs").meta.events.register(
                f"before-parameter-build.sqs.{operation}", self._on_send
            )

    def _setup_express(self, sqs: Any) -> None:
        """The stack's Express workflow and the status-report queue it reports on."""
        bucket = settings.get_settings().payload_bucket
        if bucket is None:
            msg = f"set {settings.ENV_PAYLOAD_BUCKET} first (Express outputs travel by pointer)"
            raise RuntimeError(msg)
        dlq_url = sqs.create_queue(QueueName="deptrack-status-reports-dlq")["QueueUrl"]
        dlq_arn = _queue_arn(sqs, dlq_url)
        redrive = {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": str(MAX_RECEIVE_COUNT)}
        self.report_url = sqs.create_queue(
            QueueName="deptrack-status-reports",
            Attributes={"VisibilityTimeout": "0", "RedrivePolicy": json.dumps(redrive)},
        )["QueueUrl"]
        definition = definitions.render(
            definitions.discover()[EXPRESS],
            {"StatusReportQueueUrl": self.report_url, "PayloadBucketName": bucket},
        )
        machine = self.aws.sfn.create_state_machine(
            name=f"{PREFIX}-{EXPRESS}", roleArn=ROLE_ARN, definition=definition, type="EXPRESS"
        )["stateMachineArn"]
        self.injector.express_machines = frozenset({machine})
        self.reports = SqsPump(
            sqs=sqs,
            queue_url=self.report_url,
            queue_arn=_queue_arn(sqs, self.report_url),
            handler=self._lose_reports(self._wrap("reports", update_state_handler.lambda_handler)),
            region=REGION,
            function_name="update-state",
        )

    def _instrument(self) -> None:
        """Watch the lease's outcomes; let the callback backoff retry without sleeping.

        Both are attributes of the handlers' cached flows (nothing in the product changes):
        ``after_lease`` is wrapped to count what a lease check did per payload, and the
        callback flows' :class:`Backoff` gets a ``sleep`` that counts instead of waiting (a
        storm's 6 tries x 11 deliveries would otherwise sleep for minutes).
        """
        runs = process_handler.process_flow().runs
        original = runs.after_lease

        def after_lease(payload: Any, message_id: str | None, seen: Any) -> Any:
            outcome = original(payload, message_id, seen)
            if outcome is not None:
                self.lease_outcomes[outcome.value] += 1
                self.lease_by_payload.setdefault(payload.id, []).append(outcome.value)
            return outcome

        runs.after_lease = after_lease  # type: ignore[method-assign]
        sweeper_handler.sweeper_flow.cache_clear()
        for flow in (callback_handler.callback_flow(), sweeper_handler.sweeper_flow().callback):
            flow.backoff = dataclasses.replace(flow.backoff, sleep=self._count_wait)

    def _count_wait(self, _seconds: float) -> None:
        self.backoff_waits += 1

    # ------------------------------------------------- issue 15's harness faults

    def _draw(self, kind: str, key: str) -> bool:
        """One harness fault of ``kind`` for ``key`` (seeded; only while faults are on)."""
        rate = self.injector.rates.get(kind, 0.0)
        if not self.injector.enabled or rate <= 0:
            return False
        hit = random.Random(f"{self.seed}|{kind}|{key}").random() < rate
        if hit:
            self.injector.injected[kind] += 1
        return hit

    def _lose_reports(self, deliver: Callable[[dict[str, Any], Any], Any]) -> Callable[..., Any]:
        """``express_report_lost``: an Express run's report never reaches update-state."""

        def lose(event: dict[str, Any], context: Any) -> Any:
            kept = []
            for record in event["Records"]:
                message_id = record["messageId"]
                if message_id not in self._report_draws:
                    key = str(len(self._report_draws))
                    self._report_draws[message_id] = self._draw("express_report_lost", key)
                    if self._report_draws[message_id]:
                        pid = _reported_payload(record["body"])
                        self.lost_reports[message_id] = pid
                        self._later_parent(pid)
                        self._watched.setdefault(pid, 0)
                if not self._report_draws[message_id]:
                    kept.append(record)
            if not kept:
                return {"batchItemFailures": []}
            return deliver({**event, "Records": kept}, context)

        return lose

    def _hold_events(self, deliver: Callable[[dict[str, Any], Any], Any]) -> Callable[..., Any]:
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
        if state is None or state.state.is_terminal or self._item_of(pid) is None:
            return False
        if any(held.payload_id == pid for held in self.held.values()):
            return False  # one held event per payload
        attempt = naming.attempt_of(str(event["detail"]["name"]), pid)
        if attempt is None or attempt != state.attempt or not self._draw("late_event", arn):
            return False
        self.held[arn] = Held(copy.deepcopy(event), pid, attempt)
        self._later_parent(pid)
        return True

    def _later_parent(self, pid: str) -> None:
        """A parent that arrives after the lease ran out, waiting on ``pid``: the message
        whose lease check must recover the run (without one, nothing ever looks again)."""
        item = self._item_of(pid)
        if item is None or not self.late_parents_enabled:
            return
        index = len(self.parents)
        rng = random.Random(f"{self.seed}|late|{index}")
        token = random_token(rng, f"AQB-chaos-{self.seed}-late{index:04d}-")
        if pid == self._pid(item):
            parent = Parent(token, [item], None, FAILURE_ERRORS.get(self.deps[item]))
        else:
            parent = Parent(token, [item], None, None, wait_for=pid)
        self.parents.append(parent)
        self.fake.tokens.add(token)
        lease = settings.get_settings().claim_lease_seconds
        self.late.append((time.monotonic() + lease + 1.0, index))
        self.late_parents.append(index)

    def _more_parents(self) -> None:
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
                self._later_parent(pid)

    def _send_due(self) -> int:
        now = time.monotonic()
        due = [index for when, index in self.late if when <= now]
        self.late = [(when, index) for when, index in self.late if when > now]
        for index in due:
            body = json.dumps(self._body(index, self.parents[index]))
            sent = self.aws.sqs.send_message(QueueUrl=self.aws.queue_url, MessageBody=body)
            self.sent[sent["MessageId"]] = self.parents[index].token
        return len(due)

    def _watch_held(self) -> None:
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
            response = self._update_state(held.event, LocalContext("update-state"))
        except Exception:  # noqa: BLE001  (EventBridge retries it; so does the next round)
            held.tries += 1
            if held.tries >= MAX_RECEIVE_COUNT:
                held.released, held.action = True, "failed every delivery"
            return
        held.released, held.action = True, str(response.get("action"))

    def _redeliver(self, late: Redelivery) -> None:
        """Deliver an event again after everything newer: it must change nothing."""
        before = _final(self.aws.states.get(late.payload_id))
        try:
            response = self._update_state(late.event, LocalContext("update-state"))
        except Exception:  # noqa: BLE001  (retried at the next quiet point)
            late.tries += 1
            if late.tries >= MAX_RECEIVE_COUNT:
                late.action = "failed every delivery"
            return
        late.action = str(response.get("action"))
        after = _final(self.aws.states.get(late.payload_id))
        if after != before:
            late.changed = f"{before} -> {after}"

    def _watch_storms(self) -> None:
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
        if due and self.sweeper_enabled and self._unanswered_storms():
            self._sweep()

    def _unanswered_storms(self) -> list[str]:
        return [
            token
            for token, discarded in self.storms.items()
            if discarded and token not in self.fake.sent and token not in self.fake.gone
        ]

    def _sweep(self) -> None:
        """One run of the sweeper function, as its schedule would start it."""
        self._last_sweep = time.monotonic()
        self.sweeps += 1
        self.invocations["sweeper"] += 1
        event = scheduled_event(
            rule_arn=f"arn:aws:events:{REGION}:{ACCOUNT}:rule/sweeper",
            region=REGION,
            account=ACCOUNT,
        )
        with running("sweeper"):
            try:
                sweeper_handler.lambda_handler(event, LocalContext("sweeper", timeout_seconds=120))
            except Crash:
                self.crashes["sweeper"] += 1
            except Exception:  # noqa: BLE001  (a failed sweep is simply the next sweep)
                self.sweep_failures += 1

    def _finish(self) -> bool:
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
        if self.storms and self.sweeper_enabled and not self._swept_last:
            self._swept_last = True
            self._sweep()
            did = True
        return did

    def _wrap(
        self, name: str, handler: Callable[[dict[str, Any], Any], Any], *, sqs_source: bool = False
    ) -> Callable[[dict[str, Any], Any], Any]:
        def once(event: dict[str, Any], context: Any) -> Any:
            self.invocations[name] += 1
            with running(name):
                try:
                    return handler(event, context)
                except Crash as exc:
                    # The Lambda died: the whole invocation fails, the source redelivers.
                    self.crashes[name] += 1
                    raise RuntimeError(f"{name} crashed: {exc}") from None

        def invoke(event: dict[str, Any], context: Any) -> Any:
            count = self.invocations[name] + 1
            twice = random.Random(f"{self.seed}|duplicate|{name}|{count}").random()
            try:
                if twice < self.duplicates:
                    # At-least-once: the same event is delivered twice (the first answer is lost).
                    self.injector.injected["duplicate_delivery"] += 1
                    once(event, context)
                response = once(event, context)
            finally:
                if sqs_source:
                    # Before the next delivery, even after a crash: it may read the next chunk.
                    self._overwrite_due()
            if sqs_source:
                self.seen.update(r["messageId"] for r in event["Records"])
                failed = {item["itemIdentifier"] for item in response["batchItemFailures"]}
                self.processed.update(
                    r["messageId"] for r in event["Records"] if r["messageId"] not in failed
                )
            return response

        return invoke

    # ------------------------------------------------------ the joins' own faults

    def _plan_join_faults(self) -> None:
        """Draw a join fault for each join parent of more than one chunk (seeded per parent).

        A parent given its fault beforehand keeps it. Drawn here, not with the parents,
        so that the parents stay those of the seed.
        """
        chunk_size = settings.get_settings().join_chunk_size
        rates = [self.injector.rates.get(kind, 0.0) for kind in JOIN_FAULTS]
        for index, parent in enumerate(self.parents):
            if parent.ring is not None or parent.quorum is None:
                continue
            if parent.fault is None and len(parent.members) > chunk_size:
                roll = random.Random(f"{self.seed}|join_faults|{index}").random()
                for kind, rate in zip(JOIN_FAULTS, rates, strict=True):
                    if roll < rate:
                        parent.fault = kind
                        break
                    roll -= rate
            if parent.fault is not None:
                self._prepare_join_fault(index, parent)

    def _prepare_join_fault(self, index: int, parent: Parent) -> None:
        """The owner's join_id or manifest, and the other member list the fault brings."""
        rng = random.Random(f"{self.seed}|{parent.fault}|{index}")
        others = [item for item in sorted(self.deps) if item not in parent.members]
        # Members the owner did not name where there are enough, so that a mix shows.
        size = len(parent.members)
        members = rng.sample(others, min(size, len(others)))
        members += rng.sample(parent.members, size - len(members))
        if parent.fault == "join_id_reuse":
            parent.join_id = parent.join_id or f"chaos-{self.seed}-join-{index:04d}"
            token = random_token(rng, f"AQB-chaos-{self.seed}-reuse{index:04d}-")
            self.fake.tokens.add(token)
            self.intrusions[parent.join_id] = Intrusion(parent, token, members)
        elif parent.fault == "manifest_overwrite":
            key = f"chaos/manifests/{index:04d}.jsonl"
            self._put_manifest(key, parent.members)
            parent.manifest_url = f"s3://{self._bucket}/{key}"
            self.overwrites[parent.token] = Overwrite(parent, key, members)
        else:
            msg = f"unknown join fault {parent.fault!r}"
            raise ValueError(msg)

    @property
    def _bucket(self) -> str:
        bucket = settings.get_settings().payload_bucket
        assert bucket is not None  # setup() checked it
        return bucket

    def _put_manifest(self, key: str, members: list[str]) -> None:
        text = manifest_text(self._payload(m) for m in members)
        self.aws.s3.put_object(Bucket=self._bucket, Key=key, Body=text.encode("utf-8"))

    def _on_send(self, params: dict[str, Any], **_: Any) -> None:
        """``join_id_reuse``: as the owner's registration sends its chunks on (chunk 1's
        message, one SendMessageBatch entry), the other parent's join goes to the queue
        first, so it is read while the owner's list still is."""
        if not self.intrusions or not self.injector.enabled:
            return
        bodies = [params.get("MessageBody", "")]
        bodies += [entry.get("MessageBody", "") for entry in params.get("Entries", [])]
        for text in bodies:
            self._intrude_before(str(text))

    def _intrude_before(self, text: str) -> None:
        try:
            body = json.loads(text)
        except ValueError:
            return
        chunk = body.get("join_chunk") if isinstance(body, dict) else None
        if not isinstance(chunk, dict) or chunk.get("index") != 1:
            return
        intrusion = self.intrusions.get(str(chunk.get("join_id")))
        if intrusion is None or intrusion.message_id is not None:
            return
        owner = intrusion.owner
        execution = f"arn:aws:states:us-east-1:123456789012:execution:parent:reuse-{owner.join_key}"
        join = {
            "task_token": intrusion.token,
            "quorum": 1,
            "join_id": owner.join_key,
            "parent_execution": execution,
        }
        message = {"join": join, "payloads": [self._payload(m) for m in intrusion.members]}
        sent = self.aws.sqs.send_message(
            QueueUrl=self.aws.queue_url, MessageBody=json.dumps(message)
        )
        intrusion.message_id = sent["MessageId"]
        self.sent[sent["MessageId"]] = intrusion.token
        self.injector.injected["join_id_reuse"] += 1

    def _overwrite_due(self) -> None:
        """``manifest_overwrite``: once the owner's first chunk registered, its manifest is
        replaced (same key) before anything else is delivered."""
        for overwrite in self.overwrites.values():
            if overwrite.done or not self.injector.enabled:
                continue
            join = self.joins.get(overwrite.owner.join_key)
            if join is None or join.registered_chunks < 1:
                continue
            self._put_manifest(overwrite.key, overwrite.members)
            overwrite.done = True
            self.injector.injected["manifest_overwrite"] += 1

    def _allowed_errors(self, parent: Parent) -> set[str | None]:
        """What a parent may hear: its outcome; an overwritten manifest's owner, InvalidJoin."""
        overwrite = self.overwrites.get(parent.token)
        if overwrite is not None and overwrite.done:
            return {parent.expected_error, INVALID_JOIN}
        return {parent.expected_error}

    # -------------------------------------------------------------- running

    def send(self, indexes: range) -> None:
        entries: list[tuple[str, Parent, dict[str, Any]]] = []
        for i in indexes:
            parent = self.parents[i]
            first = self._throttled_send(i, parent)
            if first is not None:
                entries.append((f"first-{i}", first, self._body(i, first)))
            entries.append((str(i), parent, self._body(i, parent)))
        by_id = {entry_id: parent for entry_id, parent, _ in entries}
        for start in range(0, len(entries), 10):
            chunk = entries[start : start + 10]
            response = self.aws.sqs.send_message_batch(
                QueueUrl=self.aws.queue_url,
                Entries=[
                    {"Id": entry_id, "MessageBody": json.dumps(body)} for entry_id, _, body in chunk
                ],
            )
            for ok in response["Successful"]:
                self.sent[ok["MessageId"]] = by_id[ok["Id"]].token

    def _throttled_send(self, index: int, parent: Parent) -> Parent | None:
        """``parent_send_throttled``: the parent's first attempt at its send failed.

        Throttled after SQS took it, the first attempt's message (with a token of its own,
        closed when the attempt failed) goes first; the one returned. Throttled before,
        nothing of it is sent. Either way the parent's own token is its retry's.
        """
        eligible = parent.ring is None and parent.fault is None and parent.join_id is None
        if not eligible or not self._draw("parent_send_throttled", str(index)):
            return None
        if random.Random(f"{self.seed}|parent_send_throttled|{index}|when").random() < 0.5:
            return None
        rng = random.Random(f"{self.seed}|parent_send_throttled|{index}|token")
        first = dataclasses.replace(
            parent, token=random_token(rng, f"AQB-chaos-{self.seed}-first{index:04d}-")
        )
        self.fake.tokens.add(first.token)
        self.fake.parent_gone(first.token, "TaskTimedOut")
        self.first_attempts[first.token] = parent
        return first

    def execute(self, timeout: float) -> Report:
        began = time.monotonic()
        self.setup()
        waves = 4
        size = -(-len(self.parents) // waves)
        for wave in range(waves):
            self.send(range(wave * size, min(len(self.parents), (wave + 1) * size)))
            for _ in range(3):  # a little progress between waves: replays and re-runs
                self.round()
        self.settle(timeout - (time.monotonic() - began))
        self.injector.enabled = False
        report = self.check()
        if self.dead_bodies:
            # What the DLQ holds must be recoverable: redrive it (faults off) and check again.
            self.redrive()
            self.settle(timeout - (time.monotonic() - began))
            self.check(report, suffix=" (after DLQ redrive)")
        report.seconds = time.monotonic() - began
        return report

    def redrive(self) -> None:
        """Move every dead-lettered message back to the process queue, as a DLQ redrive does."""
        for old, body in sorted(self.dead_bodies.items(), key=lambda kv: kv[1]):
            new = self.aws.sqs.send_message(QueueUrl=self.aws.queue_url, MessageBody=body)
            self.redriven[old] = new["MessageId"]
            if old in self.sent:
                self.sent[new["MessageId"]] = self.sent[old]
        self.dead_bodies.clear()
        self.dead.clear()

    def round(self, timeout: float = 30.0) -> int:
        """One round of every pump, in a fixed order.

        The child executions run in moto's threads; waiting for them to stop
        before the EventBridge pump looks makes each round, and so the handlers'
        call sequence and the faults drawn for it, the same on every run.
        """
        self._more_parents()
        self._send_due()
        moved = int(self.pumps.sqs.pump_once())
        deadline = time.monotonic() + timeout
        while managed_running(self.aws):
            if time.monotonic() > deadline:
                msg = f"child executions still running after {timeout:.0f}s"
                raise TimeoutError(msg)
            time.sleep(0.005)
        moved += self.pumps.executions.pump_once()
        if self.reports is not None:
            moved += self.reports.pump_once()
        self._watch_held()
        moved += int(self.pumps.stream.pump_once())
        self._watch_storms()
        return moved

    def settle(self, timeout: float) -> None:
        """Pump until every source is drained and nothing runs; fail at the deadline."""
        deadline = time.monotonic() + timeout
        quiet = 0
        while quiet < 2:
            moved = self.round()
            busy = (
                moved
                or any(self.pumps.stream._pending.values())
                or self.pumps.executions._failures
                or managed_running(self.aws)
                or not queue_empty(self.aws)
                or not self._reports_empty()
                or self.late
                or (self.sweeper_enabled and self._unanswered_storms())
            )
            quiet = 0 if busy else quiet + 1
            if quiet >= 2 and self._finish():
                quiet = 0
            if time.monotonic() > deadline:
                msg = f"chaos run did not settle within {timeout:.0f}s (seed {self.seed})"
                raise TimeoutError(msg)
            if not moved:
                time.sleep(0.02)

    def _reports_empty(self) -> bool:
        if not self.report_url:
            return True
        attributes = self.aws.sqs.get_queue_attributes(
            QueueUrl=self.report_url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return all(int(value) == 0 for value in attributes.values())

    # ------------------------------------------------------------- checking

    def check(self, report: Report | None = None, suffix: str = "") -> Report:
        """Check every invariant; rows and parents of dead-lettered messages are exempt."""
        if report is None:
            report = Report(
                seed=self.seed,
                parents=sum(p.ring is None for p in self.parents),
                cycle_parents=sum(p.ring is not None for p in self.parents),
                dependencies=len(self.deps),
                faults=self.injector.summary(),
            )
        invariants = report.invariants
        invariants["messages: in = processed + DLQ + invalid" + suffix] = self._messages(report)
        invariants["parents resumed exactly once, right outcome" + suffix] = self._resumes()
        invariants["no PROCESSING waiter on a terminal payload" + suffix] = self._waiters(report)
        invariants["never two live executions per payload" + suffix] = self._executions()
        joins = "joins decided once, each member outcome counted once"
        invariants[joins + suffix] = self._joins(report)
        invariants["dependency cycles: one of each refused, nothing else sent" + suffix] = (
            self._cycles(report)
        )
        invariants[EXPRESS_RUNS + suffix] = self._express_runs(report)
        invariants[LOST_REPORTS + suffix] = self._lost_reports()
        invariants[LATE_EVENTS + suffix] = self._late_events()
        invariants[REDELIVERIES + suffix] = self._redeliveries(report)
        invariants[STORMS + suffix] = self._storms(report)
        invariants[NAMED_MEMBERS + suffix] = self._named_members(report)
        invariants[FIRST_ATTEMPTS + suffix] = self._first_attempts(report)
        # The stream's and EventBridge's on-failure destinations are DLQs too: counted; a
        # parent left waiting because of one still fails the resume check above.
        report.counts["stream_dead_letters"] = len(self.pumps.stream.dead_letters)
        report.counts["eventbridge_dead_letters"] = len(self.pumps.executions.dead_letters)
        report.counts.update(
            parents_join=sum(p.quorum is not None and p.ring is None for p in self.parents),
            parents_wait_for=sum(p.wait_for is not None for p in self.parents),
            parents_late=len(self.late_parents),
            parents_late_again=self.late_parents_again,
            parents_gone=len(self.fake.gone),
            resumed=len(self.fake.sent),
            refused_sends=sum(self.fake.refused.values()),
            lease_recovered=self.lease_outcomes["recovered"],
            lease_took_over=self.lease_outcomes["took_over"],
            express_starts_by_tracker=sum(self.injector.express_starts.values()),
            express_twin_runs=sum(self.injector.twins.values()),
            express_reports_lost=len(self.lost_reports),
            express_attempts_never_started=self.express_unstarted,
            late_events_held=len(self.held),
            storm_throttled_sends=self.injector.storm_calls,
            storm_records_discarded=sum(self.storms.values()),
            sweeps=self.sweeps,
            sweep_failures=self.sweep_failures,
            backoff_waits_skipped=self.backoff_waits,
            **{f"crashed_{k}": v for k, v in sorted(self.crashes.items())},
            **{f"invocations_{k}": v for k, v in sorted(self.invocations.items())},
        )
        return report

    def check_logs(self, report: Report, log_text: str) -> None:
        """``log_text``: every log line the handlers wrote, as shipped (JSON, extra keys)."""
        assert "callback handled" in log_text, "no handler log captured"
        leaked = [p.token[:24] + "..." for p in self.parents if p.token in log_text]
        report.invariants["no whole task token in a log line"] = leaked

    def _first_attempts(self, report: Report) -> list[str]:
        """A throttled send's first token, delivered: answered once, refused, recorded gone.

        Its row (a waiter row, or a join's row) ends notified ``PARENT_GONE:TaskTimedOut``
        (the tracker did not retry it, nor dead-letter it); its parent, by its retry's token,
        is checked with the others (resumed once, right outcome).
        """
        problems: list[str] = []
        dead = self.dead_tokens
        gone = 0
        for token, parent in sorted(self.first_attempts.items()):
            if token in dead:
                continue  # left for the redrive, as any dead-lettered message
            label = f"first attempt {token[:24]}... of {parent.token[:24]}..."
            if self.fake.sent.get(token):
                problems.append(f"{label}: resumed")
            if parent.quorum is not None:
                key = {"payload_id": join_partition_for(token_hash(token)), "waiter_id": "join"}
            else:
                pid = parent.wait_for or self._pid(parent.members[0])
                key = {"payload_id": partition_key(pid), "waiter_id": waiter_id_for(token)}
            item = self.aws.dynamodb.get_item(
                TableName=self.aws.dependencies.table_name,
                Key={name: {"S": value} for name, value in key.items()},
                ConsistentRead=True,
            ).get("Item")
            outcome = None if item is None else item.get("notify_outcome", {}).get("S")
            if outcome != "PARENT_GONE:TaskTimedOut":
                problems.append(f"{label}: row {key} notify_outcome {outcome}")
            else:
                gone += 1
        report.counts.update(
            parent_sends_throttled_after_send=len(self.first_attempts),
            first_attempts_gone=gone,
        )
        return problems

    # ------------------------------------------------ the joins' own invariant

    def _named_members(self, report: Report) -> list[str]:
        """Every id in a join's summary (success or ``QuorumUnreachable``) is one its parent
        named; a join naming another's join_id is refused, the owner's outcome unchanged; an
        overwritten manifest fails its join (the cause says so) or changed nothing."""
        problems: list[str] = []
        summaries = 0
        for parent in self.parents:
            sends = self.fake.sent.get(parent.token, [])
            if parent.ring is not None or parent.quorum is None or not sends:
                continue
            label = f"{parent.token[:24]}... ({parent.fault or 'join'} {parent.join_key[:16]})"
            try:
                summary = self._summary(sends[0])
            except ValueError as exc:
                problems.append(f"{label}: summary unreadable: {exc}")
                continue
            if summary is None:
                continue
            summaries += 1
            named = {partition_key(self._pid(member)) for member in parent.members}
            listed = [*summary.get("succeeded", []), *summary.get("pending", [])]
            listed += [failed.get("payload_id") for failed in summary.get("failed", [])]
            listed += [*summary.get("duplicates", []), summary.get("winner")]
            strangers = sorted({str(pid) for pid in listed if pid is not None} - named)
            if strangers:
                what = sends[0].error or "success"
                problems.append(f"{label}: answered {what} naming {strangers[:5]}, never named")
        problems += self._intrusions()
        problems += self._overwrites(report)
        report.counts.update(
            join_summaries_checked=summaries,
            join_id_reuses=sum(i.message_id is not None for i in self.intrusions.values()),
            manifest_overwrites=sum(o.done for o in self.overwrites.values()),
        )
        return problems

    def _summary(self, sent: Sent) -> dict[str, Any] | None:
        """The join summary a send carries (success output, ``QuorumUnreachable`` cause)."""
        if sent.operation == "SendTaskSuccess":
            text = sent.output
        elif sent.error == DependencyError.QUORUM_UNREACHABLE.value:
            text = sent.cause
        else:
            return None
        summary = json.loads(text or "{}")
        if not isinstance(summary, dict):
            msg = f"not an object: {text!r:.80}"
            raise ValueError(msg)  # reported as a problem by the caller
        url = summary.get("summary_url")
        if url is None:
            return summary
        bucket, _, key = str(url).removeprefix("s3://").partition("/")
        whole: dict[str, Any] = json.loads(
            self.aws.s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        )
        return whole

    def _heard(self, token: str, label: str, problems: list[str]) -> Sent | None:
        """The one send that resumed ``token`` (a problem if not one); None as well when it
        is gone (timed out) or its message is left for the redrive."""
        sends = self.fake.sent.get(token, [])
        if token in self.fake.gone or (not sends and token in self.dead_tokens):
            return None
        if len(sends) != 1:
            problems.append(f"{label} answered {len(sends)} times")
            return None
        return sends[0]

    def _intrusions(self) -> list[str]:
        """The second parent hears ``InvalidJoin`` saying the join_id is in use; the owner
        hears what it would have without it (its members: the other invariants)."""
        problems: list[str] = []
        for join_id, intrusion in sorted(self.intrusions.items()):
            if intrusion.message_id is None:
                continue
            label = f"join_id {join_id} reused:"
            answer = self._heard(intrusion.token, f"{label} the second parent", problems)
            if answer is not None:
                cause = answer.cause or ""
                if answer.error != INVALID_JOIN:
                    problems.append(f"{label} the second parent heard {answer.error}")
                elif join_id not in cause or not IN_USE.search(cause):
                    problems.append(f"{label} cause does not say it is in use: {cause:.200}")
            owner = self._heard(intrusion.owner.token, f"{label} the owner", problems)
            if owner is not None and owner.error != intrusion.owner.expected_error:
                problems.append(
                    f"{label} the owner heard {owner.error}, "
                    f"expected {intrusion.owner.expected_error}"
                )
        return problems

    def _overwrites(self, report: Report) -> list[str]:
        """An overwritten manifest's owner hears ``InvalidJoin`` naming the manifest and
        saying it changed, or (every chunk read before) what it would have heard."""
        problems: list[str] = []
        outcomes: Counter[str] = Counter()
        for overwrite in self.overwrites.values():
            owner = overwrite.owner
            if not overwrite.done:
                continue
            label = f"manifest {owner.manifest_url} overwritten:"
            answer = self._heard(owner.token, f"{label} the owner", problems)
            if answer is None:
                continue
            cause = answer.cause or ""
            if answer.error == INVALID_JOIN:
                outcomes["invalid"] += 1
                if str(owner.manifest_url) not in cause or not CHANGED.search(cause):
                    problems.append(f"{label} cause does not say it changed: {cause:.200}")
            elif answer.error == owner.expected_error:
                outcomes["unchanged"] += 1
            else:
                problems.append(
                    f"{label} the owner heard {answer.error}, expected InvalidJoin "
                    f"or {owner.expected_error}"
                )
        report.counts.update(
            manifest_overwrite_invalid_join=outcomes["invalid"],
            manifest_overwrite_unchanged=outcomes["unchanged"],
        )
        return problems

    # ---------------------------------------------------- issue 15's invariants

    def _express_runs(self, report: Report) -> list[str]:
        """One run per attempt: the tracker started each Express attempt once, and every
        success a parent heard, and every succeeded row, names the payload's recorded run."""
        problems = [
            f"{name}: the tracker started it {n} times"
            for name, n in sorted(self.injector.express_starts.items())
            if n > 1
        ]
        states = self._states()
        for parent in self.parents:
            sends = self.fake.sent.get(parent.token, [])
            if parent.ring is not None or parent.quorum is not None or not sends:
                continue
            if sends[0].error is not None:
                continue
            output = json.loads(sends[0].output or "{}")
            state = states.get(str(output.get("payload_id")))
            if state is not None and output.get("execution_arn") != state.execution_arn:
                problems.append(
                    f"{state.payload_id}: a parent heard {output.get('execution_arn')}, "
                    f"the payload ended by {state.execution_arn}"
                )
        checked = 0
        for row in self._rows():
            state = states.get(row.payload_id)
            if row.workflow_state is not PayloadState.SUCCEEDED or state is None:
                continue
            checked += 1
            if row.execution_arn != state.execution_arn:
                problems.append(
                    f"{row.payload_id} {row.waiter_id}: resolved by {row.execution_arn}, "
                    f"the payload ended by {state.execution_arn}"
                )
        report.counts["succeeded_rows_checked"] = checked
        return problems

    def _rows(self) -> list[Any]:
        """Every waiter and membership row of the dependency table."""
        rows: list[Any] = []
        scan: dict[str, Any] = {"TableName": self.aws.dependencies.table_name}
        while True:
            page = self.aws.dynamodb.scan(**scan)
            for item in page.get("Items", []):
                if is_bookkeeping_item(item):
                    continue
                row = row_from_item(item)
                if not row.payload_id.startswith("join#"):
                    rows.append(row)
            if not page.get("LastEvaluatedKey"):
                return rows
            scan["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def _waiting_on(self, pid: str) -> list[Parent]:
        """The single-wait parents of ``pid`` (not dead-lettered, not made gone)."""
        dead = self.dead_tokens
        return [
            parent
            for parent in self.parents
            if parent.ring is None
            and parent.quorum is None
            and (parent.wait_for or self._pid(parent.members[0])) == pid
            and parent.token not in dead
            and parent.token not in self.fake.gone
        ]

    def _lost_reports(self) -> list[str]:
        """A lost Express report: the payload still ended, and its parents heard it once."""
        problems: list[str] = []
        states = self._states()
        for pid in sorted(set(self.lost_reports.values())):
            state = states.get(pid)
            if state is None or not state.state.is_terminal:
                problems.append(f"{pid}: report lost, payload left {state and state.state}")
            for parent in self._waiting_on(pid):
                heard = len(self.fake.sent.get(parent.token, []))
                if heard != 1:
                    problems.append(f"{pid}: a parent answered {heard} times")
        return problems

    def _late_events(self) -> list[str]:
        """A held event: the lease recorded its run (no second attempt); then it repeated."""
        problems: list[str] = []
        states = self._states()
        for arn, held in sorted(self.held.items()):
            label = f"{held.payload_id} (attempt {held.attempt})"
            if not held.recovered_first:
                problems.append(f"{label}: not recovered by a lease ({held.action})")
            elif held.action != "repeated":
                problems.append(f"{label}: the late event was {held.action}, not repeated")
            state = states.get(held.payload_id)
            if state is None or state.attempt != held.attempt or state.execution_arn != arn:
                problems.append(
                    f"{label}: ended as attempt {state and state.attempt} "
                    f"({state and state.execution_arn})"
                )
            if "took_over" in self.lease_by_payload.get(held.payload_id, []):
                problems.append(f"{label}: a lease took over a run that had ended")
            for parent in self._waiting_on(held.payload_id):
                heard = len(self.fake.sent.get(parent.token, []))
                if heard != 1:
                    problems.append(f"{label}: a parent answered {heard} times")
        return problems

    def _redeliveries(self, report: Report) -> list[str]:
        """An older event delivered again after newer ones: stale or repeated, nothing changed."""
        problems: list[str] = []
        actions = Counter(late.action for late in self.redeliveries.values())
        report.counts.update(
            redelivered_stale=actions["stale"], redelivered_repeated=actions["repeated"]
        )
        for arn, late in sorted(self.redeliveries.items()):
            if late.action not in {"stale", "repeated"}:
                problems.append(f"{arn.rsplit(':', 1)[1]}: redelivered, {late.action}")
            if late.changed is not None:
                problems.append(f"{arn.rsplit(':', 1)[1]}: redelivery changed {late.changed}")
        return problems

    def _storms(self, report: Report) -> list[str]:
        """Every parent a storm hit was answered once: by the stream or by the sweeper."""
        problems: list[str] = []
        dead = self.dead_tokens
        for token, discarded in sorted(self.storms.items()):
            if token in dead or token in self.fake.gone:
                continue
            heard = len(self.fake.sent.get(token, []))
            if heard != 1:
                what = "discarded by the stream" if discarded else "stormed"
                problems.append(f"{token[:24]}...: {what}, answered {heard} times")
        report.counts["storms"] = len(self.storms)
        return problems

    def _resumes(self) -> list[str]:
        problems: list[str] = []
        for parent in self.parents:
            if parent.ring is not None:
                continue  # what it may hear depends on the rest of its ring: _cycles
            label = f"{parent.token[:24]}... on {parent.members} (quorum {parent.quorum})"
            sends = self.fake.sent.get(parent.token, [])
            if parent.token in self.fake.gone:
                if sends:
                    problems.append(f"{label}: resumed after it timed out")
                continue
            if not sends and parent.token in self.dead_tokens:
                continue  # its message was dead-lettered: the parent times out (counted)
            if len(sends) != 1:
                problems.append(f"{label}: resumed {len(sends)} times")
                continue
            problems.extend(f"{label}: {problem}" for problem in self._outcome(parent, sends[0]))
        return problems

    def _outcome(self, parent: Parent, sent: Sent) -> list[str]:
        """What is wrong with the send that resumed ``parent`` (and any re-send)."""
        problems = [
            f"contradictory re-send {again.error} after {sent.error}"
            for again in self.fake.late.get(parent.token, [])
            if (again.operation, again.error) != (sent.operation, sent.error)
        ]
        if sent.error not in self._allowed_errors(parent):
            problems.append(f"expected {parent.expected_error}, got {sent.error}")
        elif sent.error is None and parent.quorum is None:
            output = json.loads(sent.output or "{}")
            (member,) = parent.members
            if output.get("payload_id") != (parent.wait_for or self._pid(member)):
                problems.append(f"output names {output.get('payload_id')}")
            if output.get("state") != "SUCCEEDED":
                problems.append(f"output state {output.get('state')}")
        elif sent.error is None:
            output = json.loads(sent.output or "{}")
            winners = {self._pid(m) for m in parent.members if self.deps[m] in WINS}
            succeeded = set(output.get("succeeded", []))
            if output.get("quorum") != parent.quorum or len(succeeded) < (parent.quorum or 0):
                problems.append(f"join output {output}")
            if not succeeded <= winners:
                problems.append(f"join counts {sorted(succeeded - winners)} as succeeded")
        return problems

    def _cycles(self, report: Report) -> list[str]:
        """Of each ring at least one wait refused with ``DependencyCycle``; nothing else sent.

        A wait-only parent hears ``DependencyCycle`` once, naming its ring as the cycle, or
        nothing: it waits (on AWS its callback timeout would end it). A "join" ring's join
        may instead succeed, once, if it was let through (its member ran): then the
        member's own wait is the one that closes the cycle, and is refused, unless the join
        was decided before that wait's edge was written (:meth:`_join_ended_first`: the
        cycle never stood, and the member's wait rightly waits). A parent made gone by an
        injected ``TaskTimedOut``/``InvalidToken`` counts as its row says it was told; one
        whose message is in the DLQ and heard nothing is left for the redrive.
        """
        problems: list[str] = []
        counts: Counter[str] = Counter()
        states = self._states()
        dead = self.dead_tokens
        for ring in self.rings:
            counts["cycles"] += 1
            counts[f"cycles_{ring.shape}"] += 1
            members = sorted((p for p in self.parents if p.ring is ring), key=lambda p: p.position)
            outcomes: list[str] = []
            for parent in members:
                label = f"ring {ring.index} ({ring.shape}) {ring.ids[parent.position]}"
                outcome, found = self._ring_outcome(parent, ring, dead)
                problems.extend(f"{label}: {problem}" for problem in found)
                outcomes.append(outcome if not found else "wrong")
                counts[f"cycle_parents_{outcome}"] += 1
            ran = [pid for pid in ring.ids if pid in states]
            if ring.member is not None and ring.ids[1] in ran:
                ran.remove(ring.ids[1])
                let_through = outcomes[0] in SUCCEEDED_JOIN
                counts["cycles_join_let_through" if let_through else "cycles_join_member_ran"] += 1
            problems.extend(f"ring {ring.index}: the tracker ran {pid}" for pid in ran)
            verdict = self._ring_verdict(members, outcomes)
            if verdict is None:
                problems.append(f"ring {ring.index} ({ring.shape}): none refused: {outcomes}")
            elif verdict:
                counts[verdict] += 1
        # Checked again after a redrive: replace the first check's figures, except how many
        # rings the redrive had to settle.
        left = report.counts.get("cycles_left_for_redrive", 0)
        for key in [key for key in report.counts if key.startswith("cycle")]:
            del report.counts[key]
        report.counts.update({key: counts[key] for key in sorted(counts)})
        if left:
            report.counts["cycles_left_for_redrive"] = left
        return problems

    def _ring_verdict(self, members: list[Parent], outcomes: list[str]) -> str | None:
        """The count a ring adds to, "" if a member is wrong already, None if none refused."""
        if "wrong" in outcomes:
            return ""
        refused = sum(o in {"refused", "refused_gone"} for o in outcomes)
        if refused:
            return "cycles_refused_all" if refused == len(outcomes) else "cycles_refused_some"
        if "left" in outcomes:
            return "cycles_left_for_redrive"
        ring = members[0].ring
        if ring is None or ring.shape != "join" or outcomes[0] not in SUCCEEDED_JOIN:
            return None
        return self._join_verdict(members, ring, outcomes)

    def _join_verdict(self, members: list[Parent], ring: Ring, outcomes: list[str]) -> str | None:
        """A "join" ring whose join succeeded and whose member's wait was not refused."""
        if self._edge_refused(members[0], ring):
            # Let through, then refused on a redelivery once its member had won: its wait
            # had ended, so the member's wait closed no cycle any more.
            return "cycles_join_refused_late"
        if outcomes[1] == "waiting" and self._join_ended_first(members, ring):
            return "cycles_join_ended_first"
        return None

    def _join_ended_first(self, members: list[Parent], ring: Ring) -> bool:
        """A "join" ring's join was decided before its member's wait on it was recorded.

        The check follows a wait edge only while its waiting row is ``PROCESSING``
        (architecture.md, section 12): once the member's membership row has turned
        terminal, the join waits on nothing and no cycle is left to close. The join's
        decision comes after that row turned terminal (the decision counts it), and the
        member's edge is written before its every search: a decision older than the edge
        proves each search of the member's wait came after the join's wait had ended, and
        the join's own search, before its members started, could not meet the member's
        edge. No deadlock was possible; anything less proves nothing and stays a failure.
        """
        join = self._ring_row(members[0], ring)
        edge = self._edge(members[1], ring)
        if not isinstance(join, JoinItem) or join.resolved_at is None or edge is None:
            return False
        recorded = datetime.fromisoformat(edge["created_at"]["S"])
        return join.workflow_state is PayloadState.SUCCEEDED and join.resolved_at <= recorded

    def _ring_outcome(self, parent: Parent, ring: Ring, dead: set[str]) -> tuple[str, list[str]]:
        """How one ring parent ended, and what is wrong with that.

        Outcomes: refused, refused_gone, waiting, succeeded (a "join" ring's join),
        succeeded_gone, or left (dead-lettered, nothing heard: for the redrive).
        """
        row = self._ring_row(parent, ring)
        sends = self.fake.sent.get(parent.token, [])
        if parent.token in self.fake.gone:
            return self._ring_gone(parent, ring, row, resumed=bool(sends))
        if sends:
            return self._ring_sent(parent, ring, row, sends[0])
        if parent.token in dead:
            return "left", []
        # Nothing heard: only a wait-only parent whose wait was let through may be waiting
        # (a join always hears something: a refusal, or its member's success).
        if isinstance(row, WaiterItem) and row.workflow_state is PayloadState.PROCESSING:
            return "waiting", self._ring_edge(parent, ring, refused=False)
        described = row and f"{row.workflow_state} {getattr(row, 'error_name', row.error)}"
        return "wrong", [f"never resumed, row {described}"]

    def _ring_sent(
        self, parent: Parent, ring: Ring, row: WaiterItem | JoinItem | None, sent: Sent
    ) -> tuple[str, list[str]]:
        """The one send that resumed a ring parent (FakeParents keeps re-sends in .late)."""
        problems = [
            f"contradictory re-send {again.operation} {again.error} after {sent.error}"
            for again in self.fake.late.get(parent.token, [])
            if (again.operation, again.error) != (sent.operation, sent.error)
        ]
        if sent.operation == "SendTaskFailure" and sent.error == CYCLE:
            problems += self._ring_cause(parent, ring, json.loads(sent.cause or "{}"))
            if not self._ring_refused(parent, ring, row):
                problems.append(f"told DependencyCycle, row {row and row.workflow_state}")
            return "refused", problems + self._ring_edge(parent, ring, refused=True)
        if parent.quorum is not None and sent.operation == "SendTaskSuccess":
            output = json.loads(sent.output or "{}")
            if output.get("quorum") != 1 or output.get("succeeded") != [ring.ids[1]]:
                problems.append(f"join output {output}")
            return "succeeded", problems
        return "wrong", [*problems, f"sent {sent.operation} {sent.error}"]

    def _ring_gone(
        self, parent: Parent, ring: Ring, row: WaiterItem | JoinItem | None, *, resumed: bool
    ) -> tuple[str, list[str]]:
        """A send was tried and met ``TaskTimedOut``/``InvalidToken``: the row says which."""
        if resumed:
            return "wrong", ["resumed after it timed out"]
        if self._ring_refused(parent, ring, row):
            return "refused_gone", self._ring_edge(parent, ring, refused=True)
        if isinstance(row, JoinItem) and row.workflow_state is PayloadState.SUCCEEDED:
            return "succeeded_gone", []
        return "wrong", [f"gone, but its row is {row and row.workflow_state}"]

    @staticmethod
    def _ring_cause(parent: Parent, ring: Ring, cause: dict[str, Any]) -> list[str]:
        """The failure's cause names the ring, from the refused waiter round to itself."""
        problems: list[str] = []
        if parent.quorum is not None:
            named = cause.get("cycle")  # a join's cause is its summary
        else:
            text = str(cause.get("cause", ""))
            named = text.rpartition(": ")[2].split(" -> ") if ": " in text else None
            if cause.get("payload_id") != ring.waits_on(parent.position):
                problems.append(f"cause names {cause.get('payload_id')}")
        expected = ring.cycle_from(parent.position)
        if named != expected:
            problems.append(f"cycle named {named}, expected {expected}")
        return problems

    @property
    def joins(self) -> JoinStore:
        return JoinStore(self.aws.dynamodb, self.aws.dependencies.table_name)

    def _ring_row(self, parent: Parent, ring: Ring) -> WaiterItem | JoinItem | None:
        if parent.quorum is not None:
            join, _, _ = self.joins.read(parent.join_key)
            return join
        return self.aws.dependencies.get(
            ring.waits_on(parent.position), waiter_id_for(parent.token)
        )

    @staticmethod
    def _ring_refused(parent: Parent, ring: Ring, row: WaiterItem | JoinItem | None) -> bool:
        """The row says the wait was refused with ``DependencyCycle``."""
        if isinstance(row, JoinItem):
            return (
                row.workflow_state is PayloadState.FAILED
                and row.error == CYCLE
                and row.cycle == ring.cycle_from(parent.position)
            )
        return (
            row is not None
            and row.workflow_state is PayloadState.INVALID
            and row.error_name is DependencyError.CYCLE
        )

    def _edge(self, parent: Parent, ring: Ring) -> dict[str, Any] | None:
        """The wait edge ``parent``'s message recorded (``waits#{waiter}``), if any."""
        via = (
            waiter_id_for(parent.token)
            if parent.quorum is None
            else membership_id_for(parent.join_key)
        )
        key = {
            "payload_id": {"S": edge_partition_for(ring.ids[parent.position])},
            "waiter_id": {"S": edge_id_for(via, ring.waits_on(parent.position))},
        }
        found = self.aws.dynamodb.get_item(
            TableName=self.aws.dependencies.table_name, Key=key, ConsistentRead=True
        )
        item: dict[str, Any] | None = found.get("Item")
        return item

    def _edge_refused(self, parent: Parent, ring: Ring) -> bool:
        edge = self._edge(parent, ring)
        return edge is not None and "refused_at" in edge

    def _ring_edge(self, parent: Parent, ring: Ring, *, refused: bool) -> list[str]:
        """A refused wait's edge is marked refused, with its cycle (so no later check follows
        it); a waiting one's is live (so the next wait round the ring meets it)."""
        edge = self._edge(parent, ring)
        if edge is None:
            return ["no wait edge recorded"]
        if not refused:
            return ["waits, but its edge is marked refused"] if "refused_at" in edge else []
        if "refused_at" not in edge:
            return ["refused, but its edge is live"]
        recorded = [entry["S"] for entry in edge.get("refused_cycle", {}).get("L", [])]
        expected = ring.cycle_from(parent.position)
        return [] if recorded == expected else [f"edge records cycle {recorded}, not {expected}"]

    def _states(self) -> dict[str, PayloadStateItem]:
        states: dict[str, PayloadStateItem] = {}
        ids = [self._pid(item) for item in self.deps]
        ids += [payload_id(item, CHAIN_STEP) for item, kind in self.deps.items() if kind == "chain"]
        # A "join" ring's member runs if the join was let through; the other ring ids never.
        ids += [pid for ring in self.rings for pid in ring.ids]
        for pid in ids:
            found = self.aws.states.get(pid)
            if found is not None:
                states[found.payload_id] = found
        return states

    def _waiters(self, report: Report) -> list[str]:
        states = self._states()
        problems: list[str] = []
        # A message in the DLQ may have written rows it never got to resolve: left for a redrive.
        # (Another parent's join naming an owner's join_id exempts its own row, not the owner's.)
        dead = self.dead_tokens
        dead_joins = {join_partition_for(p.join_key) for p in self.parents if p.token in dead}
        dead_rows = {waiter_id_for(token) for token in dead}
        dead_rows |= {membership_id_for(p.join_key) for p in self.parents if p.token in dead}
        report.counts["rows_left_for_redrive"] = 0
        scan: dict[str, Any] = {"TableName": self.aws.dependencies.table_name}
        while True:
            page = self.aws.dynamodb.scan(**scan)
            for item in page.get("Items", []):
                if is_bookkeeping_item(item):
                    continue  # a wait edge (cycle check) or a join's count shard or chunk row
                row = row_from_item(item)
                if row.waiter_id in dead_rows or row.payload_id in dead_joins:
                    report.counts["rows_left_for_redrive"] += 1
                    continue
                state = states.get(row.payload_id)
                pending = row.workflow_state is PayloadState.PROCESSING
                if pending and state is not None and state.state.is_terminal:
                    problems.append(
                        f"{row.payload_id} {row.waiter_id}: PROCESSING, payload {state.state}"
                    )
                if pending and row.payload_id.startswith("join#"):
                    problems.append(f"{row.payload_id}: join never decided")
                if not pending and row.notified_at is None:
                    problems.append(f"{row.payload_id} {row.waiter_id}: resolved, never notified")
            if not page.get("LastEvaluatedKey"):
                return problems
            scan["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def _overlap(self, before: tuple[Any, Any, str], after: tuple[Any, Any, str]) -> bool:
        """Two runs of a payload overlap (an injected Express twin of one attempt is allowed)."""
        if before[2] == after[2] and self.injector.twins[before[2]]:
            return False
        return bool(before[1] is None or after[0] < before[1])

    def _twins(self, state: PayloadStateItem) -> int:
        """Second runs injected for the payload's attempts: the first of an attempt's runs
        to end decides it, so its ARN may be listed beside the one the tracker started."""
        return sum(
            self.injector.twins[naming.execution_name(state.payload_id, attempt)]
            for attempt in range(1, state.attempt + 1)
        )

    def _executions(self) -> list[str]:
        sfn = self.aws.sfn
        problems: list[str] = []
        runs: dict[str, list[tuple[Any, Any, str]]] = {}
        for machine in sfn.list_state_machines()["stateMachines"]:
            if not machine["name"].startswith(f"{PREFIX}-"):
                continue
            pages = sfn.get_paginator("list_executions").paginate(
                stateMachineArn=machine["stateMachineArn"]
            )
            for page in pages:
                for execution in page["executions"]:
                    key = execution["name"].rsplit("-", 1)[0]
                    runs.setdefault(key, []).append(
                        (execution["startDate"], execution.get("stopDate"), execution["name"])
                    )
        for key, spans in runs.items():
            spans.sort(key=lambda span: span[0])
            problems.extend(
                f"{key}: {before[2]} and {after[2]} overlap"
                for before, after in itertools.pairwise(spans)
                if self._overlap(before, after)
            )
        states = self._states()
        names = {name for spans in runs.values() for _, _, name in spans}
        self.express_unstarted = 0
        for state in states.values():
            least = state.attempt
            if state.workflow == EXPRESS:
                # An Express claim whose start failed is never started again (a second start
                # could be a second run): the lease takes it over with a new attempt.
                unstarted = sum(
                    naming.execution_name(state.payload_id, attempt) not in names
                    for attempt in range(1, state.attempt + 1)
                )
                self.express_unstarted += unstarted
                least -= unstarted
            if not least <= len(state.executions) <= state.attempt + self._twins(state):
                runs_of = len(state.executions)
                problems.append(
                    f"{state.payload_id}: attempt {state.attempt}, {runs_of} executions"
                )
        return problems

    def _joins(self, report: Report) -> list[str]:
        """Each join's row decided once, as its members' outcomes say; each outcome counted once.

        Read as the tracker keeps a join: its constant-size row and count shards
        (``JoinStore.read``), its chunk and membership rows (``JoinStore.members``).
        The shards' sums must equal the members whose membership row is terminal,
        outcome by outcome, and each such row must be marked counted with its own
        state (the mark and the shard's add are one transaction, so a member marked
        once was added once). A parent whose message is in the DLQ is left for the
        redrive; a ring's join is checked for its counts only (its outcome: _cycles).
        """
        problems: list[str] = []
        joins = self.joins
        dead = self.dead_tokens
        checked = counted = 0
        for parent in self.parents:
            if parent.quorum is None or parent.token in dead:
                continue
            join_id = parent.join_key
            label = f"join {join_id[:12]}... on {parent.members} (quorum {parent.quorum})"
            join, succeeded, failed = joins.read(join_id)
            if join is None:
                if parent.ring is None:
                    problems.append(f"{label}: no join row")
                continue
            checked += 1
            outcomes, duplicates = joins.members(join_id)
            ended = [outcome for outcome in outcomes if outcome.state is not None]
            wins = sum(outcome.state is PayloadState.SUCCEEDED for outcome in ended)
            if (succeeded, failed) != (wins, len(ended) - wins):
                problems.append(
                    f"{label}: shards count {succeeded} succeeded, {failed} failed; membership "
                    f"rows {wins} succeeded, {len(ended) - wins} failed"
                )
            for outcome in ended:
                marked = self._count_mark(outcome.payload_id, join_id)
                if marked != f"COUNTED:{outcome.state}":
                    problems.append(
                        f"{label}: {outcome.payload_id} ended {outcome.state}, {marked}"
                    )
            counted += len(ended)
            if parent.ring is None:
                problems += [f"{label}: {p}" for p in self._join_outcome(parent, join, outcomes)]
                if duplicates:
                    problems.append(f"{label}: duplicates {duplicates}")
        report.counts.update(joins_checked=checked, join_members_counted=counted)
        return problems

    def _join_outcome(
        self, parent: Parent, join: JoinItem, outcomes: list[MemberOutcome]
    ) -> list[str]:
        """A (non-ring) join: members listed in order, ended as they run, decided as expected.

        Members register in chunks; a join decided early registers no later chunk, so
        the listed members are the first ones, and a listed member without a
        membership row (its chunk stopped once the join was decided) never ran.
        """
        problems: list[str] = []
        expected = [partition_key(self._pid(member)) for member in parent.members]
        listed = [outcome.payload_id for outcome in outcomes]
        if not listed or listed != expected[: len(listed)]:
            problems.append(f"members {listed}, not the first of {expected}")
        if join.registered > len(listed):
            problems.append(f"registered {join.registered}, listed {len(listed)}")
        wins = {partition_key(self._pid(m)) for m in parent.members if self.deps[m] in WINS}
        for outcome in outcomes:
            if (
                outcome.state is None
                and join.workflow_state is not PayloadState.PROCESSING
                and self._count_mark(outcome.payload_id, join.join_id) == "no membership row"
            ):
                continue  # listed by a chunk the decision stopped before it registered them
            should = outcome.payload_id in wins
            if outcome.state is None or (outcome.state is PayloadState.SUCCEEDED) != should:
                problems.append(f"member {outcome.payload_id} ended {outcome.state}")
        allowed = {
            (PayloadState.SUCCEEDED if error is None else PayloadState.FAILED, error)
            for error in self._allowed_errors(parent)
        }
        if (join.workflow_state, join.error) not in allowed:
            problems.append(f"decided {join.workflow_state} {join.error}, expected {allowed}")
        if join.notified_at is None:
            problems.append("decided, never notified")
        return problems

    def _count_mark(self, key: str, join_id: str) -> str | None:
        """``notify_outcome`` of a membership row (``COUNTED:<state>`` once counted)."""
        found = self.aws.dynamodb.get_item(
            TableName=self.aws.dependencies.table_name,
            Key={"payload_id": {"S": key}, "waiter_id": {"S": membership_id_for(join_id)}},
            ConsistentRead=True,
        ).get("Item")
        if found is None:
            return "no membership row"
        mark = found.get("notify_outcome", {}).get("S")
        return str(mark) if mark is not None else None

    def _messages(self, report: Report) -> list[str]:
        while True:
            got = self.aws.sqs.receive_message(
                QueueUrl=self.dlq_url, MaxNumberOfMessages=10, VisibilityTimeout=60
            ).get("Messages", [])
            if not got:
                break
            self.dead.update(m["MessageId"] for m in got)
            self.dead_bodies.update((m["MessageId"], m["Body"]) for m in got)
            self.aws.sqs.delete_message_batch(
                QueueUrl=self.dlq_url,
                Entries=[
                    {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got)
                ],
            )
        # In: the parents' messages and every message the queue delivered (chained steps too).
        messages = set(self.sent) | self.seen
        invalid = {m for m in messages if self.aws.states.get(f"invalid-message/{m}")}
        processed = self.processed & messages
        report.counts.update(
            messages_in=len(messages),
            chained=len(messages - set(self.sent)),
            processed=len(processed - invalid),
            dlq=len(self.dead) + len(self.redriven),
            redriven=len(self.redriven),
            invalid=len(invalid),
            parents_timed_out_by_dlq=len(self.dead_tokens - set(self.fake.sent)),
        )
        accounted = processed | self.dead | invalid | set(self.redriven)
        problems = [f"lost: {m}" for m in sorted(messages - accounted)]
        problems += [f"unknown in DLQ: {m}" for m in sorted(self.dead - messages)]
        problems += [f"processed and dead-lettered: {m}" for m in sorted(processed & self.dead)]
        # The one invalid message a chaos run sends: a join naming another parent's join_id.
        intruders = {intrusion.token for intrusion in self.intrusions.values()}
        problems += [
            f"recorded invalid (all chaos messages are valid): {m}"
            for m in invalid
            if self.sent.get(m) not in intruders
        ]
        return problems
