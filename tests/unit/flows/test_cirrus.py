"""Cirrus mode, one flow at a time: the process side, the event side and their ordering rule.

cirrus's table items here are written by the test the way cirrus-geo 2.0.0's
``StateDB`` writes them (``state_updated = "{STATE}_{iso}"``, ``executions``
appended at each claim): these tests check the tracker's reading of them. That
cirrus really writes and announces them so is proven by tests/cirrus, which runs
cirrus-geo's own Lambdas.
"""

from __future__ import annotations

import itertools
import json
import random
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest

from dependency_tracker.app import App
from dependency_tracker.cirrus.flow import CirrusAction, CirrusEvents, CirrusRuns
from dependency_tracker.cirrus.models import (
    CirrusStateItem,
    WorkflowEvent,
    WorkflowEventType,
    cirrus_id_problem,
    cirrus_key,
)
from dependency_tracker.cirrus.store import CirrusQueue, CirrusStateTable
from dependency_tracker.core import clients
from dependency_tracker.core.enums import PayloadState
from dependency_tracker.core.errors import InvalidMessageError
from dependency_tracker.joins.messages import JoinMessage
from dependency_tracker.payloads.bucket import PayloadBucket
from dependency_tracker.payloads.model import ProcessPayload
from dependency_tracker.sweeper.flow import SweeperFlow
from dependency_tracker.sweeper.store import SweepStore
from dependency_tracker.table.dependency_table import DependencyTable
from dependency_tracker.table.items import waiter_id_for
from dependency_tracker.waits.messages import ProcessMessage, WaitMessage
from dependency_tracker.waits.process import ProcessAction
from tests.conftest import DEPENDENCY_TABLE, STATE_TABLE, Aws, payload
from tests.interleave import Run, Scheduler, explore

if TYPE_CHECKING:
    from collections.abc import Sequence

    from dependency_tracker.intake.route import Intake

CIRRUS_TABLE = "cirrus-state"
CIRRUS_BUCKET = "cirrus-payloads"
EXECUTIONS = "arn:aws:states:us-east-1:123456789012:execution:cirrus-pass:"
_ids = itertools.count()


# ---------------------------------------------------------------- cirrus's side, as data


def fresh_payload(workflow: str = "pass") -> ProcessPayload:
    return ProcessPayload.model_validate(payload(f"cirrus-{next(_ids)}", workflow))


def cirrus_records(
    dynamodb: Any, payload_id: str, state: PayloadState, run: int, **extra: Any
) -> None:
    """Write cirrus's item as StateDB does: the state, and every run claimed so far."""
    item: dict[str, Any] = {
        **{name: {"S": value} for name, value in cirrus_key(payload_id).items()},
        "state_updated": {"S": f"{state.value}_{datetime.now(UTC).isoformat()}"},
        "created": {"S": "2026-11-23T00:00:00+00:00"},
        "updated": {"S": datetime.now(UTC).isoformat()},
        "executions": {"L": [{"S": f"{EXECUTIONS}run-{n}"} for n in range(1, run + 1)]},
    }
    for name, value in extra.items():
        item[name] = (
            {"L": [{"S": entry} for entry in value]} if isinstance(value, list) else {"S": value}
        )
    dynamodb.put_item(TableName=CIRRUS_TABLE, Item=item)


@dataclass
class Cirrus:
    """The tracker's view of one cirrus deployment in moto."""

    aws: Aws
    queue_url: str

    def runs(self, dynamodb: Any | None = None) -> CirrusRuns:
        client = dynamodb or self.aws.dynamodb
        return CirrusRuns(
            states=CirrusStateTable(client, CIRRUS_TABLE),
            queue=CirrusQueue(self.aws.sqs, self.queue_url, s3=self.aws.s3, bucket=CIRRUS_BUCKET),
            dependencies=DependencyTable(client, DEPENDENCY_TABLE, resolve_concurrency=1),
            executions_url=f"s3://{CIRRUS_BUCKET}/cirrus/executions",
        )

    def events(self, dynamodb: Any | None = None) -> CirrusEvents:
        client = dynamodb or self.aws.dynamodb
        return CirrusEvents(
            states=CirrusStateTable(client, CIRRUS_TABLE),
            dependencies=DependencyTable(client, DEPENDENCY_TABLE, resolve_concurrency=1),
            executions_url=f"s3://{CIRRUS_BUCKET}/cirrus/executions",
        )

    def process_flow(self, dynamodb: Any | None = None) -> Intake:
        client = dynamodb or self.aws.dynamodb
        return App(
            self.aws.settings.model_copy(
                update={"cirrus_state_table": CIRRUS_TABLE, "cirrus_process_queue_url": "q"}
            ),
            {
                "dynamodb": client,
                "stepfunctions": self.aws.sfn,
                "s3": self.aws.s3,
                "sqs": self.aws.sqs,
            },
            dependencies=DependencyTable(client, DEPENDENCY_TABLE, resolve_concurrency=1),
            bucket=PayloadBucket(self.aws.s3),
            runner=self.runs(client),
        ).process

    def forwarded(self) -> list[dict[str, Any]]:
        """Bodies on cirrus's process queue (received and deleted)."""
        bodies: list[dict[str, Any]] = []
        while True:
            got = self.aws.sqs.receive_message(QueueUrl=self.queue_url, MaxNumberOfMessages=10)
            messages = got.get("Messages", [])
            if not messages:
                return bodies
            for message in messages:
                bodies.append(json.loads(message["Body"]))
                self.aws.sqs.delete_message(
                    QueueUrl=self.queue_url, ReceiptHandle=message["ReceiptHandle"]
                )


@pytest.fixture
def cirrus(aws: Aws) -> Cirrus:
    aws.dynamodb.create_table(
        TableName=CIRRUS_TABLE,
        BillingMode="PAY_PER_REQUEST",
        KeySchema=[
            {"AttributeName": "collections_workflow", "KeyType": "HASH"},
            {"AttributeName": "itemids", "KeyType": "RANGE"},
        ],
        AttributeDefinitions=[
            {"AttributeName": "collections_workflow", "AttributeType": "S"},
            {"AttributeName": "itemids", "AttributeType": "S"},
        ],
    )
    aws.s3.create_bucket(Bucket=CIRRUS_BUCKET)
    queue_url = aws.sqs.create_queue(QueueName="cirrus-process")["QueueUrl"]
    return Cirrus(aws, queue_url)


def wait(model: ProcessPayload, token: str) -> ProcessMessage:
    body = model.model_dump(mode="json", exclude_none=True)
    return ProcessMessage.model_validate({"payload": body, "callback": {"task_token": token}})


def row_state(aws: Aws, model: ProcessPayload, token: str) -> PayloadState:
    row = aws.dependencies.get(model.id, waiter_id_for(token))
    assert row is not None
    return row.workflow_state


# ---------------------------------------------------------------- models


def test_the_key_and_the_id_round_trip_as_cirrus_splits_them() -> None:
    pid = "sentinel-2-l2a/landsat_c2/workflow-cog-archive/S2A_1/S2B_2"
    key = cirrus_key(pid)
    assert key == {
        "collections_workflow": "sentinel-2-l2a/landsat_c2_cog-archive",
        "itemids": "S2A_1/S2B_2",
    }
    item = CirrusStateItem.model_validate({**key, "state_updated": "FAILED_2026-11-23T00:00:00"})
    assert item.payload_id == pid
    assert item.state is PayloadState.FAILED


def test_ids_and_workflows_cirrus_would_refuse_are_named() -> None:
    assert cirrus_id_problem("c/workflow-w/a", "w") is None
    problem = cirrus_id_problem("workflow-w/key-abc", "w")
    assert problem is not None
    assert "idempotency_key" in problem
    # cirrus would key this as "c/workflow-w/a": refused, not confused with it
    problem = cirrus_id_problem("c/workflow-w/a/workflow-z/b", "w")
    assert problem is not None
    assert "twice" in problem
    problem = cirrus_id_problem("c/workflow-my_wf/a", "my_wf")
    assert problem is not None
    assert "'_'" in problem
    # the range key is the item ids as they are: 1,024 bytes at most
    assert cirrus_id_problem("c/workflow-w/" + "a" * 1024, "w") is None
    problem = cirrus_id_problem("c/workflow-w/" + "a" * 1025, "w")
    assert problem is not None
    assert "1025 bytes" in problem


def test_an_event_arrives_raw_or_in_an_sns_envelope_and_names_its_execution() -> None:
    event = {
        "event_type": "SUCCEEDED",
        "payload_id": "c/workflow-w/a",
        "isotimestamp": "2026-11-23T00:00:00+00:00",
        "execution": "https://console.aws.amazon.com/states/home#/executions/details/"
        "arn:aws:states:us-east-1:123456789012:execution:cirrus-w:abc",
    }
    raw = WorkflowEvent.from_body(json.dumps(event))
    wrapped = WorkflowEvent.from_body(
        json.dumps({"Type": "Notification", "Message": json.dumps(event)})
    )
    assert raw == wrapped
    assert raw.kind is WorkflowEventType.SUCCEEDED
    assert raw.execution_arn == "arn:aws:states:us-east-1:123456789012:execution:cirrus-w:abc"
    # before v2 the output was "payload_url"
    old = WorkflowEvent.from_body(json.dumps({**event, "payload_url": "s3://b/k"}))
    assert old.output_payload_url == "s3://b/k"
    assert WorkflowEvent.from_body(json.dumps({**event, "event_type": "NEW"})).kind is None
    with pytest.raises(ValueError, match="not a cirrus workflow event"):
        WorkflowEvent.from_body('{"payload_id": "x"}')


# ---------------------------------------------------------------- process side


def test_a_payload_cirrus_never_saw_is_forwarded_with_its_id(aws: Aws, cirrus: Cirrus) -> None:
    model = fresh_payload()
    action = cirrus.process_flow().handle(wait(model, "tok"))
    assert action is ProcessAction.FORWARDED
    (sent,) = cirrus.forwarded()
    assert sent["id"] == model.id
    assert sent["process"][0]["workflow"] == "pass"
    assert "callback" not in sent
    assert row_state(aws, model, "tok") is PayloadState.PROCESSING
    # the tracker ran nothing itself
    assert aws.states.get(model.id) is None


def test_a_succeeded_payload_is_replayed_from_cirrus_state(aws: Aws, cirrus: Cirrus) -> None:
    model = fresh_payload()
    cirrus_records(
        aws.dynamodb, model.id, PayloadState.SUCCEEDED, 1, outputs=["s3://out/item.json"]
    )
    assert cirrus.process_flow().handle(wait(model, "tok")) is ProcessAction.REPLAYED
    assert cirrus.forwarded() == []
    row = aws.dependencies.get(model.id, waiter_id_for("tok"))
    assert row is not None
    assert row.workflow_state is PayloadState.SUCCEEDED
    assert row.replayed
    assert row.execution_arn == f"{EXECUTIONS}run-1"
    result = json.loads(row.result_json or "{}")
    assert result["items"] == [{"href": "s3://out/item.json"}]
    executions = f"s3://{CIRRUS_BUCKET}/cirrus/executions"
    assert result["output_url"] == f"{executions}/{model.id}/run-1/output.json"


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        (PayloadState.PROCESSING, ProcessAction.WAITING),
        (PayloadState.INVALID, ProcessAction.REPLAYED),
        (PayloadState.CLAIMED, ProcessAction.FORWARDED),
        (PayloadState.FAILED, ProcessAction.FORWARDED),
        (PayloadState.ABORTED, ProcessAction.FORWARDED),
    ],
)
def test_what_each_cirrus_state_leads_to(
    aws: Aws, cirrus: Cirrus, state: PayloadState, expected: ProcessAction
) -> None:
    model = fresh_payload()
    cirrus_records(aws.dynamodb, model.id, state, 1, last_error="InvalidInput: bad")
    assert cirrus.process_flow().handle(wait(model, "tok")) is expected
    assert len(cirrus.forwarded()) == (1 if expected is ProcessAction.FORWARDED else 0)
    if state is PayloadState.INVALID:
        row = aws.dependencies.get(model.id, waiter_id_for("tok"))
        assert row is not None
        assert row.workflow_state is PayloadState.INVALID
        assert (row.error, row.cause) == ("InvalidInput", "InvalidInput: bad")


def test_a_failed_payload_runs_again_and_its_old_failure_does_not_answer(
    aws: Aws, cirrus: Cirrus
) -> None:
    model = fresh_payload()
    cirrus_records(aws.dynamodb, model.id, PayloadState.FAILED, 1, last_error="TaskFailed: x")
    # GIVEN a waiter that arrives after the failure: the payload is sent to run again
    assert cirrus.process_flow().handle(wait(model, "tok")) is ProcessAction.FORWARDED
    # WHEN a late (or repeated) FAILED event of run 1 comes, cirrus not yet re-claimed
    assert cirrus.events().reconcile(model.id) == (CirrusAction.RESOLVED, 0)
    # THEN the waiter still waits, for run 2
    assert row_state(aws, model, "tok") is PayloadState.PROCESSING
    cirrus_records(aws.dynamodb, model.id, PayloadState.SUCCEEDED, 2)
    assert cirrus.events().reconcile(model.id) == (CirrusAction.RESOLVED, 1)
    assert row_state(aws, model, "tok") is PayloadState.SUCCEEDED


def test_replace_runs_a_succeeded_payload_again(aws: Aws, cirrus: Cirrus) -> None:
    body = payload(f"cirrus-{next(_ids)}")
    body["process"][0]["replace"] = True
    model = ProcessPayload.model_validate(body)
    cirrus_records(aws.dynamodb, model.id, PayloadState.SUCCEEDED, 1)
    assert cirrus.process_flow().handle(wait(model, "tok")) is ProcessAction.FORWARDED
    (sent,) = cirrus.forwarded()
    assert sent["process"][0]["replace"] is True
    assert cirrus.events().reconcile(model.id) == (CirrusAction.RESOLVED, 0)  # the old run
    cirrus_records(aws.dynamodb, model.id, PayloadState.SUCCEEDED, 2)
    assert cirrus.events().reconcile(model.id) == (CirrusAction.RESOLVED, 1)


def test_a_rerun_of_a_failure_cirrus_has_since_replaced_is_answered_not_forwarded(
    aws: Aws, cirrus: Cirrus
) -> None:
    # GIVEN a rerun sent for a failure, and cirrus's item now SUCCEEDED (another rerun ran)
    body = payload(f"cirrus-{next(_ids)}")
    body["process"][0] |= {"replace": True, "replace_if": {"state": "FAILED"}}
    model = ProcessPayload.model_validate(body)
    cirrus_records(aws.dynamodb, model.id, PayloadState.SUCCEEDED, 2)
    # WHEN it arrives with a waiter
    action = cirrus.process_flow().handle(wait(model, "tok"))
    # THEN the waiter hears the stored success and nothing goes to cirrus
    assert action is ProcessAction.REPLAYED
    assert row_state(aws, model, "tok") is PayloadState.SUCCEEDED
    assert cirrus.forwarded() == []


def test_a_wait_only_message_never_forwards(aws: Aws, cirrus: Cirrus) -> None:
    model = fresh_payload()
    message = WaitMessage.model_validate({"wait_for": model.id, "callback": {"task_token": "tok"}})
    assert cirrus.process_flow().handle(message) is ProcessAction.WAITING
    cirrus_records(aws.dynamodb, model.id, PayloadState.SUCCEEDED, 1)
    assert cirrus.process_flow().handle(message) is ProcessAction.REPLAYED
    assert cirrus.forwarded() == []


def test_a_payload_cirrus_cannot_key_is_refused_before_anything_is_written(
    aws: Aws, cirrus: Cirrus
) -> None:
    model = ProcessPayload.model_validate(payload("a" * 1100))
    with pytest.raises(InvalidMessageError, match="too long for cirrus's state table"):
        cirrus.process_flow().handle(wait(model, "tok"))
    assert aws.dependencies.get(model.id, waiter_id_for("tok")) is None
    assert cirrus.forwarded() == []


def test_a_payload_over_one_message_goes_by_cirrus_bucket(aws: Aws, cirrus: Cirrus) -> None:
    model = ProcessPayload.model_validate(
        payload(f"cirrus-{next(_ids)}", extra_field="x" * 270_000)
    )
    cirrus.runs().settle(model, None)
    (sent,) = cirrus.forwarded()
    assert set(sent) == {"url"}
    bucket, key = sent["url"].removeprefix("s3://").split("/", 1)
    body = json.loads(aws.s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    assert body["id"] == model.id
    assert bucket == CIRRUS_BUCKET
    assert key.startswith("cirrus/tmp/deptrack-forwarded/")  # cirrus's lifecycle expires it


# ---------------------------------------------------------------- event side


def test_events_are_read_against_the_state_table(aws: Aws, cirrus: Cirrus) -> None:
    model = fresh_payload()
    cirrus.process_flow().handle(wait(model, "tok"))
    events = cirrus.events()

    def event(kind: str) -> WorkflowEvent:
        return WorkflowEvent(event_type=kind, payload_id=model.id)

    # progress events change nothing
    assert events.handle(event("CLAIMED_PROCESSING")) is CirrusAction.PROGRESS
    cirrus_records(aws.dynamodb, model.id, PayloadState.PROCESSING, 1)
    # a SUCCEEDED event whose state is not visible: the table, not the event, decides
    assert events.handle(event("SUCCEEDED")) is CirrusAction.NOT_ENDED
    assert row_state(aws, model, "tok") is PayloadState.PROCESSING
    # TIMED_OUT: cirrus records FAILED
    cirrus_records(aws.dynamodb, model.id, PayloadState.FAILED, 1, last_error="TimedOutError: x")
    assert events.handle(event("TIMED_OUT")) is CirrusAction.RESOLVED
    assert row_state(aws, model, "tok") is PayloadState.FAILED
    # a duplicate changes nothing
    assert events.handle(event("TIMED_OUT")) is CirrusAction.RESOLVED
    assert events.handle(event("SOMETHING_NEW")) is CirrusAction.UNKNOWN
    # cirrus could not read a body: its event names no payload (and no key to read)
    unreadable = WorkflowEvent(event_type="RECORD_EXTRACT_FAILED", payload_id="unknown")
    assert events.handle(unreadable) is CirrusAction.NO_PAYLOAD


def test_a_payload_cirrus_refuses_tells_its_waiters_invalid(aws: Aws, cirrus: Cirrus) -> None:
    model = fresh_payload()
    cirrus.process_flow().handle(wait(model, "tok"))
    refused = WorkflowEvent(
        event_type="NOT_A_PROCESS_PAYLOAD", payload_id=model.id, error="no features"
    )
    assert cirrus.events().handle(refused) is CirrusAction.REFUSED
    row = aws.dependencies.get(model.id, waiter_id_for("tok"))
    assert row is not None
    assert row.workflow_state is PayloadState.INVALID
    assert (row.error, row.cause) == ("NOT_A_PROCESS_PAYLOAD", "no features")


def test_the_sweeper_resolves_waiters_whose_event_was_lost(aws: Aws, cirrus: Cirrus) -> None:
    model = fresh_payload()
    cirrus.process_flow().handle(wait(model, "tok"))
    cirrus_records(aws.dynamodb, model.id, PayloadState.SUCCEEDED, 1)  # ...and no event
    later = datetime.now(UTC) + timedelta(seconds=1)
    flow = SweeperFlow(
        settings=aws.settings.model_copy(update={"sweeper_min_age_seconds": 0}),
        sweeps=SweepStore(aws.dynamodb, dependency_table=DEPENDENCY_TABLE, state_table=STATE_TABLE),
        callback=App(aws.settings, clients.client).callback,
        cirrus=cirrus.events(),
        clock=lambda: later,
    )
    report = flow.run()
    assert (report.reconciled, report.reconciled_waiters) == (1, 1)
    assert "waiting" in report.passes_completed
    assert row_state(aws, model, "tok") is PayloadState.SUCCEEDED


# ---------------------------------------------------------------- the ordering rule


class Gated:
    """One DynamoDB client per side, each call parked until the scheduler picks it."""

    def __init__(self, labels: Sequence[str]) -> None:
        self.scheduler: Scheduler | None = None
        self.clients: dict[str, Any] = {}
        session = clients.session()
        for label in labels:
            dynamodb = session.client("dynamodb")
            dynamodb.meta.events.register("before-call.*.*", self._gate(label))
            self.clients[label] = dynamodb

    def _gate(self, label: str) -> Any:
        def gate(**kwargs: Any) -> None:
            if self.scheduler is not None:
                self.scheduler.hook(label)(**kwargs)

        return gate

    def run(self, flows: dict[str, Any], prefix: Sequence[str]) -> Run:
        self.scheduler = Scheduler(prefix)
        try:
            return self.scheduler.execute(flows)
        finally:
            self.scheduler = None


@pytest.mark.parametrize("final", [PayloadState.SUCCEEDED, PayloadState.FAILED])
def test_every_interleaving_of_a_new_waiter_and_cirrus_ending_the_payload(
    aws: Aws, cirrus: Cirrus, final: PayloadState
) -> None:
    # cirrus's update_state writes the final state, then publishes; the event side then
    # reads. The waiter's side writes its row, then reads cirrus's table. Any order of
    # those calls ends with the waiter resolved, or waiting on a run cirrus was sent.
    gated = Gated(["process", "cirrus"])
    seen: set[str] = set()

    def run_one(prefix: Sequence[str]) -> Run:
        model = fresh_payload()
        cirrus_records(aws.dynamodb, model.id, PayloadState.PROCESSING, 1)
        cirrus.forwarded()

        def cirrus_ends() -> CirrusAction:
            dynamodb = gated.clients["cirrus"]
            cirrus_records(dynamodb, model.id, final, 1, last_error="TaskFailed: x")
            return cirrus.events(dynamodb).reconcile(model.id)[0]

        flows = {
            "process": lambda: cirrus.process_flow(gated.clients["process"]).handle(
                wait(model, "tok")
            ),
            "cirrus": cirrus_ends,
        }
        run = gated.run(flows, prefix)
        assert run.errors == {}, (run.calls, run.errors)
        state = row_state(aws, model, "tok")
        if state is PayloadState.PROCESSING:
            # only a failure the waiter saw first is run again, and it was sent to cirrus
            assert final is PayloadState.FAILED
            assert run.results["process"] is ProcessAction.FORWARDED
            assert len(cirrus.forwarded()) == 1
        else:
            assert state is final
        seen.add(f"{run.results['process']}/{state}")
        return run

    runs = list(explore(run_one))
    assert len(runs) >= 6
    assert {run.trace[0] for run in runs} == {"process", "cirrus"}
    # both sides resolve in some order: the event side, and the replay (or the re-run)
    assert any(key.startswith("waiting/") for key in seen), seen
    if final is PayloadState.SUCCEEDED:
        assert any(key.startswith("replayed/") for key in seen), seen


def test_a_join_member_cirrus_cannot_key_refuses_the_join(aws: Aws, cirrus: Cirrus) -> None:
    members = [payload(f"cirrus-{next(_ids)}"), payload("b" * 1100)]
    flow = cirrus.process_flow()
    message = flow.parse(json.dumps({"join": {"task_token": "tok"}, "payloads": members}))
    assert isinstance(message, JoinMessage)
    with pytest.raises(InvalidMessageError, match="too long") as refused:
        flow.handle(message)
    # the parent catches InvalidJoin (a join's errors), not one wait's DependencyInvalid
    assert refused.value.error_name == "InvalidJoin"
    assert refused.value.task_token == "tok"
    assert cirrus.forwarded() == []


def test_events_duplicated_reordered_or_lost_never_answer_a_waiter_wrongly(
    aws: Aws, cirrus: Cirrus
) -> None:
    # GIVEN cirrus runs a payload twice (run 1 FAILED, run 2 SUCCEEDED), waiter "a" arrives
    # before run 1 ends and waiter "b" after it, and each of cirrus's events is delivered late,
    # out of order, twice or never (the sweeper's reconcile pass stands in for the lost ones)
    heard: Counter[str] = Counter()
    for seed in range(40):
        rng = random.Random(seed)
        model = fresh_payload()
        history: list[tuple[PayloadState | str, int]] = [
            (PayloadState.PROCESSING, 1),
            (PayloadState.FAILED, 1),
            ("b", 0),
            (PayloadState.PROCESSING, 2),
            (PayloadState.SUCCEEDED, 2),
        ]
        history.insert(rng.randint(0, 1), ("a", 0))
        events = cirrus.events()
        pending: list[str] = []
        for step, run in history:
            if not isinstance(step, PayloadState):  # a waiter arrives
                cirrus.process_flow().handle(wait(model, step))
                continue
            cirrus_records(aws.dynamodb, model.id, step, run, last_error="TaskFailed: x")
            pending += [step.value] * rng.choice([0, 1, 1, 2])  # lost, once, or twice
            rng.shuffle(pending)  # deliver some of the events emitted so far, in any order
            for _ in range(rng.randint(0, len(pending))):
                events.handle(WorkflowEvent(event_type=pending.pop(), payload_id=model.id))
        for kind in pending:
            events.handle(WorkflowEvent(event_type=kind, payload_id=model.id))
        events.reconcile(model.id)  # the sweeper, for the events never delivered
        a = aws.dependencies.get(model.id, waiter_id_for("a"))
        b = aws.dependencies.get(model.id, waiter_id_for("b"))
        assert a is not None
        assert b is not None
        # THEN "b" hears run 2, never the failure it arrived after; "a" hears a run that
        # ended after it arrived: run 1, or run 2 when run 1's event never came in time
        assert (b.workflow_state, b.execution_arn) == (
            PayloadState.SUCCEEDED,
            f"{EXECUTIONS}run-2",
        ), seed
        assert (a.workflow_state, a.execution_arn) in {
            (PayloadState.FAILED, f"{EXECUTIONS}run-1"),
            (PayloadState.SUCCEEDED, f"{EXECUTIONS}run-2"),
        }, seed
        heard[a.workflow_state.value] += 1
    # AND the seeds reach both: delivered in time, and lost or late
    assert set(heard) == {"FAILED", "SUCCEEDED"}, heard


def test_a_redelivered_message_does_not_run_a_failed_payload_again(
    aws: Aws, cirrus: Cirrus
) -> None:
    # GIVEN a waiter's message forwarded its payload, and cirrus's run of it failed
    model = fresh_payload()
    flow = cirrus.process_flow()
    assert flow.handle(wait(model, "tok")) is ProcessAction.FORWARDED
    assert len(cirrus.forwarded()) == 1
    cirrus_records(aws.dynamodb, model.id, PayloadState.FAILED, 1, last_error="TaskFailed: x")
    cirrus.events().reconcile(model.id)
    assert row_state(aws, model, "tok") is PayloadState.FAILED
    # WHEN SQS delivers the same message again
    # THEN nothing is sent to cirrus: the waiter had its answer, a new run would answer no one
    assert flow.handle(wait(model, "tok")) is ProcessAction.ANSWERED
    assert cirrus.forwarded() == []
