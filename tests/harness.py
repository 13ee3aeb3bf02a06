"""Drive the real handlers through the local pumps, step by step, in tests."""

from __future__ import annotations

import functools
import json
import time
from dataclasses import dataclass
from typing import Any

from dependency_tracker.handlers import callback, process, update_state
from dependency_tracker_local import pumpset
from dependency_tracker_local import template as template_reader
from dependency_tracker_local.iam.enforce import IamModel
from dependency_tracker_local.iam.enforce import wanted as iam_wanted
from dependency_tracker_local.pumps import ExecutionPump, SqsPump, StreamPump
from tests.conftest import ACCOUNT, PREFIX, REGION, ROLE_ARN, Aws, wait_until

# A parent that waits on one dependency with a task token, and catches failures.
PARENT_NAME = "test-parent"


def parent_definition(queue_url: str, timeout_seconds: int = 60) -> dict[str, Any]:
    """One ``sqs:sendMessage.waitForTaskToken`` wait, with the public error names caught."""
    return {
        "StartAt": "Wait",
        "States": {
            "Wait": {
                "Type": "Task",
                "Resource": "arn:aws:states:::sqs:sendMessage.waitForTaskToken",
                "Parameters": {
                    "QueueUrl": queue_url,
                    "MessageBody": {
                        "type": "FeatureCollection",
                        "features.$": "$.features",
                        "process.$": "$.process",
                        "callback": {
                            "task_token.$": "$$.Task.Token",
                            "parent_execution.$": "$$.Execution.Id",
                        },
                    },
                },
                "TimeoutSeconds": timeout_seconds,
                "Catch": [
                    {
                        "ErrorEquals": [
                            "DependencyFailed",
                            "DependencyInvalid",
                            "DependencyAborted",
                        ],
                        "ResultPath": "$.caught",
                        "Next": "Caught",
                    }
                ],
                "End": True,
            },
            "Caught": {"Type": "Pass", "End": True},
        },
    }


@dataclass
class Pumps:
    """The three pumps over one moto account, feeding the real Lambda handlers."""

    aws: Aws
    sqs: SqsPump
    executions: ExecutionPump
    stream: StreamPump
    # The IAM model the handlers run under (None with DEPTRACK_IAM=0): its denials.
    iam: IamModel | None = None

    @classmethod
    def create(cls, aws: Aws) -> Pumps:
        handlers = {
            "process": process.lambda_handler,
            "update-state": update_state.lambda_handler,
            "callback": callback.lambda_handler,
        }
        services = {"sqs": aws.sqs, "stepfunctions": aws.sfn, "dynamodbstreams": aws.streams}
        # Each handler runs as its function's role (the IAM model), as the embedded stack runs it.
        iam = _iam_model() if iam_wanted() else None
        # No join queue: the runtime's settings send join chunks to the process queue then,
        # so its pump serves both triggers' messages.
        built = pumpset.build_pumps(
            _event_sources(),
            handler_for=lambda function: (
                handlers[function] if iam is None else iam.as_function(function, handlers[function])
            ),
            client=services.__getitem__,
            queues={"ProcessQueue": pumpset.QueueAddress(aws.queue_url, aws.queue_arn)},
            stream_arns={"DependencyTable": aws.stream_arn},
            prefix=PREFIX,
            region=REGION,
            account=ACCOUNT,
            names=("sqs", "executions", "stream"),
        )
        sqs, executions, stream = built["sqs"], built["executions"], built["stream"]
        assert isinstance(sqs, SqsPump)
        assert isinstance(executions, ExecutionPump)
        assert isinstance(stream, StreamPump)
        return cls(aws=aws, sqs=sqs, executions=executions, stream=stream, iam=iam)

    def deliver_twice(self) -> None:
        """Hand every event to its handler twice, as at-least-once sources may."""
        for pump in (self.sqs, self.executions, self.stream):
            handler = pump.handler

            def twice(event: dict[str, Any], context: Any, handler: Any = handler) -> Any:
                handler(event, context)
                return handler(event, context)

            pump.handler = twice

    def pump(self) -> int:
        """One round of every pump."""
        return self.sqs.pump_once() + self.executions.pump_once() + self.stream.pump_once()

    def settle(self, timeout: float = 20.0) -> None:
        """Pump until no managed execution runs and no pump has anything left."""

        def quiet() -> bool:
            moved = self.pump()
            return moved == 0 and not managed_running(self.aws) and queue_empty(self.aws)

        wait_until(quiet, timeout=timeout)


def _iam_model() -> IamModel:
    """The template's roles for the harness's resources (a new model: denials of its own).

    The harness's parents are its own state machines, named in ExtraParentStateMachineArns
    as a deployment with parents of its own names them; it has no join queue, so a join's
    later chunks go to the process queue, which the process role may send to as well.
    """
    own_parents = f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:*"
    deployed = template_reader.Deployed(
        template_reader.load_template(),
        {"Prefix": PREFIX, "ExtraParentStateMachineArns": own_parents},
        account=ACCOUNT,
        region=REGION,
    )
    return IamModel.from_deployed(deployed, PREFIX)


@functools.cache
def _event_sources() -> pumpset.EventSources:
    """The template's event sources (read once: every flow test builds pumps)."""
    deployed = template_reader.Deployed(
        template_reader.load_template(), {"Prefix": PREFIX}, account=ACCOUNT, region=REGION
    )
    return pumpset.event_sources(deployed)


def create_parent(aws: Aws, timeout_seconds: int = 60) -> str:
    """Register the test parent state machine (not a managed ``{prefix}-`` one)."""
    created = aws.sfn.create_state_machine(
        name=PARENT_NAME,
        roleArn=ROLE_ARN,
        definition=json.dumps(parent_definition(aws.queue_url, timeout_seconds)),
    )
    return str(created["stateMachineArn"])


def start_parent(aws: Aws, parent_arn: str, dependency: dict[str, Any], name: str) -> str:
    """Start a parent waiting on ``dependency``; returns once its message is queued."""
    execution_arn = str(
        aws.sfn.start_execution(
            stateMachineArn=parent_arn, name=name, input=json.dumps(dependency)
        )["executionArn"]
    )

    def queued() -> bool:
        history = aws.sfn.get_execution_history(executionArn=execution_arn)["events"]
        return any(event["type"] == "TaskSubmitted" for event in history)

    wait_until(queued)
    return execution_arn


def queue_bodies(aws: Aws) -> list[dict[str, Any]]:
    """Receive (and leave invisible) everything on the process queue, parsed."""
    bodies: list[dict[str, Any]] = []
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        messages = aws.sqs.receive_message(
            QueueUrl=aws.queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=0
        ).get("Messages", [])
        if not messages:
            break
        bodies.extend(json.loads(m["Body"]) for m in messages)
    return bodies


def managed_running(aws: Aws) -> bool:
    """True while any execution of a ``{prefix}-`` state machine runs."""
    for machine in aws.sfn.list_state_machines()["stateMachines"]:
        if not machine["name"].startswith(f"{PREFIX}-"):
            continue
        running = aws.sfn.list_executions(
            stateMachineArn=machine["stateMachineArn"], statusFilter="RUNNING"
        )["executions"]
        if running:
            return True
    return False


def queue_empty(aws: Aws) -> bool:
    """True when the process queue holds no message, visible or in flight."""
    attributes = aws.sqs.get_queue_attributes(
        QueueUrl=aws.queue_url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return all(int(value) == 0 for value in attributes.values())
