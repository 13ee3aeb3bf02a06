"""Step Functions' API rates in the platform model: AWS's token buckets, in moto's request path.

Bare moto and a hand-turned clock: each bucket lets its burst through, refuses the next call
with AWS's ``ThrottlingException`` ("Rate exceeded", HTTP 400), and lets one more through per
``1 / refill`` seconds of the clock. Without an active model, the same calls all pass.
"""

from __future__ import annotations

import io
import json
import time
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from moto import mock_aws

from dependency_tracker_local import platform, rates
from dependency_tracker_local.stack import EmbeddedStack
from tests.conftest import REGION, ROLE_ARN

if TYPE_CHECKING:
    from collections.abc import Iterator

# One attempt per call: a throttled call is refused once, not retried with botocore's backoff.
ONE_ATTEMPT = Config(retries={"mode": "standard", "total_max_attempts": 1})
PASS = json.dumps({"StartAt": "P", "States": {"P": {"Type": "Pass", "End": True}}})
WAIT = json.dumps(
    {
        "StartAt": "W",
        "States": {
            "W": {
                "Type": "Task",
                "Resource": "arn:aws:states:::sqs:sendMessage.waitForTaskToken",
                "Parameters": {"QueueUrl": "nowhere", "MessageBody.$": "$$.Task.Token"},
                "End": True,
            }
        },
    }
)


class Clock:
    """A clock the test turns by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def moto() -> Iterator[None]:
    with mock_aws():
        yield


def _sfn(region: str = REGION) -> Any:
    return boto3.client("stepfunctions", region_name=region, config=ONE_ATTEMPT)


def _machine(sfn: Any, name: str = "m", kind: str = "STANDARD") -> str:
    created = sfn.create_state_machine(name=name, roleArn=ROLE_ARN, definition=PASS, type=kind)
    return str(created["stateMachineArn"])


def _starts(sfn: Any, arn: str, count: int, tag: str = "e") -> list[str]:
    """Start ``count`` executions; each one's outcome: "ok" or the error code."""
    outcomes = []
    for index in range(count):
        try:
            sfn.start_execution(stateMachineArn=arn, name=f"{tag}{index}")
            outcomes.append("ok")
        except ClientError as error:
            outcomes.append(error.response["Error"]["Code"])
    return outcomes


# ---------------------------------------------------------------------- the bucket


def test_a_bucket_gives_its_burst_then_its_refill_continuously() -> None:
    clock = Clock()
    bucket = rates.TokenBucket(rates.Quota(burst=3, refill=2), clock)

    assert [bucket.take() for _ in range(4)] == [True, True, True, False]
    clock.now += 0.25  # half a token
    assert bucket.take() is False
    clock.now += 0.25  # the other half
    assert bucket.take() is True
    clock.now += 100  # never more than the burst
    assert [bucket.take() for _ in range(4)] == [True, True, True, False]


def test_the_figures_are_aws_divided_by_the_scale() -> None:
    assert rates.RateModel().quota() == rates.Quota(1300, 300)
    assert rates.RateModel().quota(region="eu-central-1") == rates.Quota(800, 150)
    model = rates.RateModel(scale=100)
    assert model.quota(rates.START_EXECUTION, "us-west-2") == rates.Quota(13, 3)
    assert model.quota(rates.START_EXECUTION, "ap-south-1") == rates.Quota(8, 1.5)
    assert model.quota(rates.START_EXPRESS) == rates.Quota(60, 60)
    assert model.quota(rates.SEND_TASK_SUCCESS) == rates.Quota(30, 5)
    # The floor of a join of n members: (n - burst) / refill.
    assert model.floor_seconds(613) == pytest.approx(200.0)
    assert rates.RateModel().floor_seconds(100_000) == pytest.approx((100_000 - 1300) / 300)
    assert rates.RateModel(scale=10_000).quota().burst == 1  # never less than one call


def test_the_scale_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(rates.ENV_SCALE, raising=False)
    assert rates.scale_from_env() == 1
    monkeypatch.setenv(rates.ENV_SCALE, "100")
    assert rates.scale_from_env() == 100
    monkeypatch.setenv(rates.ENV_SCALE, "0.5")
    with pytest.raises(ValueError, match=rates.ENV_SCALE):
        rates.scale_from_env()


# ---------------------------------------------------------------------- through moto


def test_start_execution_is_throttled_past_the_burst_and_refilled(moto: None) -> None:
    sfn = _sfn()
    arn = _machine(sfn)
    clock = Clock()
    model = rates.RateModel(scale=100, clock=clock)

    with rates.throttling(model):
        first = _starts(sfn, arn, 14, "a")
        with pytest.raises(ClientError) as refused:
            sfn.start_execution(stateMachineArn=arn, name="refused")
        clock.now += 1.0  # 3 tokens a second at this scale
        second = _starts(sfn, arn, 4, "b")

    assert first == ["ok"] * 13 + ["ThrottlingException"]
    error = refused.value.response
    assert error["Error"] == {"Code": "ThrottlingException", "Message": "Rate exceeded"}
    assert error["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert second == ["ok"] * 3 + ["ThrottlingException"]
    assert model.admitted[rates.START_EXECUTION] == 16
    assert model.throttled[rates.START_EXECUTION] == 3
    # A throttled start started nothing.
    assert len(sfn.list_executions(stateMachineArn=arn)["executions"]) == 16


def test_without_the_model_nothing_is_throttled(moto: None) -> None:
    sfn = _sfn()
    arn = _machine(sfn)

    assert _starts(sfn, arn, 20) == ["ok"] * 20


def test_the_smaller_regions_have_the_smaller_bucket_and_each_region_its_own(moto: None) -> None:
    model = rates.RateModel(scale=100, clock=Clock())
    east, frankfurt = _sfn(), _sfn("eu-central-1")
    east_arn, frankfurt_arn = _machine(east), _machine(frankfurt)

    with rates.throttling(model):
        in_frankfurt = _starts(frankfurt, frankfurt_arn, 9)
        in_east = _starts(east, east_arn, 14)

    assert in_frankfurt == ["ok"] * 8 + ["ThrottlingException"]
    assert in_east == ["ok"] * 13 + ["ThrottlingException"]


def test_express_starts_have_their_own_bucket(moto: None) -> None:
    sfn = _sfn()
    standard, express = _machine(sfn, "std"), _machine(sfn, "fast", "EXPRESS")
    model = rates.RateModel(scale=100, clock=Clock())

    with rates.throttling(model):
        standard_starts = _starts(sfn, standard, 14)
        express_starts = _starts(sfn, express, 61)

    assert standard_starts == ["ok"] * 13 + ["ThrottlingException"]
    assert express_starts == ["ok"] * 60 + ["ThrottlingException"]
    assert model.throttled == {rates.START_EXECUTION: 1, rates.START_EXPRESS: 1}


def test_task_token_answers_have_their_buckets(moto: None) -> None:
    sfn = _sfn()
    model = rates.RateModel(scale=100, clock=Clock())

    def codes(call: Any, count: int) -> list[str]:
        found = []
        for _ in range(count):
            try:
                call(taskToken="no-such-token")
                found.append("ok")
            except ClientError as error:
                found.append(error.response["Error"]["Code"])
        return found

    with rates.throttling(model):
        successes = codes(lambda **kw: sfn.send_task_success(output="{}", **kw), 31)
        failures = codes(sfn.send_task_failure, 31)
        heartbeats = codes(sfn.send_task_heartbeat, 31)

    # A refused token still took a token of the bucket: AWS counts the call, not its outcome.
    for answered in (successes, failures, heartbeats):
        assert "ThrottlingException" not in answered[:30]
        assert answered[30] == "ThrottlingException"
    assert model.throttled == {
        rates.SEND_TASK_SUCCESS: 1,
        rates.SEND_TASK_FAILURE: 1,
        rates.SEND_TASK_HEARTBEAT: 1,
    }


def test_botocore_retries_a_throttled_call_and_each_retry_takes_from_the_bucket(
    moto: None,
) -> None:
    retrying = boto3.client(
        "stepfunctions",
        region_name=REGION,
        config=Config(retries={"mode": "standard", "total_max_attempts": 2}),
    )
    arn = _machine(retrying)
    model = rates.RateModel(scale=100, clock=Clock())

    with rates.throttling(model):
        assert _starts(retrying, arn, 13) == ["ok"] * 13
        with pytest.raises(ClientError, match=r"reached max retries: 1"):
            retrying.start_execution(stateMachineArn=arn, name="over")

    assert model.throttled[rates.START_EXECUTION] == 2


# ---------------------------------------------------------------------- the stack


@pytest.mark.parametrize("modelled", [True, False], ids=["model-on", "model-off"])
def test_the_stack_throttles_at_its_scale_unless_the_model_is_off(
    modelled: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(rates.ENV_SCALE, "100")
    monkeypatch.setenv(platform.ENV_SWITCH, "1" if modelled else "0")
    with EmbeddedStack(sink=io.StringIO(), sweeper_interval=None) as stack:
        client = boto3.client("stepfunctions", region_name=stack.region, config=ONE_ATTEMPT)
        arn = _machine(client, "throttled")
        started = time.monotonic()
        outcomes = _starts(client, arn, 40)
        elapsed = time.monotonic() - started
        model = stack.rates

    if modelled:
        assert model is not None
        assert model.scale == 100
        # The burst, and what the refill (3 a second) gave while the calls ran.
        assert outcomes[:13] == ["ok"] * 13
        assert outcomes.count("ok") <= 13 + int(3 * elapsed) + 1
        assert "ThrottlingException" in outcomes
        assert model.throttled[rates.START_EXECUTION] == outcomes.count("ThrottlingException")
    else:
        assert model is None
        assert outcomes == ["ok"] * 40
