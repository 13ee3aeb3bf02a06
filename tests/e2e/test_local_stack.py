"""The LocalStack public contract: outputs, clients, managed workflows."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from dependency_tracker_local import LocalStack

pytestmark = pytest.mark.e2e


def test_outputs_are_the_public_contract(stack: LocalStack) -> None:
    outputs = stack.outputs
    for key in (
        "ProcessQueueUrl",
        "ProcessDlqUrl",
        "StateTableName",
        "DependencyTableName",
        "PayloadBucketName",
        "Prefix",
        "Region",
        "StateMachines",
    ):
        assert key in outputs, key
    assert outputs["Prefix"] == "deptrack"
    assert set(outputs["StateMachines"]) >= {"wait-for-dependencies", "simulate"}
    # every resource exists behind the stack's clients
    stack.client("sqs").get_queue_attributes(QueueUrl=outputs["ProcessDlqUrl"])
    stack.client("dynamodb").describe_table(TableName=outputs["DependencyTableName"])
    stack.client("s3").head_bucket(Bucket=outputs["PayloadBucketName"])
    for arn in outputs["StateMachines"].values():
        assert ":stateMachine:deptrack-" in arn
        stack.client("stepfunctions").describe_state_machine(stateMachineArn=arn)
