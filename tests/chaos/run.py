"""A seeded chaos run: parents on overlapping dependencies, faults everywhere, then invariants.

Parents are task tokens (:class:`~tests.chaos.faults.FakeParents` plays Step
Functions' side of them). Each one waits on one dependency, on a k-of-n join
over several, or (``wait_for``) on the second step a two-step payload chains
to. Dependencies succeed, fail or are invalid, and many parents share each.
A few parents (:class:`Ring`) wait on each other in a dependency cycle, naming
their ``waiter_payload_id``: of each cycle at least one wait must be refused
with ``DependencyCycle``, and the others may only wait.
The messages go to the process queue; the harness pumps (real handlers over
moto) run them while :class:`~tests.chaos.faults.FaultInjector` throttles,
fails, races and crashes the handlers' own AWS calls, and some deliveries are
duplicated. Redelivery follows the sources: SQS leaves a failed message for
the next receive (the queue's visibility timeout is 0) and dead-letters it
after ``maxReceiveCount``; the stream retries from the first failed record;
EventBridge retries the event.

After the run settles, the invariants are checked (rows and parents of
dead-lettered messages exempt); if the DLQ holds anything, it is redriven with
faults off, and every invariant is checked again without exemptions.
"""

from __future__ import annotations

import itertools
import json
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dependency_tracker import clients, settings
from dependency_tracker.keys import partition_key
from dependency_tracker.models import (
    DependencyError,
    JoinItem,
    PayloadState,
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
from dependency_tracker.tokens import token_hash
from tests.chaos.faults import Crash, FakeParents, FaultInjector, Sent, running
from tests.conftest import PASS_WORKFLOW, PREFIX, Aws, payload, payload_id
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
}
MAX_RECEIVE_COUNT = 20
# "chain": a two-step payload (pass, then chain2): update-state publishes step 2 to the queue.
WORKFLOW_WEIGHTS = {"pass": 0.55, "chain": 0.15, "fail": 0.2, "invalid": 0.1}
WINS = frozenset({"pass", "chain"})
CHAIN_STEP = "chain2"
FAILURE_ERRORS = {"fail": "DependencyFailed", "invalid": "DependencyInvalid"}
# Dependency cycles: this share more parents (at least one ring of each shape) wait on each
# other in rings. Shapes, by the parents in them: "pair" (a waits on b, b on a), "join" (a
# quorum-1 join whose waiter is j, over one payload w whose wait is on j), "triangle" (a on
# b on c on a) and "self" (a waits on itself). The first rings are one of each, in that
# order; the rest are drawn by weight.
CYCLE_SHARE = 0.05
RING_SIZES = {"pair": 2, "join": 2, "triangle": 3, "self": 1}
RING_WEIGHTS = {"pair": 0.4, "join": 0.2, "triangle": 0.25, "self": 0.15}
CYCLE = DependencyError.CYCLE.value
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


def random_token(rng: random.Random, prefix: str) -> str:
    return prefix + "".join(rng.choices(TOKEN_ALPHABET, k=300))


def make_parents(rng: random.Random, parents: int, dependencies: int) -> dict[str, str]:
    """Dependency item id -> workflow."""
    workflows = list(WORKFLOW_WEIGHTS)
    weights = list(WORKFLOW_WEIGHTS.values())
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
    ) -> None:
        self.duplicates = duplicates
        self.aws = aws
        self.seed = seed
        self.rng = random.Random(seed)
        self.deps = make_parents(self.rng, parents, dependencies)
        self.parents = [self._parent(index, join_share) for index in range(parents)]
        # On top of the others (which stay those of the seed): about CYCLE_SHARE more.
        self.rings = self._rings(max(sum(RING_SIZES.values()), round(parents * CYCLE_SHARE)))
        self.fake = FakeParents(tokens={p.token for p in self.parents})
        self.injector = FaultInjector(
            seed=seed,
            rates=dict(DEFAULT_RATES if rates is None else rates),
            twin=aws.dynamodb,
            on_parent_gone=self.fake.parent_gone,
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
        if self.deps[item] == "chain":
            steps = [{"workflow": "pass"}, {"workflow": CHAIN_STEP}]
            return payload(item, "pass", **extra, process=steps)
        return payload(item, self.deps[item], **extra)

    def _pid(self, item: str) -> str:
        return payload_id(item, "pass" if self.deps[item] == "chain" else self.deps[item])

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
        return {
            "join": {
                "task_token": parent.token,
                "quorum": parent.quorum,
                "parent_execution": execution,
            },
            "payloads": [self._payload(m) for m in parent.members],
        }

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
        self.pumps.stream.max_retries = 50
        self.pumps.executions.retry_attempts = 50
        self.pumps.sqs.handler = self._wrap("process", self.pumps.sqs.handler, sqs_source=True)
        self.pumps.executions.handler = self._wrap("update-state", self.pumps.executions.handler)
        self.pumps.stream.handler = self._wrap("callback", self.pumps.stream.handler)

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
            if random.Random(f"{self.seed}|duplicate|{name}|{count}").random() < self.duplicates:
                # At-least-once: the same event is delivered twice (the first answer is lost).
                self.injector.injected["duplicate_delivery"] += 1
                once(event, context)
            response = once(event, context)
            if sqs_source:
                self.seen.update(r["messageId"] for r in event["Records"])
                failed = {item["itemIdentifier"] for item in response["batchItemFailures"]}
                self.processed.update(
                    r["messageId"] for r in event["Records"] if r["messageId"] not in failed
                )
            return response

        return invoke

    # -------------------------------------------------------------- running

    def send(self, indexes: range) -> None:
        entries = [(i, self.parents[i]) for i in indexes]
        for start in range(0, len(entries), 10):
            chunk = entries[start : start + 10]
            response = self.aws.sqs.send_message_batch(
                QueueUrl=self.aws.queue_url,
                Entries=[
                    {"Id": str(i), "MessageBody": json.dumps(self._body(i, p))} for i, p in chunk
                ],
            )
            for ok in response["Successful"]:
                self.sent[ok["MessageId"]] = self.parents[int(ok["Id"])].token

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
        moved = int(self.pumps.sqs.pump_once())
        deadline = time.monotonic() + timeout
        while managed_running(self.aws):
            if time.monotonic() > deadline:
                msg = f"child executions still running after {timeout:.0f}s"
                raise TimeoutError(msg)
            time.sleep(0.005)
        moved += self.pumps.executions.pump_once()
        return moved + int(self.pumps.stream.pump_once())

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
            )
            quiet = 0 if busy else quiet + 1
            if time.monotonic() > deadline:
                msg = f"chaos run did not settle within {timeout:.0f}s (seed {self.seed})"
                raise TimeoutError(msg)
            if not moved:
                time.sleep(0.02)

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
        # The stream's and EventBridge's on-failure destinations are DLQs too: counted; a
        # parent left waiting because of one still fails the resume check above.
        report.counts["stream_dead_letters"] = len(self.pumps.stream.dead_letters)
        report.counts["eventbridge_dead_letters"] = len(self.pumps.executions.dead_letters)
        report.counts.update(
            parents_join=sum(p.quorum is not None and p.ring is None for p in self.parents),
            parents_wait_for=sum(p.wait_for is not None for p in self.parents),
            parents_gone=len(self.fake.gone),
            resumed=len(self.fake.sent),
            refused_sends=sum(self.fake.refused.values()),
            **{f"crashed_{k}": v for k, v in sorted(self.crashes.items())},
            **{f"invocations_{k}": v for k, v in sorted(self.invocations.items())},
        )
        return report

    def check_logs(self, report: Report, log_text: str) -> None:
        """``log_text``: every log line the handlers wrote, as shipped (JSON, extra keys)."""
        assert "callback handled" in log_text, "no handler log captured"
        leaked = [p.token[:24] + "..." for p in self.parents if p.token in log_text]
        report.invariants["no whole task token in a log line"] = leaked

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
        if sent.error != parent.expected_error:
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
        member's own wait is the one that closes the cycle. A parent made gone by an
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
                let_through = outcomes[0] in {"succeeded", "succeeded_gone"}
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
        if (
            ring is not None
            and ring.shape == "join"
            and outcomes[0] in {"succeeded", "succeeded_gone"}
            and self._edge_refused(members[0], ring)
        ):
            # Let through, then refused on a redelivery once its member had won: its wait
            # had ended, so the member's wait closed no cycle any more.
            return "cycles_join_refused_late"
        return None

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
            join, _, _ = self.joins.read(token_hash(parent.token))
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
            else membership_id_for(token_hash(parent.token))
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
        dead_rows = {waiter_id_for(token) for token in self.dead_tokens}
        dead_rows |= {membership_id_for(token_hash(token)) for token in self.dead_tokens}
        dead_joins = {join_partition_for(token_hash(token)) for token in self.dead_tokens}
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
            for before, after in itertools.pairwise(spans):
                if before[1] is None or after[0] < before[1]:
                    problems.append(f"{key}: {before[2]} and {after[2]} overlap")
        states = self._states()
        for state in states.values():
            if state.attempt != len(state.executions):
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
            join_id = token_hash(parent.token)
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
        state = PayloadState.SUCCEEDED if parent.expected_error is None else PayloadState.FAILED
        if (join.workflow_state, join.error) != (state, parent.expected_error):
            problems.append(f"decided {join.workflow_state} {join.error}, expected {state}")
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
        problems += [f"recorded invalid (all chaos messages are valid): {m}" for m in invalid]
        return problems
