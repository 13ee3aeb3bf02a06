"""What a chaos run must hold once it settled: :class:`Report` and every invariant check.

:class:`Invariants` is handed what it reads: the account (``aws``), the workload, the
harness's records, the fake parents (what each heard), the injector, and the
bookkeeping of the harness's faults. Each check is a list of violations; rows and
parents of dead-lettered messages are exempt (left for the redrive). The join and
dependency-cycle checks live in :mod:`tests.chaos.join_invariants` and
:mod:`tests.chaos.cycle_invariants`.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from dependency_tracker import app
from dependency_tracker.core import naming
from dependency_tracker.core.enums import PayloadState
from dependency_tracker.core.tokens import token_hash
from dependency_tracker.payloads.runs import lease_seconds
from dependency_tracker.table.items import join_partition_for, membership_id_for, waiter_id_for
from dependency_tracker.table.keys import partition_key
from dependency_tracker.table.rows import is_bookkeeping_item, row_from_item
from tests.chaos.cycle_invariants import CYCLES, CYCLES_HELD, CycleChecks
from tests.chaos.join_invariants import JoinChecks
from tests.chaos.message_faults import allowed_errors
from tests.chaos.operator_invariants import (
    RELEASED,
    RELEASES,
    SUCCEEDED_RUNS,
    OperatorChecks,
    released_by_command,
)
from tests.chaos.workload import EXPRESS, WINS
from tests.conftest import PREFIX

if TYPE_CHECKING:
    from dependency_tracker.table.items import PayloadStateItem
    from tests.chaos.faults import FakeParents, FaultInjector, Sent
    from tests.chaos.injection import DeliveryFaults
    from tests.chaos.message_faults import FirstAttempt, MessageFaults
    from tests.chaos.operator_faults import Claims, Operator
    from tests.chaos.workload import Parent, Records, Workload
    from tests.conftest import Aws

MESSAGES = "messages: in = processed + DLQ + invalid"
RESUMES = "parents resumed exactly once, right outcome"
WAITERS = "no PROCESSING waiter on a terminal payload"
EXECUTIONS = "never two live executions per payload"
JOINS = "joins decided once, each member outcome counted once"
EXPRESS_RUNS = "express: one run per attempt, one outcome per payload"
LOST_REPORTS = "lost Express reports: recovered by the lease, parents answered once"
LATE_EVENTS = "late events: the lease recorded the run, no second attempt, event repeated"
REDELIVERIES = "older events delivered again: stale or repeated, nothing changed"
STORMS = "callback storms: nothing dropped, each parent answered once"
NAMED_MEMBERS = "no parent answered with a member it did not name"
FIRST_ATTEMPTS = "a throttled send's first token: answered, refused, recorded gone"
TOKENS = "no token answered but its parent's; each join token answered once"


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
        """The report as ``make chaos`` prints it."""
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


class Invariants:
    """Every invariant of a settled chaos run, read from what it is handed."""

    def __init__(
        self,
        *,
        aws: Aws,
        workload: Workload,
        records: Records,
        fake: FakeParents,
        injector: FaultInjector,
        deliveries: DeliveryFaults,
        messages: MessageFaults,
        lease_by_payload: dict[str, list[str]],
        operator: Operator,
        claims: Claims,
    ) -> None:
        self.aws = aws
        self.workload = workload
        self.records = records
        self.fake = fake
        self.injector = injector
        self.deliveries = deliveries
        self.messages = messages
        self.lease_by_payload = lease_by_payload
        self.operator = operator
        self.joins = JoinChecks(
            aws=aws, workload=workload, records=records, fake=fake, messages=messages
        )
        self.released = released_by_command(operator)
        self.cycles = CycleChecks(
            aws=aws, workload=workload, records=records, fake=fake, released=self.released
        )
        self.operations = OperatorChecks(
            aws=aws,
            workload=workload,
            records=records,
            fake=fake,
            operator=operator,
            claims=claims,
        )
        # Express attempts claimed, never started, taken over (found by the executions check).
        self.express_unstarted = 0

    def new_report(self) -> Report:
        """An empty report of the run, its faults counted so far."""
        parents = self.workload.parents
        return Report(
            seed=self.workload.seed,
            parents=sum(p.ring is None for p in parents),
            cycle_parents=sum(p.ring is not None for p in parents),
            dependencies=len(self.workload.deps),
            faults=self.injector.summary(),
        )

    def check(self, report: Report, suffix: str = "") -> None:
        """Every invariant into ``report`` (its name + ``suffix``), with their counts."""
        invariants, counts = report.invariants, report.counts
        invariants[MESSAGES + suffix] = self._messages(counts)
        invariants[RESUMES + suffix] = self._resumes()
        invariants[WAITERS + suffix] = self._waiters(counts)
        invariants[EXECUTIONS + suffix] = self._executions()
        invariants[JOINS + suffix] = self.joins.decided_once(counts)
        invariants[CYCLES + suffix] = self.cycles.check(counts, self._states())
        invariants[CYCLES_HELD + suffix] = self.cycles.refusals_held(counts)
        invariants[EXPRESS_RUNS + suffix] = self._express_runs(counts)
        invariants[LOST_REPORTS + suffix] = self._lost_reports()
        invariants[LATE_EVENTS + suffix] = self._late_events()
        invariants[REDELIVERIES + suffix] = self._redeliveries(counts)
        invariants[STORMS + suffix] = self._storms(counts)
        invariants[NAMED_MEMBERS + suffix] = self.joins.named_members(counts)
        invariants[FIRST_ATTEMPTS + suffix] = self._first_attempts(counts)
        invariants[TOKENS + suffix] = self.joins.tokens(counts, self.messages.first_attempts)
        invariants[RELEASES + suffix] = self.operations.releases(counts)
        invariants[SUCCEEDED_RUNS + suffix] = self.operations.succeeded_runs(counts)

    def _states(self) -> dict[str, PayloadStateItem]:
        return self.workload.states(self.aws.states)

    # ------------------------------------------------------------ messages

    def _messages(self, counts: dict[str, int]) -> list[str]:
        """Every message sent or delivered was processed, dead-lettered or recorded invalid."""
        records = self.records
        # In: the parents' messages and every message the queue delivered (chained steps too).
        messages = set(records.sent) | records.seen
        invalid = {m for m in messages if self.aws.states.get(f"invalid-message/{m}")}
        processed = records.processed & messages
        counts.update(
            messages_in=len(messages),
            chained=len(messages - set(records.sent)),
            processed=len(processed - invalid),
            dlq=len(records.dead) + len(records.redriven),
            redriven=len(records.redriven),
            invalid=len(invalid),
            parents_timed_out_by_dlq=len(records.dead_tokens - set(self.fake.sent)),
        )
        accounted = processed | records.dead | invalid | set(records.redriven)
        problems = [f"lost: {m}" for m in sorted(messages - accounted)]
        problems += [f"unknown in DLQ: {m}" for m in sorted(records.dead - messages)]
        problems += [f"processed and dead-lettered: {m}" for m in sorted(processed & records.dead)]
        # The one invalid message a chaos run sends: a join naming another parent's join_id.
        intruders = {intrusion.token for intrusion in self.messages.intrusions.values()}
        problems += [
            f"recorded invalid (all chaos messages are valid): {m}"
            for m in invalid
            if records.sent.get(m) not in intruders
        ]
        return problems

    # ------------------------------------------------------------- parents

    def _resumes(self) -> list[str]:
        problems: list[str] = []
        dead = self.records.dead_tokens
        attempted = {done.parent.token for done in self.operator.releases}
        for parent in self.workload.parents:
            if parent.ring is not None:
                continue  # what it may hear depends on the rest of its ring: the cycle check
            label = f"{parent.token[:24]}... on {parent.members} (quorum {parent.quorum})"
            sends = self.fake.sent.get(parent.token, [])
            if parent.token in self.fake.gone:
                if sends:
                    problems.append(f"{label}: resumed after it timed out")
                continue
            if not sends and parent.token in dead:
                continue  # its message was dead-lettered: the parent times out (counted)
            if len(sends) != 1:
                problems.append(f"{label}: resumed {len(sends)} times")
                continue
            allowed = allowed_errors(parent, self.messages.overwrites)
            if parent.token in attempted:
                allowed.add(RELEASED)  # an operator released it (RELEASES checks by whom)
            problems.extend(
                f"{label}: {problem}" for problem in self._outcome(parent, sends[0], allowed)
            )
        return problems

    def _outcome(self, parent: Parent, sent: Sent, allowed: set[str | None]) -> list[str]:
        """What is wrong with the send that resumed ``parent`` (and any re-send)."""
        problems = [
            f"contradictory re-send {again.error} after {sent.error}"
            for again in self.fake.late.get(parent.token, [])
            if (again.operation, again.error) != (sent.operation, sent.error)
        ]
        pid = self.workload.pid
        if sent.error not in allowed:
            problems.append(f"expected {parent.expected_error}, got {sent.error}")
        elif sent.error is None and parent.quorum is None:
            output = json.loads(sent.output or "{}")
            (member,) = parent.members
            if output.get("payload_id") != (parent.wait_for or pid(member)):
                problems.append(f"output names {output.get('payload_id')}")
            if output.get("state") != "SUCCEEDED":
                problems.append(f"output state {output.get('state')}")
        elif sent.error is None:
            output = json.loads(sent.output or "{}")
            winners = {pid(m) for m in parent.members if self.workload.deps[m] in WINS}
            succeeded = set(output.get("succeeded", []))
            if output.get("quorum") != parent.quorum or len(succeeded) < (parent.quorum or 0):
                problems.append(f"join output {output}")
            if not succeeded <= winners:
                problems.append(f"join counts {sorted(succeeded - winners)} as succeeded")
        return problems

    def _first_attempts(self, counts: dict[str, int]) -> list[str]:
        """A throttled send's first token, delivered: answered once, refused, recorded gone.

        Its row (a waiter row, a join's row keyed by its token, or the parent's named join,
        whose ``answered`` holds it) ends answered ``PARENT_GONE:TaskTimedOut``, or with the
        code an injected fault told its send instead (the tracker did not retry it, nor
        dead-letter it), or ``RELEASED`` by a release of its parent execution that failed
        the parent; whatever the order its message came in (before the retry's, after it,
        after the parent was answered) and however late it was delivered again. Its
        parent, by its retry's token, is checked with the others (resumed once, right
        outcome).
        """
        problems: list[str] = []
        dead = self.records.dead_tokens
        gone = 0
        first_attempts = self.messages.first_attempts
        for token, attempt in sorted(first_attempts.items()):
            parent = attempt.parent
            if token in dead:
                continue  # left for the redrive, as any dead-lettered message
            label = f"first attempt ({attempt.order}, {attempt.form}) {token[:24]}..."
            if self.fake.sent.get(token):
                problems.append(f"{label}: resumed")
            outcome = self._first_outcome(attempt)
            # TaskTimedOut, or what an injected fault told a send instead (InvalidToken).
            told = self.fake.told_gone.get(token, set()) | {"TaskTimedOut"}
            allowed = {f"PARENT_GONE:{code}" for code in told}
            released = outcome is not None and outcome.startswith("RELEASED:")
            if outcome not in allowed and not (released and parent.token in self.released):
                problems.append(f"{label}: answered {outcome}")
            else:
                gone += 1
        orders = self.messages.send_orders
        counts.update(
            parent_sends_throttled_after_send=len(first_attempts),
            first_attempts_gone=gone,
            first_sent_late=sum(a.sent_late for a in first_attempts.values()),
            first_redelivered_late=sum(
                a.redelivered and a.record is not None for a in first_attempts.values()
            ),
            **{f"throttled_{name}": n for name, n in sorted(orders.items())},
        )
        return problems

    def _first_outcome(self, attempt: FirstAttempt) -> str | None:
        """How the first attempt's token was answered, as its row records it."""
        parent, token = attempt.parent, attempt.first.token
        if parent.quorum is not None:
            join, _, _ = self.joins.joins.read(attempt.first.join_key)
            return None if join is None else join.answered.get(token_hash(token))
        pid = parent.wait_for or self.workload.pid(parent.members[0])
        key = {"payload_id": partition_key(pid), "waiter_id": waiter_id_for(token)}
        item = self.aws.dynamodb.get_item(
            TableName=self.aws.dependencies.table_name,
            Key={name: {"S": value} for name, value in key.items()},
            ConsistentRead=True,
        ).get("Item")
        return None if item is None else item.get("notify_outcome", {}).get("S")

    # ---------------------------------------------------------------- rows

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

    def _waiters(self, counts: dict[str, int]) -> list[str]:
        states = self._states()
        problems: list[str] = []
        # A message in the DLQ may have written rows it never got to resolve: left for a redrive.
        # (Another parent's join naming an owner's join_id exempts its own row, not the owner's.)
        dead = self.records.dead_tokens
        parents = self.workload.parents
        dead_joins = {join_partition_for(p.join_key) for p in parents if p.token in dead}
        dead_rows = {waiter_id_for(token) for token in dead}
        dead_rows |= {membership_id_for(p.join_key) for p in parents if p.token in dead}
        counts["rows_left_for_redrive"] = 0
        scan: dict[str, Any] = {"TableName": self.aws.dependencies.table_name}
        while True:
            page = self.aws.dynamodb.scan(**scan)
            for item in page.get("Items", []):
                if is_bookkeeping_item(item):
                    continue  # a wait edge (cycle check) or a join's count shard or chunk row
                row = row_from_item(item)
                if row.waiter_id in dead_rows or row.payload_id in dead_joins:
                    counts["rows_left_for_redrive"] += 1
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

    # ---------------------------------------------------------- executions

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
        started: list[tuple[str, str, Any]] = []  # (name, ARN, start date) of every run
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
                    started.append(
                        (execution["name"], execution["executionArn"], execution["startDate"])
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
                least -= unstarted + self._unknowable(state, started)
            if not least <= len(state.executions) <= state.attempt + self._twins(state):
                runs_of = len(state.executions)
                problems.append(
                    f"{state.payload_id}: attempt {state.attempt}, {runs_of} executions"
                )
        return problems

    def _unknowable(self, state: PayloadStateItem, started: list[tuple[str, str, Any]]) -> int:
        """Express attempts whose runs no tracker could record, and that ran alone.

        An attempt whose start was never recorded (the process Lambda died after
        ``StartExecution``, or its ``set_processing`` failed) and whose every run's report
        was lost: AWS lists and describes no Express run, so its ARN reaches nobody. It is
        no second live run if nothing of a later attempt started within the Express lease
        after it (an Express run ends within the lease; locally within the round).
        """
        lease = timedelta(seconds=lease_seconds(self._claim_lease(), express=True))
        by_attempt: dict[int, list[tuple[str, Any]]] = {}
        for name, arn, start in started:
            attempt = naming.attempt_of(name, state.payload_id)
            if attempt is not None:
                by_attempt.setdefault(attempt, []).append((arn, start))
        recorded = set(state.executions)
        count = 0
        for attempt, attempt_runs in by_attempt.items():
            arns = {arn for arn, _ in attempt_runs}
            if arns & recorded or not arns <= self.deliveries.lost_runs:
                continue
            last = max(start for _, start in attempt_runs)
            later = [
                start
                for other, other_runs in by_attempt.items()
                if other > attempt
                for _, start in other_runs
            ]
            if all(start - last >= lease for start in later):
                count += 1
        return count

    @staticmethod
    def _claim_lease() -> int:
        return app.current().settings.claim_lease_seconds  # the handlers', as the run set it

    # ---------------------------------- the Express and late-event invariants

    def _express_runs(self, counts: dict[str, int]) -> list[str]:
        """One run per attempt: the tracker started each Express attempt once, and every
        success a parent heard, and every succeeded row, names the payload's recorded run."""
        problems = [
            f"{name}: the tracker started it {n} times"
            for name, n in sorted(self.injector.express_starts.items())
            if n > 1
        ]
        states = self._states()
        for parent in self.workload.parents:
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
        counts["succeeded_rows_checked"] = checked
        return problems

    def _waiting_on(self, pid: str) -> list[Parent]:
        """The single-wait parents of ``pid`` (not dead-lettered, not made gone)."""
        dead = self.records.dead_tokens
        return [
            parent
            for parent in self.workload.parents
            if parent.ring is None
            and parent.quorum is None
            and (parent.wait_for or self.workload.pid(parent.members[0])) == pid
            and parent.token not in dead
            and parent.token not in self.fake.gone
        ]

    def _lost_reports(self) -> list[str]:
        """A lost Express report: the payload still ended, and its parents heard it once."""
        problems: list[str] = []
        states = self._states()
        for pid in sorted(set(self.deliveries.lost_reports.values())):
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
        for arn, held in sorted(self.deliveries.held.items()):
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

    def _redeliveries(self, counts: dict[str, int]) -> list[str]:
        """An older event delivered again after newer ones: stale or repeated, nothing changed."""
        problems: list[str] = []
        redeliveries = self.deliveries.redeliveries
        actions = Counter(late.action for late in redeliveries.values())
        counts.update(redelivered_stale=actions["stale"], redelivered_repeated=actions["repeated"])
        for arn, late in sorted(redeliveries.items()):
            if late.action not in {"stale", "repeated"}:
                problems.append(f"{arn.rsplit(':', 1)[1]}: redelivered, {late.action}")
            if late.changed is not None:
                problems.append(f"{arn.rsplit(':', 1)[1]}: redelivery changed {late.changed}")
        return problems

    def _storms(self, counts: dict[str, int]) -> list[str]:
        """Every parent a storm hit was answered once: by the stream or by the sweeper."""
        problems: list[str] = []
        dead = self.records.dead_tokens
        storms = self.deliveries.storms
        for token, discarded in sorted(storms.items()):
            if token in dead or token in self.fake.gone:
                continue
            heard = len(self.fake.sent.get(token, []))
            if heard != 1:
                what = "discarded by the stream" if discarded else "stormed"
                problems.append(f"{token[:24]}...: {what}, answered {heard} times")
        counts["storms"] = len(storms)
        return problems
