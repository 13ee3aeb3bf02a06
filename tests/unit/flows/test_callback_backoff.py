"""A throttled or 5xx ``SendTask*`` backs off inside the callback handler; a storm that
outlasts every retry (the handler's, then the stream's) is recovered by the sweeper.

Step Functions is made to refuse through botocore's own ``before-call`` event, so
the flow meets the ``ClientError`` botocore raises for a real refusal. Waits are
recorded, never slept.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest
from botocore.awsrequest import AWSResponse, HTTPHeaders
from botocore.exceptions import ClientError

from dependency_tracker.answers.actions import CallbackAction
from dependency_tracker.app import App
from dependency_tracker.core import clients
from dependency_tracker.core.backoff import Backoff, is_transient
from dependency_tracker.core.enums import PayloadState, utcnow
from dependency_tracker.core.errors import CallbackDeliveryError
from dependency_tracker.handlers import callback as callback_handler
from dependency_tracker.sweeper.flow import SweeperFlow
from dependency_tracker.sweeper.store import SweepStore
from dependency_tracker.table.items import WaiterItem
from dependency_tracker_local.context import LocalContext
from tests.chaos.hot import SendProbe
from tests.conftest import (
    DEPENDENCY_TABLE,
    STATE_TABLE,
    Aws,
    load_event,
    payload,
    payload_id,
    wait_until,
)
from tests.harness import Pumps, create_parent, start_parent

if TYPE_CHECKING:
    from collections.abc import Iterator

SEND_OPERATIONS = ("SendTaskSuccess", "SendTaskFailure")


@dataclass
class SendStorm:
    """Answers ``SendTask*`` with a refusal, as Step Functions does when throttling or failing.

    ``limit`` refusals, then it passes calls on (None: until ``active`` is cleared).
    """

    code: str = "ThrottlingException"
    status: int = 400
    limit: int | None = None
    active: bool = True
    refused: int = 0

    def __call__(self, model: Any, **_: Any) -> tuple[AWSResponse, dict[str, Any]] | None:
        if not self.active or (self.limit is not None and self.refused >= self.limit):
            return None
        self.refused += 1
        parsed = {
            "Error": {"Code": self.code, "Message": "Rate exceeded"},
            "ResponseMetadata": {"HTTPStatusCode": self.status},
        }
        return AWSResponse("https://states.invalid/", self.status, HTTPHeaders(), None), parsed

    @contextlib.contextmanager
    def on(self, client: Any) -> Iterator[SendStorm]:
        """Refuse ``client``'s sends while inside."""
        for operation in SEND_OPERATIONS:
            client.meta.events.register_first(f"before-call.sfn.{operation}", self)
        try:
            yield self
        finally:
            for operation in SEND_OPERATIONS:
                client.meta.events.unregister(f"before-call.sfn.{operation}", self)


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
def probe() -> Iterator[SendProbe]:
    """Every ``SendTask*`` of the handlers' client, with Step Functions' answer."""
    sends = SendProbe()
    sends.attach(clients.client("stepfunctions"))
    try:
        yield sends
    finally:
        sends.detach(clients.client("stepfunctions"))


@pytest.fixture
def waits(aws: Aws) -> list[float]:
    """The callback handler's flow records its waits instead of sleeping."""
    recorded: list[float] = []
    flow = callback_handler.callback_flow()
    flow.backoff = replace(flow.backoff, sleep=recorded.append)
    return recorded


def answers(probe: SendProbe) -> list[tuple[int, str | None]]:
    return [(send.status, send.code) for send in probe.sends]


def failed_records(batches: list[Any]) -> list[Any]:
    return [item for response in batches for item in response.get("batchItemFailures", [])]


@pytest.mark.usefixtures("workflows")
def test_a_throttling_storm_shorter_than_the_backoff_is_ridden_out_in_one_invocation(
    aws: Aws, probe: SendProbe, waits: list[float]
) -> None:
    # GIVEN a real parent waiting on a dependency, and Step Functions throttling 4 sends
    pumps = Pumps.create(aws)
    responses: list[Any] = []
    handler = pumps.stream.handler

    def recorded(event: dict[str, Any], context: Any) -> Any:
        responses.append(handler(event, context))
        return responses[-1]

    pumps.stream.handler = recorded
    with SendStorm(limit=4).on(clients.client("stepfunctions")):
        parent = start_parent(aws, create_parent(aws), payload(), name="short-storm")
        # WHEN the pumps feed the handlers
        pumps.settle()
    # THEN the parent resumed: four refusals, then one accepted send, in one invocation
    assert aws.wait_for_execution(parent)["status"] == "SUCCEEDED"
    assert answers(probe) == [(400, "ThrottlingException")] * 4 + [(200, None)]
    assert failed_records(responses) == []
    assert pumps.stream.dead_letters == []
    # each wait drawn below its bound (full jitter), and the row marked once
    bounds = [Backoff().bound(retry) for retry in range(4)]
    assert len(waits) == 4
    assert all(0 <= wait <= bound for wait, bound in zip(waits, bounds, strict=True))
    (row,) = aws.dependencies.waiters(payload_id())
    assert row.notify_outcome == "SENT:SUCCEEDED"


@pytest.mark.usefixtures("workflows")
def test_a_storm_outlasting_the_stream_retries_still_answers_the_parent_once(
    aws: Aws, probe: SendProbe, waits: list[float]
) -> None:
    # GIVEN a real parent, and Step Functions refusing every send until the stream
    # event source mapping gives the record up (the local pump retries 3 times)
    pumps = Pumps.create(aws)
    with SendStorm().on(clients.client("stepfunctions")) as storm:
        parent = start_parent(aws, create_parent(aws), payload(), name="long-storm")
        pumps.settle()
        # (a failed record moves nothing, so settling stops short of the discard)
        wait_until(lambda: pumps.stream.pump_once() == 0 and pumps.stream.dead_letters)
    attempts = Backoff().attempts
    assert storm.refused == 4 * attempts  # 4 invocations, each retrying in place
    assert len(pumps.stream.dead_letters) == 1
    (row,) = aws.dependencies.waiters(payload_id())
    assert row.workflow_state is PayloadState.SUCCEEDED
    assert row.notified_at is None  # terminal, un-notified: nothing would look again
    assert aws.sfn.describe_execution(executionArn=parent)["status"] == "RUNNING"
    # WHEN the storm is over and the sweeper runs past its threshold
    sweeper = SweeperFlow(
        settings=aws.settings,
        sweeps=SweepStore(aws.dynamodb, dependency_table=DEPENDENCY_TABLE, state_table=STATE_TABLE),
        callback=App(aws.settings, clients.client).callback,
        clock=lambda: utcnow() + timedelta(minutes=16),
    )
    report = sweeper.run()
    # THEN the parent resumed, answered by exactly one accepted send
    assert report.sent == 1
    assert aws.wait_for_execution(parent)["status"] == "SUCCEEDED"
    accepted = [send for send in probe.sends if send.status == 200]
    assert [send.token for send in accepted] == [row.task_token]
    done = aws.dependencies.get(row.payload_id, row.waiter_id)
    assert done is not None
    assert done.notify_outcome == "SENT:SUCCEEDED"
    # AND a second sweep finds nothing left to send
    assert sweeper.run().found == 0
    assert len([send for send in probe.sends if send.status == 200]) == 1


def stored_waiter(aws: Aws) -> WaiterItem:
    """The terminal row of the static stream event, stored (its token is unknown to moto)."""
    image = load_event("ddb_stream_waiter.json")["Records"][0]["dynamodb"]["NewImage"]
    aws.dynamodb.put_item(TableName=DEPENDENCY_TABLE, Item=image)
    return WaiterItem.from_item(image)


@pytest.mark.parametrize(
    ("code", "status"),
    [
        ("ThrottlingException", 400),
        ("TooManyRequestsException", 429),
        ("ServiceUnavailable", 503),
        ("InternalServerError", 500),
        ("SomethingNew", 502),
    ],
)
def test_throttling_and_server_errors_are_retried_in_place(
    aws: Aws, probe: SendProbe, code: str, status: int
) -> None:
    # GIVEN a terminal row and Step Functions refusing its first two sends
    waiter = stored_waiter(aws)
    time = FakeTime()
    flow = App(
        aws.settings,
        clients.client,
        dependencies=aws.dependencies,
        backoff=Backoff(sleep=time.sleep, clock=time.clock),
    ).callback
    # WHEN the flow handles the row
    with SendStorm(code=code, status=status, limit=2).on(clients.client("stepfunctions")):
        action = flow.handle(waiter)
    # THEN the third try reached Step Functions (which no longer knows this token)
    assert answers(probe) == [(status, code), (status, code), (400, "InvalidToken")]
    assert action is CallbackAction.PARENT_GONE
    assert len(time.waits) == 2


@pytest.mark.parametrize("code", ["InvalidOutput", "ValidationException"])
def test_other_refusals_fail_the_record_at_once(aws: Aws, probe: SendProbe, code: str) -> None:
    # GIVEN a terminal row and Step Functions refusing its send for a reason waiting won't fix
    waiter = stored_waiter(aws)
    time = FakeTime()
    flow = App(
        aws.settings,
        clients.client,
        dependencies=aws.dependencies,
        backoff=Backoff(sleep=time.sleep, clock=time.clock),
    ).callback
    # WHEN the flow handles the row THEN it fails after one try, without waiting
    with (
        SendStorm(code=code, limit=1).on(clients.client("stepfunctions")),
        pytest.raises(CallbackDeliveryError),
    ):
        flow.handle(waiter)
    assert answers(probe) == [(400, code)]
    assert time.waits == []
    row = aws.dependencies.get(waiter.payload_id, waiter.waiter_id)
    assert row is not None
    assert row.notified_at is None


@pytest.mark.parametrize(
    ("draw", "expected"), [(1.0, [0.2, 0.4, 0.8, 1.6, 3.2]), (0.5, [0.1, 0.2, 0.4, 0.8, 1.6])]
)
def test_waits_are_full_jitter_below_a_capped_doubling_bound(
    draw: float, expected: list[float]
) -> None:
    # GIVEN a backoff whose draws are all `draw` (of [0, 1))
    time = FakeTime()
    backoff = Backoff(sleep=time.sleep, clock=time.clock, random=lambda: draw)
    calls: list[int] = []

    def refused() -> None:
        calls.append(1)
        raise ClientError({"Error": {"Code": "ThrottlingException"}}, "SendTaskSuccess")

    # WHEN a call is refused every time THEN it is tried `attempts` times and raises
    with pytest.raises(ClientError):
        backoff.call(refused)
    assert len(calls) == backoff.attempts == 6
    assert time.waits == pytest.approx(expected)


def test_the_bound_doubles_up_to_its_cap() -> None:
    capped = Backoff(attempts=10, base_seconds=1.0, cap_seconds=4.0)
    assert [capped.bound(retry) for retry in range(5)] == [1.0, 2.0, 4.0, 4.0, 4.0]
    # so the longest total wait of one send is known in advance
    assert Backoff().max_total_wait == pytest.approx(6.2)


def test_no_wait_runs_past_the_deadline() -> None:
    # GIVEN a backoff whose draws are at their top and a deadline 1 s away
    time = FakeTime()
    backoff = Backoff(sleep=time.sleep, clock=time.clock, random=lambda: 1.0)
    calls: list[int] = []

    def refused() -> None:
        calls.append(1)
        raise ClientError({"Error": {"Code": "ServiceUnavailable"}}, "SendTaskSuccess")

    # WHEN a call is refused every time THEN waits of 0.2 and 0.4 s are taken, and the
    # third (0.8 s, ending at 1.4 s) is not: the refusal is raised after three tries
    with pytest.raises(ClientError):
        backoff.call(refused, deadline=1.0)
    assert time.waits == pytest.approx([0.2, 0.4])
    assert len(calls) == 3


def test_transient_means_throttling_or_5xx() -> None:
    def refusal(code: str, status: int) -> ClientError:
        response: Any = {"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}
        return ClientError(response, "Op")

    assert is_transient(refusal("ThrottlingException", 400))
    assert is_transient(refusal("Anything", 503))
    assert not is_transient(refusal("InvalidToken", 400))
    assert not is_transient(refusal("TaskTimedOut", 400))


def test_the_handler_stops_retrying_when_the_invocation_runs_short_of_time(
    aws: Aws, probe: SendProbe
) -> None:
    # GIVEN an invocation with 16 s left (1 s past the handler's reserve), a backoff
    # whose draws are at their top, and Step Functions refusing every send
    event = load_event("ddb_stream_waiter.json")
    stored_waiter(aws)
    time = FakeTime()
    flow = callback_handler.callback_flow()
    real = flow.backoff.clock
    flow.backoff = replace(
        flow.backoff, sleep=time.sleep, clock=lambda: real() + time.offset, random=lambda: 1.0
    )
    context = LocalContext("deptrack-callback", timeout_seconds=16)
    # WHEN the handler runs
    with SendStorm().on(clients.client("stepfunctions")) as storm:
        response = callback_handler.lambda_handler(event, context)
    # THEN it retried only while time was left (0.2 + 0.4 s; 0.8 more would pass 1 s)
    assert storm.refused == 3
    assert time.waits == pytest.approx([0.2, 0.4])
    # and failed the record, so the stream retries it
    assert response == {"batchItemFailures": [{"itemIdentifier": "111100000000000000000001"}]}
