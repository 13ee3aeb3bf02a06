"""Express state machines in the local stack behave as AWS runs them (the strict layer).

moto runs an Express machine like a Standard one; these tests hold the layer to the
Step Functions guide ("Execution guarantees"; DescribeExecution): a start under a used
name is a second run with its own Express ARN, and an Express run cannot be described.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from dependency_tracker.core import naming
from dependency_tracker_local.strict import strict_limits
from tests.conftest import wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator

ROLE = "arn:aws:iam::123456789012:role/express-test"
DEFINITION = json.dumps({"StartAt": "Done", "States": {"Done": {"Type": "Pass", "End": True}}})


@pytest.fixture
def sfn() -> Iterator[Any]:
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        yield boto3.session.Session(region_name="us-east-1").client("stepfunctions")


def machine(sfn: Any, kind: str) -> str:
    return str(
        sfn.create_state_machine(
            name=f"m-{kind.lower()}", roleArn=ROLE, definition=DEFINITION, type=kind
        )["stateMachineArn"]
    )


def test_an_express_start_under_a_used_name_is_a_second_run(sfn: Any) -> None:
    # GIVEN an Express machine, under the strict layer
    arn = machine(sfn, "EXPRESS")
    with strict_limits():
        # WHEN the same name is started twice
        first = sfn.start_execution(stateMachineArn=arn, name="same", input="{}")
        second = sfn.start_execution(stateMachineArn=arn, name="same", input="{}")
    # THEN there are two runs, each with its own Express ARN
    assert first["executionArn"] != second["executionArn"]
    for started in (first, second):
        assert started["executionArn"].startswith(
            "arn:aws:states:us-east-1:123456789012:express:m-express:same:"
        )
        assert naming.is_express_arn(started["executionArn"])


def test_an_express_run_cannot_be_described(sfn: Any) -> None:
    # GIVEN an Express run
    arn = machine(sfn, "EXPRESS")
    with strict_limits():
        started = sfn.start_execution(stateMachineArn=arn, name="run", input="{}")
        # WHEN it is described THEN the ARN is refused, as AWS refuses Express runs
        with pytest.raises(ClientError) as refused:
            sfn.describe_execution(executionArn=started["executionArn"])
    assert refused.value.response["Error"]["Code"] == "InvalidArn"


def test_standard_starts_stay_idempotent_by_name(sfn: Any) -> None:
    # GIVEN a Standard machine's run, ended, under the strict layer
    arn = machine(sfn, "STANDARD")
    with strict_limits():
        first = sfn.start_execution(stateMachineArn=arn, name="same", input="{}")
        assert ":execution:m-standard:same" in first["executionArn"]
        wait_until(
            lambda: (
                sfn.describe_execution(executionArn=first["executionArn"])["status"] != "RUNNING"
            )
        )
        # WHEN the name is started again THEN it is refused: no second run
        with pytest.raises(ClientError) as refused:
            sfn.start_execution(stateMachineArn=arn, name="same", input="{}")
    assert refused.value.response["Error"]["Code"] == "ExecutionAlreadyExists"


def test_without_the_layer_moto_keeps_its_own_express(sfn: Any) -> None:
    # GIVEN an Express machine, no strict layer: moto's behaviour is unchanged
    arn = machine(sfn, "EXPRESS")
    started = sfn.start_execution(stateMachineArn=arn, name="same", input="{}")
    assert ":execution:m-express:same" in started["executionArn"]
