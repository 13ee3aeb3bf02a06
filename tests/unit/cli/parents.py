"""Parent executions on moto for CLI tests: one still running, one that failed."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from tests.conftest import FAIL_WORKFLOW, wait_until

if TYPE_CHECKING:
    from tests.conftest import Aws

# A parent that parks on a task token nobody answers: RUNNING until the test ends.
_PARKED_QUEUE = "parked-parents"


def running_parent(aws: Aws, name: str) -> str:
    """The ARN of a parent execution that stays ``RUNNING``."""
    queue_url = aws.sqs.create_queue(QueueName=_PARKED_QUEUE)["QueueUrl"]
    definition = {
        "StartAt": "Park",
        "States": {
            "Park": {
                "Type": "Task",
                "Resource": "arn:aws:states:::sqs:sendMessage.waitForTaskToken",
                "Parameters": {"QueueUrl": queue_url, "MessageBody": {"token.$": "$$.Task.Token"}},
                "End": True,
            }
        },
    }
    arn = _execution(aws, "parked", definition, name)

    def parked() -> bool:
        # Running, and parked on its token (not about to end).
        found = aws.sqs.get_queue_attributes(
            QueueUrl=queue_url, AttributeNames=["ApproximateNumberOfMessages"]
        )["Attributes"]["ApproximateNumberOfMessages"]
        return int(found) > 0 and _status(aws, arn) == "RUNNING"

    wait_until(parked, timeout=20)
    return arn


def failed_parent(aws: Aws, name: str) -> dict[str, Any]:
    """``DescribeExecution`` of a parent execution that failed ``TaskFailed: simulated failure``."""
    arn = _execution(aws, "failing", FAIL_WORKFLOW, name)
    return aws.wait_for_execution(arn)


def _execution(aws: Aws, workflow: str, definition: dict[str, Any], name: str) -> str:
    machines = {
        m["name"]: m["stateMachineArn"] for m in aws.sfn.list_state_machines()["stateMachines"]
    }
    machine = machines.get(f"deptrack-{workflow}") or aws.create_workflow(workflow, definition)
    started = aws.sfn.start_execution(stateMachineArn=machine, name=name, input=json.dumps({}))
    return str(started["executionArn"])


def _status(aws: Aws, arn: str) -> str:
    return str(aws.sfn.describe_execution(executionArn=arn)["status"])
