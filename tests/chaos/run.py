"""A seeded chaos run: parents on overlapping dependencies, faults everywhere, then invariants.

Parents are task tokens (:class:`~tests.chaos.faults.FakeParents` plays Step
Functions' side of them). Each one waits on one dependency, on a k-of-n join
over several, or (``wait_for``) on the second step a two-step payload chains
to. Dependencies succeed, fail or are invalid, and many parents share each.
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
from dependency_tracker.models import (
    PayloadState,
    join_partition_for,
    membership_id_for,
    row_from_item,
    waiter_id_for,
)
from dependency_tracker.tokens import token_hash
from tests.chaos.faults import Crash, FakeParents, FaultInjector, Sent, running
from tests.conftest import PASS_WORKFLOW, PREFIX, Aws, payload, payload_id
from tests.harness import Pumps, managed_running, queue_empty

if TYPE_CHECKING:
    from collections.abc import Callable

    from dependency_tracker.models import PayloadStateItem

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


@dataclass
class Parent:
    """One waiting parent: its token, what it waits on, and what it must hear."""

    token: str
    members: list[str]  # dependency item ids
    quorum: int | None  # None: a single wait (Map pattern), else a join
    expected_error: str | None  # None: SendTaskSuccess
    wait_for: str | None = None  # a wait-only parent: the payload id it waits on


@dataclass
class Report:
    """What one chaos run found."""

    seed: int
    parents: int
    dependencies: int
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
        token = f"AQB-chaos-{self.seed}-{index:04d}-" + "".join(
            rng.choices("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/", k=300)
        )
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
                parents=len(self.parents),
                dependencies=len(self.deps),
                faults=self.injector.summary(),
            )
        invariants = report.invariants
        invariants["messages: in = processed + DLQ + invalid" + suffix] = self._messages(report)
        invariants["parents resumed exactly once, right outcome" + suffix] = self._resumes()
        invariants["no PROCESSING waiter on a terminal payload" + suffix] = self._waiters(report)
        invariants["never two live executions per payload" + suffix] = self._executions()
        # The stream's and EventBridge's on-failure destinations are DLQs too: counted; a
        # parent left waiting because of one still fails the resume check above.
        report.counts["stream_dead_letters"] = len(self.pumps.stream.dead_letters)
        report.counts["eventbridge_dead_letters"] = len(self.pumps.executions.dead_letters)
        report.counts.update(
            parents_join=sum(p.quorum is not None for p in self.parents),
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

    def _states(self) -> dict[str, PayloadStateItem]:
        states: dict[str, PayloadStateItem] = {}
        ids = [self._pid(item) for item in self.deps]
        ids += [payload_id(item, CHAIN_STEP) for item, kind in self.deps.items() if kind == "chain"]
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
