"""Function timeouts in the platform model: an invocation past its ``Timeout`` fails as in Lambda.

The pumps on bare moto, with a clock the handler turns (no handler sleeps): an SQS batch whose
invocation overran is not deleted, not even the records the handler reported done, and comes
back with its receive count up until the redrive policy takes it to the DLQ; a scheduled
invocation that overran is a failure. With the model off the same invocations succeed. The
timeouts come from ``template.yaml``.
"""

from __future__ import annotations

import io
import json
import logging
from typing import Any

import boto3
import pytest
from moto import mock_aws

from dependency_tracker_local import platform
from dependency_tracker_local import template as template_reader
from dependency_tracker_local.context import LocalContext, StackStoppedError
from dependency_tracker_local.pumps import SchedulePump, SqsPump, StreamPump
from dependency_tracker_local.runner import Invoker
from dependency_tracker_local.stack import EmbeddedStack
from dependency_tracker_local.timeouts import FunctionTimedOutError, FunctionTimeouts, invoke
from tests.conftest import DEPENDENCY_TABLE, REGION, Aws, wait_until

FUNCTION = "worker"


class Clock:
    """A clock the handlers turn by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class SlowHandler:
    """Reports every record done after ``runs`` seconds of the clock; notes what it saw."""

    def __init__(self, clock: Clock, runs: float) -> None:
        self.clock = clock
        self.runs = runs
        self.receives: list[list[int]] = []
        self.remaining_at_start: list[int] = []

    def __call__(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        self.remaining_at_start.append(context.get_remaining_time_in_millis())
        self.receives.append(
            [int(r["attributes"]["ApproximateReceiveCount"]) for r in event["Records"]]
        )
        self.clock.now += self.runs
        return {"batchItemFailures": []}


def _model(clock: Clock, timeout: float) -> platform.PlatformModel:
    return platform.PlatformModel(timeouts=FunctionTimeouts({FUNCTION: timeout}, clock=clock))


def _queue(sqs: Any) -> tuple[str, str, str]:
    """A queue (visible again at once) that redrives after 3 receives; url, arn, DLQ url."""
    dlq_url = sqs.create_queue(QueueName="slow-dlq")["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])
    url = sqs.create_queue(
        QueueName="slow",
        Attributes={
            "VisibilityTimeout": "0",
            "RedrivePolicy": json.dumps(
                {
                    "deadLetterTargetArn": dlq_arn["Attributes"]["QueueArn"],
                    "maxReceiveCount": 3,
                }
            ),
        },
    )["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])
    return url, arn["Attributes"]["QueueArn"], dlq_url


def _count(sqs: Any, url: str) -> int:
    attributes = sqs.get_queue_attributes(
        QueueUrl=url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return int(attributes["ApproximateNumberOfMessages"]) + int(
        attributes["ApproximateNumberOfMessagesNotVisible"]
    )


@pytest.mark.parametrize("modelled", [True, False], ids=["model-on", "model-off"])
def test_a_batch_past_its_timeout_returns_whole_and_climbs_to_the_dlq(
    modelled: bool, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(platform.ENV_SWITCH, "1" if modelled else "0")
    clock = Clock()
    model = _model(clock, timeout=1.0)
    handler = SlowHandler(clock, runs=1.5)
    with mock_aws():
        sqs = boto3.client("sqs", region_name=REGION)
        url, arn, dlq_url = _queue(sqs)
        sqs.send_message_batch(
            QueueUrl=url,
            Entries=[{"Id": str(n), "MessageBody": f"m{n}"} for n in range(3)],
        )
        pump = SqsPump(
            sqs=sqs,
            queue_url=url,
            queue_arn=arn,
            handler=handler,
            region=REGION,
            function_name=FUNCTION,
        )
        if modelled:  # the default model (from the template), on this test's clock
            pump.platform = model
        with caplog.at_level(logging.WARNING, logger="dependency_tracker_local.timeouts"):
            rounds = [pump.pump_once() for _ in range(4)]
        left, dead = _count(sqs, url), _count(sqs, dlq_url)

    if modelled:
        # The handler reported every record done, yet none was deleted: each came back,
        # one receive more each time, and the redrive policy took them after the third.
        assert rounds == [3, 3, 3, 0]
        assert handler.receives == [[1, 1, 1], [2, 2, 2], [3, 3, 3]]
        assert handler.remaining_at_start == [1000, 1000, 1000]
        assert (left, dead) == (0, 3)
        assert [t.function for t in model.timed_out] == [FUNCTION] * 3
        assert model.timed_out[0].elapsed_seconds == pytest.approx(1.5)
        assert "timed out" in caplog.text
    else:
        assert pump.platform is None  # DEPTRACK_PLATFORM=0
        assert rounds == [3, 0, 0, 0]
        assert handler.receives == [[1, 1, 1]]
        assert (left, dead) == (0, 0)
        assert model.timed_out == []


def test_a_batch_within_its_timeout_is_deleted() -> None:
    clock = Clock()
    model = _model(clock, timeout=1.0)
    handler = SlowHandler(clock, runs=1.0)  # exactly the timeout: not past it
    with mock_aws():
        sqs = boto3.client("sqs", region_name=REGION)
        url, arn, dlq_url = _queue(sqs)
        sqs.send_message(QueueUrl=url, MessageBody="quick")
        pump = SqsPump(
            sqs=sqs,
            queue_url=url,
            queue_arn=arn,
            handler=handler,
            region=REGION,
            function_name=FUNCTION,
            platform=model,
        )
        assert pump.pump_once() == 1
        assert (_count(sqs, url), _count(sqs, dlq_url)) == (0, 0)
    assert model.timed_out == []
    assert model.timeouts.longest[FUNCTION] == pytest.approx(1.0)


@pytest.mark.parametrize("modelled", [True, False], ids=["model-on", "model-off"])
def test_a_stream_batch_past_its_timeout_is_retried(modelled: bool, aws: Aws) -> None:
    clock = Clock()
    model = _model(clock, timeout=1.0)
    seen: list[int] = []

    def record_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        seen.append(len(event["Records"]))
        clock.now += 1.5
        return {"batchItemFailures": []}

    pump = StreamPump(
        streams=aws.streams,
        stream_arn=aws.stream_arn,
        handler=record_handler,
        region=REGION,
        filter_pattern={},
        function_name=FUNCTION,
        max_retries=1,
        clock=clock,
        platform=model if modelled else None,
    )
    for n in range(2):
        aws.dynamodb.put_item(
            TableName=DEPENDENCY_TABLE, Item={"payload_id": {"S": f"p{n}"}, "waiter_id": {"S": "w"}}
        )

    delivered = [pump.pump_once() for _ in range(3)]

    if modelled:
        # Retried whole (nothing checkpointed), then its first record went to the failure
        # destination after max_retries, and the second was retried alone.
        assert delivered == [0, 0, 0]
        assert seen == [2, 2, 1]
        assert len(pump.dead_letters) == 1
        assert len(model.timed_out) == 3
    else:
        assert delivered == [2, 0, 0]
        assert seen == [2]
        assert pump.dead_letters == []


def test_a_scheduled_invocation_past_its_timeout_is_a_failure() -> None:
    clock = Clock()
    model = _model(clock, timeout=2.0)
    runs = {"seconds": 3.0}

    def sweep(event: dict[str, Any], context: Any) -> dict[str, Any]:
        clock.now += runs["seconds"]
        return {"swept": True}

    pump = SchedulePump(
        handler=sweep,
        interval=60,
        region=REGION,
        account="123456789012",
        function_name=FUNCTION,
        clock=clock,
        platform=model,
    )
    with pytest.raises(FunctionTimedOutError, match=r"Task timed out after 2\.00 seconds"):
        pump.invoke()
    pump.pump_once()  # arms the schedule
    clock.now += 60
    assert pump.pump_once() == 1
    assert pump.failures == 1
    assert len(model.timed_out) == 2

    runs["seconds"] = 1.0
    assert pump.invoke() == {"swept": True}
    pump.platform = None  # the model off: not bounded
    runs["seconds"] = 3.0
    assert pump.invoke() == {"swept": True}


def test_the_wait_for_another_invocation_is_not_part_of_the_timeout() -> None:
    clock = Clock()
    context = LocalContext(FUNCTION, timeout_seconds=1.0, clock=clock)
    clock.now += 5.0  # queued behind another invocation (locally they run one at a time)
    seen: list[int] = []

    Invoker().wrap(lambda event, ctx: seen.append(ctx.get_remaining_time_in_millis()))({}, context)

    assert seen == [1000]
    assert not context.overran()


def test_an_event_refused_by_a_stopping_stack_is_no_timeout() -> None:
    clock = Clock()
    timeouts = FunctionTimeouts({FUNCTION: 1.0}, clock=clock)
    invoker = Invoker()

    def waited_then_refused(event: dict[str, Any], context: Any) -> Any:
        clock.now += 5.0  # waited for a long invocation, then the stack began to stop
        invoker.close()
        return invoker.wrap(lambda e, c: None)(event, context)

    with pytest.raises(StackStoppedError):
        invoke(timeouts, FUNCTION, waited_then_refused, {})
    assert timeouts.timed_out == []


def test_each_function_takes_its_timeout_from_the_template() -> None:
    functions = platform.template_functions(
        template_reader.load_template(), {"CirrusPrefix": "cirrus"}
    )
    timeouts = {f.name: f.timeout_seconds for f in functions.values()}

    assert timeouts == {
        "process": 60,
        "update-state": 120,
        "callback": 60,
        "sweeper": 120,
        "cirrus-events": 120,
    }
    model = platform.PlatformModel.from_template()
    assert model.timeouts.of("process") == 60


def test_a_function_without_a_timeout_gets_globals_else_lambdas_three_seconds() -> None:
    def template(globals_timeout: int | None) -> dict[str, Any]:
        function = {"Type": "AWS::Serverless::Function", "Properties": {"FunctionName": "f"}}
        found: dict[str, Any] = {"Resources": {"F": function}}
        if globals_timeout is not None:
            found["Globals"] = {"Function": {"Timeout": globals_timeout}}
        return found

    assert platform.template_functions(template(None))["F"].timeout_seconds == 3
    assert platform.template_functions(template(30))["F"].timeout_seconds == 30


def test_the_stacks_process_function_past_its_timeout_sends_the_message_to_the_dlq() -> None:
    # Any real invocation runs longer than a microsecond: every one times out.
    with EmbeddedStack(
        sink=io.StringIO(), sweeper_interval=None, function_timeouts={"process": 1e-6}
    ) as stack:
        sqs = stack.client("sqs")
        sqs.send_message(
            QueueUrl=stack.outputs["ProcessQueueUrl"],
            MessageBody=json.dumps({"id": "timeout/item-1", "process": {"workflow": "pass"}}),
        )
        dlq = stack.outputs["ProcessDlqUrl"]
        wait_until(lambda: _count(sqs, dlq) == 1, timeout=30)
        model = stack.platform

    assert model is not None
    # Three receives (the stack's max_receive_count), each one invocation that overran.
    assert len([t for t in model.timed_out if t.function == "process"]) == 3
