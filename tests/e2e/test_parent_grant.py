"""A parent the stack may not answer is told about, not left hanging silently (issue 36).

The callback role may answer only the stack's own state machines and those named in
``ExtraParentStateMachineArns``. Here a team's own parent state machine is deliberately
left out: the IAM model refuses the answer as AWS does, the callback logs the fix at
ERROR and records the refusal on the row once, ``stuck`` says why the parent hangs, and
once the grant is fixed (a stack update of the parameter) the sweeper answers it.
"""

from __future__ import annotations

import io
import json
from typing import TYPE_CHECKING, Any

import pytest
from typer.testing import CliRunner

from dependency_tracker_cli.__main__ import app
from dependency_tracker_local import LocalStack
from tests.conftest import ROLE_ARN, wait_until
from tests.e2e.conftest import dependency, dependency_id, finished, waiters

if TYPE_CHECKING:
    from collections.abc import Iterator

    from dependency_tracker.table.items import WaiterItem

pytestmark = pytest.mark.e2e

PREFIX = "deptrack"
ITEM = "grant-1"
DENIED = "AccessDeniedException"


@pytest.fixture
def sink() -> io.StringIO:
    """What the stack logs: what ``serve`` writes to its log file (it passes that as sink)."""
    return io.StringIO()


@pytest.fixture
def stack(sink: io.StringIO) -> Iterator[LocalStack]:
    # No ExtraParentStateMachineArns: the callback role may answer the stack's own parents only.
    with LocalStack(
        prefix=PREFIX,
        sink=sink,
        port=0,
        parameters={},
        sweeper_interval=None,
        sweeper_min_age_seconds=0,
    ) as running:
        yield running


def own_parent(stack: LocalStack) -> str:
    """A team's own parent state machine, not one of the stack's: its ARN."""
    queue = stack.outputs["ProcessQueueUrl"]
    definition = {
        "StartAt": "Wait",
        "States": {
            "Wait": {
                "Type": "Task",
                "Resource": "arn:aws:states:::sqs:sendMessage.waitForTaskToken",
                "Parameters": {
                    "QueueUrl": queue,
                    "MessageBody": {
                        "payload.$": "$.tile",
                        "callback": {
                            "task_token.$": "$$.Task.Token",
                            "parent_execution.$": "$$.Execution.Id",
                        },
                    },
                },
                "TimeoutSeconds": 300,
                "End": True,
            }
        },
    }
    created = stack.client("stepfunctions").create_state_machine(
        name="team-parent", roleArn=ROLE_ARN, definition=json.dumps(definition)
    )
    return str(created["stateMachineArn"])


def logged(sink: io.StringIO) -> list[dict[str, Any]]:
    """The handlers' JSON log lines in the stack's log."""
    found = []
    for line in sink.getvalue().splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            if "level" in record:
                found.append(record)
    return found


def refusals_handled(sink: io.StringIO) -> int:
    return sum(
        1
        for record in logged(sink)
        if record["message"] == "callback handled" and record.get("action") == "refused"
    )


def row_of(stack: LocalStack) -> WaiterItem | None:
    rows = list(waiters(stack).waiters(dependency_id(ITEM)))
    return rows[0] if rows else None


def stream_images(stack: LocalStack) -> list[dict[str, Any]]:
    """Every new image on the dependency table's stream so far."""
    streams = stack.client("dynamodbstreams")
    arn = stack.outputs["DependencyStreamArn"]
    images = []
    for shard in streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]:
        iterator = streams.get_shard_iterator(
            StreamArn=arn, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        records = streams.get_records(ShardIterator=iterator)["Records"]
        images += [r["dynamodb"]["NewImage"] for r in records if "NewImage" in r["dynamodb"]]
    return images


def stuck(stack: LocalStack) -> dict[str, Any]:
    assert stack.endpoint_url is not None
    result = CliRunner().invoke(
        app,
        ["stuck", "--older-than", "0s", "--json", "--endpoint-url", stack.endpoint_url],
        env={"DEPTRACK_PREFIX": PREFIX, "DEPTRACK_STACK_NAME": None},
    )
    assert result.exit_code == 0, result.output
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def test_a_parent_the_stack_may_not_answer_is_told_about_and_answered_once_allowed(
    stack: LocalStack, sink: io.StringIO
) -> None:
    assert stack.iam is not None, "the IAM model is on unless DEPTRACK_IAM=0"
    # GIVEN a team's own parent state machine, not in ExtraParentStateMachineArns
    machine = own_parent(stack)
    sfn = stack.client("stepfunctions")
    parent = sfn.start_execution(
        stateMachineArn=machine, name="run-1", input=json.dumps({"tile": dependency(ITEM)})
    )["executionArn"]
    # WHEN its dependency succeeds and the callback answers it
    wait_until(lambda: (row := row_of(stack)) is not None and row.notify_refused, timeout=60)
    # (the refusal's own write is a stream record the callback's filter passes: it runs again)
    wait_until(lambda: refusals_handled(sink) >= 2, timeout=30)
    # THEN Step Functions refused it as AWS does: the callback role may not answer that machine
    sends = [d for d in stack.iam.denials if d.action.startswith("states:SendTask")]
    assert {(d.role, d.action, d.resource) for d in sends} == {
        ("CallbackRole", "states:SendTaskSuccess", machine)
    }
    # AND the handlers' log has one ERROR naming the parent, its state machine and the fix
    (error,) = [record for record in logged(sink) if record["level"] == "ERROR"]
    for text in (parent, machine, DENIED, "ExtraParentStateMachineArns"):
        assert text in error["message"]
    # AND the IAM model's line in the same log says what it means and how to allow it locally
    (denied,) = {line for line in sink.getvalue().splitlines() if "IAM denied" in line}
    assert f"states:SendTaskSuccess on {machine}" in denied
    assert "is not one the stack may answer" in denied
    assert "DEPTRACK_STACK_PARAMETERS" in denied
    # AND the row records the refusal once: one write, so one stream record, and no loop
    row = row_of(stack)
    assert row is not None
    assert row.notify_refused == DENIED
    assert row.notified_at is None
    recorded = [image for image in stream_images(stack) if "notify_refused" in image]
    assert len(recorded) == 1
    assert refusals_handled(sink) == 2
    assert len(sends) == 2
    # WHEN an operator asks what is stuck
    (held,) = [p for p in stuck(stack)["parents"] if p["parent"]["label"].endswith("run-1")]
    # THEN the reason says the tracker may not answer this parent, and why
    (hold,) = held["dependencies"]
    assert hold["reason"] == (
        "resolved SUCCEEDED; the tracker may not answer this parent (AccessDeniedException): "
        "its state machine is not in ExtraParentStateMachineArns"
    )
    assert hold["notify_refused"] == DENIED
    # WHEN the grant is fixed (a stack update of the parameter) and the sweeper runs
    stack.update_parameters({"ExtraParentStateMachineArns": machine})
    report = stack.sweep_once()
    # THEN the parent got its answer, and the row is told
    assert report["sent"] == 1
    assert finished(stack, parent, timeout=30)["status"] == "SUCCEEDED"
    told = row_of(stack)
    assert told is not None
    assert told.notify_outcome == "SENT:SUCCEEDED"
    assert len([d for d in stack.iam.denials if d.action.startswith("states:SendTask")]) == 2
    stack.iam.denials.clear()
