"""The platform model: Lambda's recursive-loop detection and concurrency rules, locally.

Bare moto and a pump (no whole stack) for the loop detection: a handler that sends its
own event on is stopped at its 17th invocation in one chain, whichever of SQS, SNS or an
S3 notification carried the chain, and a chain that passes through Step Functions (or a
send from outside any handler) starts again at one. The concurrency checks run on the
real ``template.yaml`` and on small templates at AWS's boundaries.
"""

from __future__ import annotations

import io
import json
import threading
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from moto import mock_aws

from dependency_tracker_local import platform
from dependency_tracker_local import template as template_reader
from dependency_tracker_local.pumps import SqsPump
from dependency_tracker_local.stack import EmbeddedStack
from tests.conftest import REGION, ROLE_ARN, wait_until

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

FUNCTION = "looper"


@pytest.fixture
def moto() -> Iterator[None]:
    """moto with state machines executing; the model's patches installed."""
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        platform.install()
        yield


def _queue(name: str = "loop", *, max_receive_count: int = 1) -> tuple[str, str, str]:
    """A queue (visible again at once) whose records reach a DLQ; url, arn, DLQ url."""
    sqs = boto3.client("sqs", region_name=REGION)
    dlq_url = sqs.create_queue(QueueName=f"{name}-dlq")["QueueUrl"]
    dlq_arn = _arn(dlq_url)
    url = sqs.create_queue(
        QueueName=name,
        Attributes={
            "VisibilityTimeout": "0",
            "RedrivePolicy": json.dumps(
                {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": max_receive_count}
            ),
        },
    )["QueueUrl"]
    return url, _arn(url), dlq_url


def _arn(url: str) -> str:
    sqs = boto3.client("sqs", region_name=REGION)
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])
    return str(attributes["Attributes"]["QueueArn"])


def _dead_letter(dlq_url: str, into: list[str]) -> bool:
    """Move what reached the DLQ into ``into``; whether anything has."""
    into.extend(_bodies(dlq_url))
    return bool(into)


def _bodies(url: str) -> list[str]:
    sqs = boto3.client("sqs", region_name=REGION)
    messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
    return [m["Body"] for m in messages]


class Looper:
    """A handler that sends each record's body on with ``send`` (its own loop).

    It records the count of its own function in the lineage it runs in, and stops
    sending on its own once it has run ``stop_after`` times.
    """

    def __init__(self, send: Callable[[str], object], stop_after: int = 100) -> None:
        self.send = send
        self.stop_after = stop_after
        self.counts: list[int] = []

    def __call__(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        lineage = platform.current()
        for record in event["Records"]:
            self.counts.append(0 if lineage is None else lineage.count(FUNCTION))
            if len(self.counts) < self.stop_after:
                self.send(record["body"])
        return {"batchItemFailures": []}


def _pump(url: str, arn: str, handler: Any, model: platform.PlatformModel | None) -> SqsPump:
    return SqsPump(
        sqs=boto3.client("sqs", region_name=REGION),
        queue_url=url,
        queue_arn=arn,
        handler=handler,
        region=REGION,
        function_name=FUNCTION,
        platform=model,
    )


def _run_until(pump: SqsPump, done: Callable[[], bool]) -> None:
    def settled() -> bool:
        pump.pump_once()
        return done()

    wait_until(settled, timeout=20.0, every=0.0)


def _send_to(url: str) -> Callable[[str], object]:
    sqs = boto3.client("sqs", region_name=REGION)
    return lambda body: sqs.send_message(QueueUrl=url, MessageBody=body)


# ---------------------------------------------------------------------- recursive loops


def test_a_handler_resending_to_its_own_queue_is_stopped_at_its_17th_invocation(moto: None) -> None:
    url, arn, dlq_url = _queue()
    looper = Looper(_send_to(url))
    model = platform.PlatformModel()
    pump = _pump(url, arn, looper, model)
    boto3.client("sqs", region_name=REGION).send_message(QueueUrl=url, MessageBody="chain")

    dead: list[str] = []
    _run_until(pump, lambda: _dead_letter(dlq_url, dead))

    assert looper.counts == list(range(1, 17))
    assert dead == ["chain"]
    assert [(s.function, s.invocation) for s in model.stopped] == [(FUNCTION, 17)]


def test_recursive_loop_allow_is_not_stopped(moto: None) -> None:
    url, arn, dlq_url = _queue()
    looper = Looper(_send_to(url), stop_after=20)
    model = platform.PlatformModel(recursive_loop={FUNCTION: platform.ALLOW})
    pump = _pump(url, arn, looper, model)
    boto3.client("sqs", region_name=REGION).send_message(QueueUrl=url, MessageBody="chain")

    _run_until(pump, lambda: len(looper.counts) == 20)

    assert looper.counts == list(range(1, 21))
    assert model.stopped == []
    assert _bodies(dlq_url) == []


def test_with_the_model_off_nothing_is_stopped(moto: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(platform.ENV_SWITCH, "0")
    url, arn, _ = _queue()
    looper = Looper(_send_to(url), stop_after=20)
    pump = SqsPump(
        sqs=boto3.client("sqs", region_name=REGION),
        queue_url=url,
        queue_arn=arn,
        handler=looper,
        region=REGION,
        function_name=FUNCTION,
    )
    boto3.client("sqs", region_name=REGION).send_message(QueueUrl=url, MessageBody="chain")

    _run_until(pump, lambda: len(looper.counts) == 20)

    assert pump.platform is None
    assert looper.counts == [0] * 20  # no lineage at all


def test_a_send_from_outside_any_handler_starts_a_chain(moto: None) -> None:
    url, _, _ = _queue()
    sqs = boto3.client("sqs", region_name=REGION)
    sqs.send_message(QueueUrl=url, MessageBody="fresh")
    (message,) = sqs.receive_message(QueueUrl=url, AttributeNames=["All"])["Messages"]

    assert "AWSTraceHeader" not in message["Attributes"]
    admitted, lineage = platform.PlatformModel().admit(FUNCTION, [message])
    assert admitted == [message]
    assert lineage.count(FUNCTION) == 1


def _sfn_sender(queue_url: str) -> str:
    """A state machine that sends its input's body to ``queue_url`` (as a parent does)."""
    definition = {
        "StartAt": "Send",
        "States": {
            "Send": {
                "Type": "Task",
                "Resource": "arn:aws:states:::sqs:sendMessage",
                "Parameters": {"QueueUrl": queue_url, "MessageBody.$": "$.body"},
                "End": True,
            }
        },
    }
    sfn = boto3.client("stepfunctions", region_name=REGION)
    created = sfn.create_state_machine(
        name="sender", roleArn=ROLE_ARN, definition=json.dumps(definition)
    )
    return str(created["stateMachineArn"])


def test_a_chain_through_step_functions_starts_again_at_one(moto: None) -> None:
    url, arn, dlq_url = _queue()
    machine = _sfn_sender(url)
    sqs = boto3.client("sqs", region_name=REGION)
    sfn = boto3.client("stepfunctions", region_name=REGION)
    started: list[str] = []

    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        lineage = platform.current()
        assert lineage is not None
        for record in event["Records"]:
            started.append(f"{record['body']}@{lineage.count(FUNCTION)}")
            if record["body"] == "at-16":
                # Both sent from the 16th invocation: straight to the queue (stopped) and
                # through a state machine (a new chain).
                sqs.send_message(QueueUrl=url, MessageBody="direct")
                sfn.start_execution(stateMachineArn=machine, input=json.dumps({"body": "sfn"}))
        return {"batchItemFailures": []}

    model = platform.PlatformModel()
    pump = _pump(url, arn, handler, model)
    at_16 = platform.Lineage.new()
    for _ in range(16 - 1):
        at_16 = at_16.invoked(FUNCTION)
    sqs.send_message(
        QueueUrl=url,
        MessageBody="at-16",
        MessageSystemAttributes={
            "AWSTraceHeader": {"DataType": "String", "StringValue": at_16.header()}
        },
    )

    dead: list[str] = []
    _run_until(pump, lambda: _dead_letter(dlq_url, dead) and len(started) == 2)

    assert started == ["at-16@16", "sfn@1"]
    assert dead == ["direct"]
    assert [s.invocation for s in model.stopped] == [17]


def test_the_lineage_crosses_sns_to_sqs(moto: None) -> None:
    url, arn, dlq_url = _queue()
    sns = boto3.client("sns", region_name=REGION)
    topic = sns.create_topic(Name="events")["TopicArn"]
    sns.subscribe(
        TopicArn=topic,
        Protocol="sqs",
        Endpoint=arn,
        Attributes={"RawMessageDelivery": "true"},
    )
    looper = Looper(lambda body: sns.publish(TopicArn=topic, Message=body))
    model = platform.PlatformModel()
    pump = _pump(url, arn, looper, model)
    sns.publish(TopicArn=topic, Message="chain")

    dead: list[str] = []
    _run_until(pump, lambda: _dead_letter(dlq_url, dead))

    assert looper.counts == list(range(1, 17))
    assert dead == ["chain"]


def test_the_lineage_crosses_an_s3_notification_to_sqs(moto: None) -> None:
    url, arn, dlq_url = _queue()
    s3 = boto3.client("s3", region_name=REGION)
    s3.create_bucket(Bucket="platform-loop-bucket")
    s3.put_bucket_notification_configuration(
        Bucket="platform-loop-bucket",
        NotificationConfiguration={
            "QueueConfigurations": [{"QueueArn": arn, "Events": ["s3:ObjectCreated:*"]}]
        },
    )
    looper = Looper(lambda _: s3.put_object(Bucket="platform-loop-bucket", Key="again", Body=b"x"))
    model = platform.PlatformModel()
    pump = _pump(url, arn, looper, model)
    # moto's s3:TestEvent is the chain's first record (sent from outside any handler).

    dead: list[str] = []
    _run_until(pump, lambda: _dead_letter(dlq_url, dead))

    assert looper.counts == list(range(1, 17))
    assert len(dead) == 1
    assert json.loads(dead[0])["Records"][0]["s3"]["object"]["key"] == "again"


def test_a_batch_runs_in_the_highest_count_of_its_records(moto: None) -> None:
    url, _, _ = _queue()
    sqs = boto3.client("sqs", region_name=REGION)
    chain = platform.Lineage.new().invoked(FUNCTION).invoked(FUNCTION)
    sqs.send_message(QueueUrl=url, MessageBody="fresh")
    sqs.send_message(
        QueueUrl=url,
        MessageBody="third",
        MessageSystemAttributes={
            "AWSTraceHeader": {"DataType": "String", "StringValue": chain.header()}
        },
    )
    messages = sqs.receive_message(QueueUrl=url, AttributeNames=["All"], MaxNumberOfMessages=10)

    admitted, lineage = platform.PlatformModel().admit(FUNCTION, messages["Messages"])

    assert len(admitted) == 2
    assert lineage.count(FUNCTION) == 3


# ---------------------------------------------------------------------- concurrency


def test_the_pump_holds_the_trigger_maximum_concurrency(moto: None) -> None:
    url, arn, _ = _queue()
    sqs = boto3.client("sqs", region_name=REGION)
    for index in range(3):
        sqs.send_message(QueueUrl=url, MessageBody=str(index))
    inside = threading.Semaphore(0)
    release = threading.Event()

    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        inside.release()
        release.wait(20)
        return {"batchItemFailures": []}

    pump = _pump(url, arn, handler, platform.PlatformModel())
    pump.batch_size = 1
    pump.maximum_concurrency = 2
    threads = [threading.Thread(target=pump.pump_once) for _ in range(2)]
    for thread in threads:
        thread.start()
    try:
        assert inside.acquire(timeout=20)
        assert inside.acquire(timeout=20)
        assert pump.pump_once() == 0  # a third batch waits: the mapping is at its maximum
    finally:
        release.set()
        for thread in threads:
            thread.join(20)
    assert pump.peak_concurrency == 2
    assert pump.pump_once() == 1


def test_the_templates_reserved_and_trigger_concurrency_fit_a_new_account_of_10() -> None:
    template = template_reader.load_template()
    for parameters in ({}, {"CirrusPrefix": "cirrus"}):
        functions = platform.template_functions(template, parameters)
        platform.check_concurrency(functions, account_concurrency=10)
        assert all(f.recursive_loop == platform.TERMINATE for f in functions.values())
    maximum = platform.process_maximum_concurrency(platform.template_functions(template))
    assert maximum is not None
    assert platform.MIN_MAXIMUM_CONCURRENCY <= maximum <= platform.MAX_MAXIMUM_CONCURRENCY


def _template(reserved: Any = None, maximum: Any = None) -> dict[str, Any]:
    """One function, a reservation by parameter (empty: none), an SQS trigger."""
    properties: dict[str, Any] = {
        "FunctionName": {"Fn::Sub": "${Prefix}-process"},
        "ReservedConcurrentExecutions": {
            "Fn::If": ["HasReserved", {"Ref": "Reserved"}, {"Ref": "AWS::NoValue"}]
        },
        "Events": {"Queue": {"Type": "SQS", "Properties": {"Queue": "arn"}}},
    }
    if maximum is not None:
        properties["Events"]["Queue"]["Properties"]["ScalingConfig"] = {
            "MaximumConcurrency": maximum
        }
    return {
        "Parameters": {
            "Prefix": {"Type": "String", "Default": "deptrack"},
            "Reserved": {"Type": "String", "Default": "" if reserved is None else str(reserved)},
        },
        "Conditions": {"HasReserved": {"Fn::Not": [{"Fn::Equals": [{"Ref": "Reserved"}, ""]}]}},
        "Resources": {"Fn": {"Type": "AWS::Serverless::Function", "Properties": properties}},
    }


@pytest.mark.parametrize(
    ("reserved", "quota", "refused"),
    [
        (None, 10, False),  # no reservation: any account
        (1, 10, True),  # a new account has no room to reserve anything
        (1, 1000, False),
        (900, 1000, False),  # 100 left unreserved: the minimum
        (901, 1000, True),
        (0, 10, False),  # reserving 0 takes nothing from the account
    ],
)
def test_reserved_concurrency_leaves_100_unreserved(
    reserved: int | None, quota: int, refused: bool
) -> None:
    functions = platform.template_functions(_template(reserved))

    if refused:
        with pytest.raises(platform.PlatformError, match=r"Fn \(\d+\): .*minimum value of \[100\]"):
            platform.check_concurrency(functions, account_concurrency=quota)
    else:
        platform.check_concurrency(functions, account_concurrency=quota)


@pytest.mark.parametrize(
    ("maximum", "refused"), [(1, True), (2, False), (1000, False), (1001, True)]
)
def test_trigger_maximum_concurrency_is_2_to_1000(maximum: int, refused: bool) -> None:
    functions = platform.template_functions(_template(maximum=maximum))

    assert platform.process_maximum_concurrency(functions, "Queue") == maximum
    if refused:
        with pytest.raises(platform.PlatformError, match=r"scalingConfig\.maximumConcurrency"):
            platform.check_concurrency(functions, account_concurrency=1000)
    else:
        platform.check_concurrency(functions, account_concurrency=1000)


def test_a_reservation_that_is_not_a_number_is_refused() -> None:
    template = _template()
    function = template["Resources"]["Fn"]["Properties"]
    function["ReservedConcurrentExecutions"] = {"Ref": "Reserved"}  # "" reaches the property

    with pytest.raises(platform.PlatformError, match="whole number"):
        platform.template_functions(template)


def test_the_stack_refuses_to_start_on_a_template_a_new_account_refuses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "template.yaml"
    path.write_text(
        "Resources:\n"
        "  Sweeper:\n"
        "    Type: AWS::Serverless::Function\n"
        "    Properties:\n"
        '      FunctionName: !Sub "${Prefix}-sweeper"\n'
        "      ReservedConcurrentExecutions: 1\n",
        encoding="utf-8",
    )
    monkeypatch.setattr(template_reader, "TEMPLATE_PATH", path)

    with (
        pytest.raises(platform.PlatformError, match=r"Sweeper \(1\)"),
        EmbeddedStack(sink=io.StringIO(), sweeper_interval=None),
    ):
        pass  # pragma: no cover - the stack does not start


def test_the_stack_models_the_platform_by_default() -> None:
    with EmbeddedStack(sink=io.StringIO(), sweeper_interval=None) as stack:
        model = stack.platform
        pumps = stack.pumps

    assert model is not None
    assert all(getattr(pump, "platform", None) is model for pump in pumps.values())
    sqs_pump = pumps["sqs"]
    assert isinstance(sqs_pump, SqsPump)
    expected = platform.process_maximum_concurrency(
        platform.template_functions(template_reader.load_template())
    )
    assert sqs_pump.maximum_concurrency == expected


@pytest.mark.parametrize(
    ("parameters", "function", "event"),
    [
        ({}, "UpdateStateFunction", "StatusReports"),
        ({"CirrusPrefix": "cirrus"}, "CirrusEventsFunction", "CirrusEvents"),
    ],
)
def test_the_status_event_triggers_are_capped_and_checked(
    parameters: dict[str, str], function: str, event: str
) -> None:
    # GIVEN the template's trigger of the events that end payloads
    template = template_reader.load_template()
    functions = platform.template_functions(template, parameters)
    # THEN it carries StatusEventsMaxConcurrency, its default within Lambda's range
    default = int(template["Parameters"]["StatusEventsMaxConcurrency"]["Default"])
    assert functions[function].maximum_concurrency[event] == default
    # AND a value outside 2..1,000 is refused as Lambda refuses it
    low = platform.template_functions(template, {**parameters, "StatusEventsMaxConcurrency": "1"})
    with pytest.raises(platform.PlatformError, match=rf"{function} {event}: .*maximumConcurrency"):
        platform.check_concurrency({function: low[function]}, account_concurrency=1000)
