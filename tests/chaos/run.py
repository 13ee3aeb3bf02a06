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
first token reaches the tracker; after, its message is delivered before the retry's,
after it, or only once the parent was answered, and one delivered on time may be
delivered again (the same SQS record) after the parent was answered. Its answer is
refused (``TaskTimedOut``, the first attempt's task is closed): the tracker must drop
it as a parent gone, and the parent hears only its retry's answer. Joins too: most
name a ``join_id``, so that both sends are one wait (the row keeps both tokens and
answers each once), inline, by manifest or as ``{"url"}`` members.

An operator acts at drawn moments of each round (:mod:`tests.chaos.operator_faults`,
the CLI's own commands in-process): ``operator_release`` releases a live parent (by its
execution ARN, or the payload id and ``--waiter``), ``operator_rerun`` reruns a payload
that ended ``FAILED``/``ABORTED``/``INVALID`` (``replace`` + ``replace_if``; sometimes
twice, both reading the same outcome, the second message held back until the first's
attempt ended). Every claim the tracker makes is recorded, so that no ``SUCCEEDED``
payload is seen to run again unasked, and no rerun to replace what it did not read.

Joins meet two faults of their own: ``join_id_reuse`` (another parent's join names
the same ``join_id`` as the owner's registration moves on to its second chunk) and
``manifest_overwrite`` (the owner's manifest is replaced, same key, once its first
chunk registered). No parent may then be answered with a member it did not name.

After the run settles, the invariants are checked (rows and parents of
dead-lettered messages exempt): among them, each parent answered once with its outcome
(``DependencyReleased`` if an operator released it, as the command reported); no token
answered but its parent's, each join token once; no cycle refused through a wait
released before the refusal; if the DLQ holds anything, it is redriven with
faults off, and every invariant is checked again without exemptions.

The run is put together from parts: :mod:`tests.chaos.workload` (the parents, rings and
their messages), :mod:`tests.chaos.injection`, :mod:`tests.chaos.message_faults` and
:mod:`tests.chaos.operator_faults` (the harness's own faults and what they did) and
:mod:`tests.chaos.invariants` (the report and every check). :class:`ChaosRun` wires them
to the pumps and drives the run.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections import Counter
from typing import Any

from dependency_tracker import app
from dependency_tracker.core import clients, settings
from dependency_tracker.handlers import update_state as update_state_handler
from dependency_tracker.payloads.actions import ProcessAction
from dependency_tracker.payloads.runner import TrackerRunner
from dependency_tracker_local import definitions
from dependency_tracker_local.pumps import SqsPump
from tests.chaos.faults import FakeParents, FaultInjector
from tests.chaos.injection import (
    CHAOS_SWEEPER_MIN_AGE_SECONDS,
    DEFAULT_RATES,
    MAX_RECEIVE_COUNT,
    DeliveryFaults,
    Held,
    Redelivery,
)
from tests.chaos.invariants import (
    EXPRESS_RUNS,
    FIRST_ATTEMPTS,
    LATE_EVENTS,
    LOST_REPORTS,
    NAMED_MEMBERS,
    REDELIVERIES,
    STORMS,
    Invariants,
    Report,
)
from tests.chaos.message_faults import Intrusion, MessageFaults, Overwrite
from tests.chaos.operator_faults import Claims, Operator
from tests.chaos.workload import (
    CHAIN_STEP,
    EXPRESS,
    RING_SIZES,
    WORKFLOW_WEIGHTS,
    Parent,
    Records,
    Ring,
    Workload,
    make_parents,
    random_token,
)
from tests.conftest import PASS_WORKFLOW, PREFIX, REGION, ROLE_ARN, Aws
from tests.harness import Pumps, managed_running, queue_empty

# The harness's names from before the split, which the test modules import from here.
__all__ = [
    "CHAOS_CLAIM_LEASE_SECONDS",
    "CHAOS_SWEEPER_MIN_AGE_SECONDS",
    "DEFAULT_RATES",
    "EXPRESS_RUNS",
    "FIRST_ATTEMPTS",
    "LATE_EVENTS",
    "LOST_REPORTS",
    "MAX_RECEIVE_COUNT",
    "NAMED_MEMBERS",
    "REDELIVERIES",
    "RING_SIZES",
    "STORMS",
    "STREAM_MAX_RETRIES",
    "WORKFLOW_WEIGHTS",
    "ChaosRun",
    "Held",
    "Intrusion",
    "Overwrite",
    "Parent",
    "Redelivery",
    "Report",
    "Ring",
    "make_parents",
    "random_token",
]

# The stream's retries before it discards a record (the template's MaximumRetryAttempts).
STREAM_MAX_RETRIES = 10
# Small, so that a lease runs out within the run (Express: min(this, 600 s)).
CHAOS_CLAIM_LEASE_SECONDS = 2
# What only a lease does to a payload: record a run's lost end, or take the attempt over.
LEASE_OUTCOMES = frozenset({ProcessAction.RECOVERED, ProcessAction.TOOK_OVER})


def _queue_arn(sqs: Any, queue_url: str) -> str:
    attributes = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])
    return str(attributes["Attributes"]["QueueArn"])


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
        self.aws = aws
        self.seed = seed
        self.workload = Workload(
            seed=seed,
            parents=parents,
            dependencies=dependencies,
            join_share=join_share,
            workflow_weights=workflow_weights,
        )
        self.fake = FakeParents(tokens={p.token for p in self.parents})
        self.injector = FaultInjector(
            seed=seed,
            rates=dict(DEFAULT_RATES if rates is None else rates),
            twin=aws.dynamodb,
            on_parent_gone=self.fake.parent_gone,
            plan=dict(plan or {}),
            sfn_twin=aws.sfn,
        )
        self.records = Records()
        self.dlq_url = ""
        self.pumps = Pumps.create(aws)
        self.reports: SqsPump | None = None  # the status-report queue -> update-state
        self.report_url = ""
        self.deliveries = DeliveryFaults(
            aws=aws,
            workload=self.workload,
            records=self.records,
            injector=self.injector,
            fake=self.fake,
            pumps=self.pumps,
            duplicates=duplicates,
        )
        self.messages = MessageFaults(
            aws=aws,
            workload=self.workload,
            records=self.records,
            injector=self.injector,
            fake=self.fake,
        )
        self.operator = Operator(
            aws=aws,
            workload=self.workload,
            records=self.records,
            injector=self.injector,
            fake=self.fake,
        )
        self.claims = Claims()
        # What _instrument sees of the handlers' flows.
        self.lease_outcomes: Counter[str] = Counter()  # a lease's: recovered, took_over
        self.lease_by_payload: dict[str, list[str]] = {}
        self.backoff_waits = 0
        self.express_unstarted = 0  # Express attempts claimed, never started, taken over

    # ------------------------------------------- what the tests read and change

    @property
    def parents(self) -> list[Parent]:
        return self.workload.parents

    @parents.setter
    def parents(self, parents: list[Parent]) -> None:
        self.workload.parents = parents

    @property
    def rings(self) -> list[Ring]:
        return self.workload.rings

    @rings.setter
    def rings(self, rings: list[Ring]) -> None:
        self.workload.rings = rings

    @property
    def deps(self) -> dict[str, str]:
        return self.workload.deps

    @property
    def intrusions(self) -> dict[str, Intrusion]:
        return self.messages.intrusions

    @property
    def redriven(self) -> dict[str, str]:
        return self.records.redriven

    @property
    def sweeps(self) -> int:
        return self.deliveries.sweeps

    @property
    def sweeper_enabled(self) -> bool:
        return self.deliveries.sweeper_enabled

    @sweeper_enabled.setter
    def sweeper_enabled(self, enabled: bool) -> None:
        self.deliveries.sweeper_enabled = enabled

    # ------------------------------------------------------------- setting up

    def setup(self) -> None:
        """DLQ and fast redelivery on the process queue; hooks on the handlers' clients.

        The handlers' settings must name the process queue (chaining publishes to it).
        """
        if app.current().settings.process_queue_url != self.aws.queue_url:
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
        deliveries = self.deliveries
        self.pumps.sqs.handler = deliveries.wrap(
            "process", self.pumps.sqs.handler, sqs_source=True, between=self.messages.overwrite_due
        )
        self.messages.process = self.pumps.sqs.handler
        self.pumps.sqs.handler = self.messages.watch(self.pumps.sqs.handler)
        deliveries.update_state = deliveries.wrap("update-state", self.pumps.executions.handler)
        self.pumps.executions.handler = deliveries.hold_events(deliveries.update_state)
        self.pumps.stream.handler = deliveries.wrap("callback", self.pumps.stream.handler)
        self._setup_express(sqs)
        self._instrument()
        self.messages.plan_join_faults()
        for operation in ("SendMessage", "SendMessageBatch"):
            clients.client("sqs").meta.events.register(
                f"before-parameter-build.sqs.{operation}", self.messages.on_send
            )

    def _setup_express(self, sqs: Any) -> None:
        """The stack's Express workflow and the status-report queue it reports on."""
        bucket = app.current().settings.payload_bucket
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
        reports = self.deliveries.wrap("reports", update_state_handler.lambda_handler)
        self.reports = SqsPump(
            sqs=sqs,
            queue_url=self.report_url,
            queue_arn=_queue_arn(sqs, self.report_url),
            handler=self.deliveries.lose_reports(reports),
            region=REGION,
            function_name="update-state",
        )

    def _instrument(self) -> None:
        """Watch the lease's outcomes; let the callback backoff retry without sleeping.

        Both are parts of the handlers' app (nothing in the product changes): the runner's
        ``settle`` is wrapped to count what a lease did per payload (``recovered`` and
        ``took_over`` come from nothing else), and the callback flow's :class:`Backoff` (the
        sweeper's too: one flow) gets a ``sleep`` that counts instead of waiting (a storm's 6
        tries x 11 deliveries would otherwise sleep for minutes).
        """
        root = app.current()
        runner = root.runner
        assert isinstance(runner, TrackerRunner)
        assert runner.states is root.states
        original = runner.settle

        def settle(payload: Any, row_id: str | None, **kwargs: Any) -> ProcessAction:
            outcome = original(payload, row_id, **kwargs)
            if outcome in LEASE_OUTCOMES:
                self.lease_outcomes[outcome.value] += 1
                self.lease_by_payload.setdefault(payload.id, []).append(outcome.value)
            return outcome

        runner.settle = settle  # type: ignore[method-assign]
        self.claims.attach()
        flow = root.callback
        assert root.sweeper.callback is flow
        flow.backoff = dataclasses.replace(flow.backoff, sleep=self._count_wait)

    def _count_wait(self, _seconds: float) -> None:
        self.backoff_waits += 1

    # -------------------------------------------------------------- running

    def send(self, indexes: range) -> None:
        """Send the parents at ``indexes`` to the process queue (in batches)."""
        self.workload.send(self.aws, self.records, indexes, self.messages.throttled_send)

    def execute(self, timeout: float) -> Report:
        """Set up, send the parents in waves, settle, check; redrive the DLQ and check again."""
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
        if self.records.dead_bodies:
            # What the DLQ holds must be recoverable: redrive it (faults off) and check again.
            self.redrive()
            self.settle(timeout - (time.monotonic() - began))
            self.check(report, suffix=" (after DLQ redrive)")
        report.seconds = time.monotonic() - began
        self.operator.close()
        return report

    def redrive(self) -> None:
        """Move every dead-lettered message back to the process queue, as a DLQ redrive does."""
        records = self.records
        for old, body in sorted(records.dead_bodies.items(), key=lambda kv: kv[1]):
            new = self.aws.sqs.send_message(QueueUrl=self.aws.queue_url, MessageBody=body)
            records.redriven[old] = new["MessageId"]
            if old in records.sent:
                records.sent[new["MessageId"]] = records.sent[old]
        records.dead_bodies.clear()
        records.dead.clear()

    def round(self, timeout: float = 30.0) -> int:
        """One round of every pump, in a fixed order.

        The child executions run in moto's threads; waiting for them to stop
        before the EventBridge pump looks makes each round, and so the handlers'
        call sequence and the faults drawn for it, the same on every run.
        """
        self.deliveries.more_parents()
        self.deliveries.send_due()
        self.operator.moment("queue")
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
        self.operator.moment("ended")
        self.deliveries.watch_held()
        moved += int(self.pumps.stream.pump_once())
        self.deliveries.watch_storms()
        self.operator.moment("told")
        moved += self.messages.late_sends()
        moved += self.operator.late_reruns()
        return moved

    def settle(self, timeout: float) -> None:
        """Pump until every source is drained and nothing runs; fail at the deadline."""
        deadline = time.monotonic() + timeout
        deliveries = self.deliveries
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
                or deliveries.late
                or (
                    deliveries.sweeper_enabled
                    and (deliveries.unanswered_storms() or deliveries.unswept())
                )
            )
            quiet = 0 if busy else quiet + 1
            if quiet >= 2 and (
                deliveries.finish()
                or self.messages.late_sends(anyway=True)
                or self.operator.late_reruns(anyway=True)
            ):
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
        invariants = Invariants(
            aws=self.aws,
            workload=self.workload,
            records=self.records,
            fake=self.fake,
            injector=self.injector,
            deliveries=self.deliveries,
            messages=self.messages,
            lease_by_payload=self.lease_by_payload,
            operator=self.operator,
            claims=self.claims,
        )
        if report is None:
            report = invariants.new_report()
        self._take_dead_letters()
        invariants.check(report, suffix)
        self.express_unstarted = invariants.express_unstarted
        self._tally(report)
        return report

    def _take_dead_letters(self) -> None:
        """Move what the process DLQ holds into the records (ids and bodies, for a redrive)."""
        while True:
            got = self.aws.sqs.receive_message(
                QueueUrl=self.dlq_url, MaxNumberOfMessages=10, VisibilityTimeout=60
            ).get("Messages", [])
            if not got:
                return
            self.records.dead.update(m["MessageId"] for m in got)
            self.records.dead_bodies.update((m["MessageId"], m["Body"]) for m in got)
            self.aws.sqs.delete_message_batch(
                QueueUrl=self.dlq_url,
                Entries=[
                    {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got)
                ],
            )

    def _tally(self, report: Report) -> None:
        """The run's figures beside the invariants."""
        # The stream's and EventBridge's on-failure destinations are DLQs too: counted; a
        # parent left waiting because of one still fails the resume check.
        report.counts["stream_dead_letters"] = len(self.pumps.stream.dead_letters)
        report.counts["eventbridge_dead_letters"] = len(self.pumps.executions.dead_letters)
        deliveries, injector, records = self.deliveries, self.injector, self.records
        report.counts.update(
            parents_join=sum(p.quorum is not None and p.ring is None for p in self.parents),
            parents_wait_for=sum(p.wait_for is not None for p in self.parents),
            parents_late=len(deliveries.late_parents),
            parents_late_again=deliveries.late_parents_again,
            parents_gone=len(self.fake.gone),
            resumed=len(self.fake.sent),
            refused_sends=sum(self.fake.refused.values()),
            lease_recovered=self.lease_outcomes["recovered"],
            lease_took_over=self.lease_outcomes["took_over"],
            express_starts_by_tracker=sum(injector.express_starts.values()),
            express_twin_runs=sum(injector.twins.values()),
            express_reports_lost=len(deliveries.lost_reports),
            express_attempts_never_started=self.express_unstarted,
            late_events_held=len(deliveries.held),
            storm_throttled_sends=injector.storm_calls,
            storm_records_discarded=sum(deliveries.storms.values()),
            sweeps=deliveries.sweeps,
            sweep_failures=deliveries.sweep_failures,
            backoff_waits_skipped=self.backoff_waits,
            **{f"crashed_{k}": v for k, v in sorted(records.crashes.items())},
            **{f"invocations_{k}": v for k, v in sorted(records.invocations.items())},
        )

    def check_logs(self, report: Report, log_text: str) -> None:
        """``log_text``: every log line the handlers wrote, as shipped (JSON, extra keys)."""
        assert "callback handled" in log_text, "no handler log captured"
        leaked = [p.token[:24] + "..." for p in self.parents if p.token in log_text]
        report.invariants["no whole task token in a log line"] = leaked
