"""A throttled StartExecution is waited out inside the invocation, within its deadline.

Step Functions is made to refuse through botocore's own ``before-call`` event, so the
flow meets the ``ClientError`` botocore raises for a real ``ThrottlingException``. The
pacing's waits are recorded on a clock of the test's own, never slept.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import pytest
from botocore.awsrequest import AWSResponse, HTTPHeaders
from botocore.exceptions import ClientError

from dependency_tracker.core.enums import PayloadState
from dependency_tracker.core.pacing import START_PACING, deadline_scope
from dependency_tracker.core.tokens import token_hash
from tests.conftest import WORKFLOW_ARN_PREFIX, Aws, payload, payload_id

if TYPE_CHECKING:
    from collections.abc import Iterator

    from dependency_tracker.app import App

MEMBERS = 6
CHUNK = 3


@dataclass
class StartStorm:
    """Answers ``StartExecution`` with ``ThrottlingException`` ``limit`` times (None: always)."""

    limit: int | None = None
    active: bool = True
    refused: int = 0

    def __call__(self, **_: Any) -> tuple[AWSResponse, dict[str, Any]] | None:
        if not self.active or (self.limit is not None and self.refused >= self.limit):
            return None
        self.refused += 1
        parsed = {
            "Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"},
            "ResponseMetadata": {"HTTPStatusCode": 400},
        }
        return AWSResponse("https://states.invalid/", 400, HTTPHeaders(), None), parsed

    @contextlib.contextmanager
    def on(self, client: Any) -> Iterator[StartStorm]:
        client.meta.events.register_first("before-call.sfn.StartExecution", self)
        try:
            yield self
        finally:
            client.meta.events.unregister("before-call.sfn.StartExecution", self)


@dataclass
class FakeTime:
    """A monotonic clock that only waits move: sleeping is instant and exact."""

    offset: float = 0.0
    waits: list[float] = field(default_factory=list)

    def clock(self) -> float:
        return self.offset

    def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.offset += seconds


@pytest.fixture
def time() -> FakeTime:
    return FakeTime()


@pytest.fixture
def join_queue(aws: Aws) -> str:
    url: str = aws.sqs.create_queue(QueueName="deptrack-join-chunks")["QueueUrl"]
    return url


def tracker(aws: Aws, join_queue: str, time: FakeTime, *, pace: bool = True) -> App:
    aws.s3.create_bucket(Bucket="deptrack-payloads")
    settings = aws.settings.model_copy(
        update={
            "payload_bucket": "deptrack-payloads",
            "join_queue_url": join_queue,
            "process_queue_url": aws.queue_url,
            "join_chunk_size": CHUNK,
            "pace_starts": pace,
        }
    )
    pacing = replace(START_PACING, sleep=time.sleep, clock=time.clock, random=lambda: 0.5)
    return aws.app(settings, start_pacing=pacing)


def join_message() -> str:
    members = [payload(f"m{number}") for number in range(MEMBERS)]
    return json.dumps({"join": {"task_token": "tok"}, "payloads": members})


def chunk_messages(aws: Aws, url: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    while batch := aws.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get(
        "Messages", []
    ):
        found.extend(batch)
        for message in batch:
            aws.sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    return found


def handle(tracker: App, body: str, message_id: str, deadline: float) -> None:
    with deadline_scope(deadline):
        tracker.process.handle(tracker.process.parse(body, message_id=message_id))


def started(aws: Aws) -> list[str]:
    listed = aws.sfn.list_executions(stateMachineArn=f"{WORKFLOW_ARN_PREFIX}pass")["executions"]
    return sorted(execution["name"] for execution in listed)


@pytest.mark.usefixtures("workflows")
def test_a_throttled_chunk_waits_for_the_quota_and_one_outlasting_it_is_sent_again(
    aws: Aws, join_queue: str, time: FakeTime
) -> None:
    app = tracker(aws, join_queue, time)
    # GIVEN a join of two chunks whose first chunk's starts are refused 5 times
    with StartStorm(limit=5).on(aws.sfn) as storm:
        # WHEN its message is handled with 45 s to its deadline
        handle(app, join_message(), "join-1", time.offset + 45)
    # THEN the chunk waited the refusals out in that one invocation, within the deadline
    assert storm.refused == 5
    assert len(time.waits) == 5
    assert 0 < sum(time.waits) <= 45
    assert len(started(aws)) == CHUNK
    # GIVEN a storm that outlasts the next chunk's invocation
    (chunk,) = chunk_messages(aws, join_queue)
    deadline = time.offset + 10
    with StartStorm().on(aws.sfn):
        # WHEN chunk 1 is handled with 10 s to its deadline
        handle(app, chunk["Body"], chunk["MessageId"], deadline)
    # THEN it waited until the deadline, no longer, and sent itself again; nothing failed
    assert deadline - START_PACING.cap_seconds <= time.offset <= deadline
    (again,) = chunk_messages(aws, join_queue)
    assert json.loads(again["Body"]) == json.loads(chunk["Body"])
    join = aws.joins.get(token_hash("tok"))
    assert join is not None
    assert join.workflow_state is PayloadState.PROCESSING
    assert join.registered == CHUNK
    # WHEN the quota has room again and the chunk comes back
    handle(app, again["Body"], again["MessageId"], time.offset + 45)
    # THEN every member started once, and the join holds all of them
    assert len(started(aws)) == MEMBERS
    for number in range(MEMBERS):
        state = aws.states.get(payload_id(f"m{number}"))
        assert state is not None
        assert (state.state, state.attempt) == (PayloadState.PROCESSING, 1)
    join = aws.joins.get(token_hash("tok"))
    assert join is not None
    assert join.registered == MEMBERS


@pytest.mark.usefixtures("workflows")
def test_without_pacing_a_throttled_start_fails_its_message(
    aws: Aws, join_queue: str, time: FakeTime
) -> None:
    # GIVEN pacing turned off (the behaviour before it, kept to measure against)
    app = tracker(aws, join_queue, time, pace=False)
    # WHEN a start is refused once
    with StartStorm(limit=1).on(aws.sfn), pytest.raises(ClientError):
        handle(app, join_message(), "join-1", time.offset + 45)
    # THEN the message fails (it comes back after the queue's visibility timeout), unwaited
    assert time.waits == []
