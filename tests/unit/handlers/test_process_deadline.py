"""The process handler never starts a record it cannot finish before its deadline (defect 4).

A batch of join messages used to register each join's first chunk in the same invocation
(4 to 10 s each on AWS): ten of them overran the 60 s timeout and the whole batch came back.
Now a join message on the process queue is handed to the join queue (where it registers
alone), and a record is started only with RECORD_START_SECONDS left; the rest go back as
batch item failures. Time on AWS is stood for by the Lambda context's clock: each call that
hands off or starts work moves it on by what such work takes on AWS.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

import pytest

from dependency_tracker import app
from dependency_tracker.core.tokens import token_hash
from dependency_tracker.handlers.deadline import RECORD_START_SECONDS
from dependency_tracker.handlers.process import lambda_handler
from dependency_tracker_local.context import LocalContext
from dependency_tracker_local.events import sqs_event as lambda_sqs_event
from tests.conftest import REGION, Aws, payload, payload_id
from tests.unit.handlers.conftest import sqs_event

if TYPE_CHECKING:
    from collections.abc import Iterator

JOINS = 10
MEMBERS = 3
# What one join message's first chunk takes on AWS (docs/performance.md: 4 to 10 s).
SECONDS_PER_JOIN = 4.0


def join_body(number: int) -> dict[str, Any]:
    members = [payload(f"j{number}-m{member}") for member in range(MEMBERS)]
    return {"join": {"task_token": f"tok-{number}"}, "payloads": members}


@pytest.fixture
def join_queue(aws: Aws) -> Iterator[tuple[str, str]]:
    """A join queue beside the process queue, and the handlers' app using both."""
    url = aws.sqs.create_queue(QueueName="deptrack-join-chunks")["QueueUrl"]
    arn = aws.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    settings = aws.settings.model_copy(
        update={"join_queue_url": url, "process_queue_url": aws.queue_url}
    )
    app.use(aws.app(settings))
    yield url, arn
    app.use(None)


@contextlib.contextmanager
def work_takes_time(aws: Aws, context: LocalContext, seconds: float) -> Iterator[list[str]]:
    """Each start or hand-off moves ``context``'s clock on by ``seconds``; yields the calls."""
    calls: list[str] = []

    def spend(event_name: str, **_: Any) -> None:
        calls.append(event_name.rsplit(".", 1)[-1])
        context._started -= seconds

    hooks = [
        (aws.sfn, "before-call.sfn.StartExecution"),
        (aws.sqs, "before-call.sqs.SendMessage"),
    ]
    for client, event in hooks:
        client.meta.events.register(event, spend)
    try:
        yield calls
    finally:
        for client, event in hooks:
            client.meta.events.unregister(event, spend)


def failures(response: dict[str, Any]) -> list[str]:
    return [item["itemIdentifier"] for item in response["batchItemFailures"]]


def drain(aws: Aws, url: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    while batch := aws.sqs.receive_message(
        QueueUrl=url, MaxNumberOfMessages=10, MessageAttributeNames=["All"]
    ).get("Messages", []):
        found.extend(batch)
        aws.sqs.delete_message_batch(
            QueueUrl=url,
            Entries=[
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(batch)
            ],
        )
    return found


@pytest.mark.usefixtures("workflows")
def test_a_batch_of_joins_returns_what_it_has_no_time_for_and_loses_nothing(
    aws: Aws, join_queue: tuple[str, str]
) -> None:
    url, arn = join_queue
    ids = [f"join-msg-{number}" for number in range(JOINS)]
    event = sqs_event(*(join_body(number) for number in range(JOINS)), ids=ids)
    for record in event["Records"]:
        record["eventSourceARN"] = aws.queue_arn
    # GIVEN an invocation with 10 s more than a record needs to start, where each join
    # message's work takes 4 s
    context = LocalContext("deptrack-process", timeout_seconds=int(RECORD_START_SECONDS) + 10)
    with work_takes_time(aws, context, SECONDS_PER_JOIN):
        # WHEN the ten join messages come in one batch
        response = lambda_handler(event, context)
    # THEN the invocation ends before its deadline, with the joins it had no time for
    # returned untouched
    assert context.get_remaining_time_in_millis() > 0
    returned = failures(response)
    handed = drain(aws, url)
    assert 0 < len(returned) < JOINS
    assert sorted(returned) == sorted(ids[len(handed) :])
    # WHEN SQS delivers those again, to an invocation of its own
    again = sqs_event(*(join_body(ids.index(i)) for i in returned), ids=returned)
    for record in again["Records"]:
        record["eventSourceARN"] = aws.queue_arn
    assert failures(lambda_handler(again, LocalContext("deptrack-process"))) == []
    handed += drain(aws, url)
    # THEN every join message reached the join queue once, under the id SQS first gave it
    origins = sorted(
        m["MessageAttributes"]["DeptrackOriginMessageId"]["StringValue"] for m in handed
    )
    assert origins == sorted(ids)
    # WHEN the join queue's trigger hands each to an invocation of its own
    for message in handed:
        one = lambda_sqs_event([message], queue_arn=arn, region=REGION)
        assert failures(lambda_handler(one, LocalContext("deptrack-process"))) == []
    # THEN each join is registered once, each member started once, claimed for its message
    for number, message_id in enumerate(ids):
        row = aws.joins.get(token_hash(f"tok-{number}"))
        assert row is not None
        assert row.registered == MEMBERS
        for member in range(MEMBERS):
            state = aws.states.get(payload_id(f"j{number}-m{member}"))
            assert state is not None
            assert state.attempt == 1
            assert state.claim_message_id == message_id
    started = aws.sfn.list_executions(stateMachineArn=f"{aws.settings.workflow_arn_prefix}pass")
    assert len(started["executions"]) == JOINS * MEMBERS


@pytest.mark.usefixtures("workflows")
def test_records_are_not_started_with_less_than_the_margin_left(aws: Aws) -> None:
    # GIVEN an invocation with less time left than a record is started with
    context = LocalContext("deptrack-process", timeout_seconds=int(RECORD_START_SECONDS) - 1)
    bodies = [payload(f"late-{number}") for number in range(3)]
    ids = [f"late-{number}" for number in range(3)]
    # WHEN a batch arrives
    response = lambda_handler(sqs_event(*bodies, ids=ids), context)
    # THEN every record goes back, and none was begun
    assert failures(response) == ids
    assert all(aws.states.get(payload_id(f"late-{number}")) is None for number in range(3))
    # AND with a whole invocation they run, once each
    assert failures(lambda_handler(sqs_event(*bodies, ids=ids), LocalContext("p"))) == []
    assert all(aws.states.get(payload_id(f"late-{number}")) is not None for number in range(3))


@pytest.mark.usefixtures("workflows")
def test_a_join_handed_off_twice_registers_once(aws: Aws, join_queue: tuple[str, str]) -> None:
    url, arn = join_queue
    # GIVEN a join message handed to the join queue, then delivered again from the process
    # queue (its invocation crashed after the hand-off, before SQS deleted it)
    for _ in range(2):
        event = sqs_event(join_body(0), ids=["join-msg-0"])
        event["Records"][0]["eventSourceARN"] = aws.queue_arn
        assert failures(lambda_handler(event, LocalContext("deptrack-process"))) == []
    handed = drain(aws, url)
    assert len(handed) == 2
    # WHEN the join queue delivers both copies
    for message in handed:
        one = lambda_sqs_event([message], queue_arn=arn, region=REGION)
        assert failures(lambda_handler(one, LocalContext("deptrack-process"))) == []
    # THEN the join is registered once and each member started once, claimed for the
    # message id SQS first gave the join
    row = aws.joins.get(token_hash("tok-0"))
    assert row is not None
    assert row.registered == MEMBERS
    for member in range(MEMBERS):
        state = aws.states.get(payload_id(f"j0-m{member}"))
        assert state is not None
        assert (state.attempt, state.claim_message_id) == (1, "join-msg-0")
    started = aws.sfn.list_executions(stateMachineArn=f"{aws.settings.workflow_arn_prefix}pass")
    assert len(started["executions"]) == MEMBERS
