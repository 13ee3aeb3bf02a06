"""At-least-once delivery: every event delivered twice changes nothing."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest

from dependency_tracker.core.enums import PayloadState
from dependency_tracker.handlers.process import lambda_handler as process_handler
from dependency_tracker.table.items import waiter_id_for
from tests.conftest import Aws, payload, payload_id
from tests.harness import Pumps, create_parent, start_parent
from tests.unit.handlers.conftest import sqs_event

if TYPE_CHECKING:
    from dependency_tracker_local.context import LocalContext


def table_rows(aws: Aws, table: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = aws.dynamodb.scan(TableName=table, ConsistentRead=True)["Items"]
    return sorted(items, key=json.dumps)


@pytest.mark.usefixtures("workflows")
def test_duplicate_process_message_writes_nothing(aws: Aws, lambda_context: LocalContext) -> None:
    event = sqs_event(payload(callback={"task_token": "t"}), ids=["same"])
    process_handler(event, lambda_context)
    states = table_rows(aws, aws.states.table_name)
    waiters = table_rows(aws, aws.dependencies.table_name)
    assert process_handler(event, lambda_context) == {"batchItemFailures": []}
    assert table_rows(aws, aws.states.table_name) == states
    assert table_rows(aws, aws.dependencies.table_name) == waiters
    listed = aws.sfn.list_executions(stateMachineArn=workflows_arn(aws))["executions"]
    assert len(listed) == 1


def workflows_arn(aws: Aws) -> str:
    return f"{aws.settings.workflow_arn_prefix}pass"


@pytest.mark.usefixtures("workflows")
def test_every_event_delivered_twice_resumes_each_parent_once(aws: Aws) -> None:
    # GIVEN pumps that hand every event to its handler twice
    pumps = Pumps.create(aws)
    pumps.deliver_twice()
    parent_arn = create_parent(aws)
    # WHEN two parents wait on one payload and a third arrives after it finished
    first = start_parent(aws, parent_arn, payload(), name="p1")
    second = start_parent(aws, parent_arn, payload(), name="p2")
    pumps.settle()
    third = start_parent(aws, parent_arn, payload(), name="p3")
    pumps.settle()
    # THEN one child execution ran, and each parent resumed exactly once
    assert len(aws.sfn.list_executions(stateMachineArn=workflows_arn(aws))["executions"]) == 1
    for parent, replayed in ((first, False), (second, False), (third, True)):
        described = aws.wait_for_execution(parent)
        assert described["status"] == "SUCCEEDED"
        assert json.loads(described["output"])["replayed"] is replayed
        history = aws.sfn.get_execution_history(executionArn=parent)["events"]
        assert [e["type"] for e in history].count("TaskSucceeded") == 1
    item = aws.states.get(payload_id())
    assert item is not None
    assert (item.state, item.attempt) == (PayloadState.SUCCEEDED, 1)
    rows = list(aws.dependencies.waiters(payload_id()))
    assert len(rows) == 3
    assert all(row.notify_outcome == "SENT:SUCCEEDED" for row in rows)
    assert pumps.stream.dead_letters == []
    assert pumps.executions.dead_letters == []


@pytest.mark.usefixtures("workflows")
def test_duplicate_stream_record_after_notification_is_a_no_op(
    aws: Aws, lambda_context: LocalContext
) -> None:
    pumps = Pumps.create(aws)
    parent = start_parent(aws, create_parent(aws), payload(), name="p1")
    pumps.settle()
    aws.wait_for_execution(parent)
    rows = table_rows(aws, aws.dependencies.table_name)
    # WHEN the whole stream is replayed from the start
    replay = Pumps.create(aws)
    replay.stream.pump_once()
    # THEN nothing changed and the parent saw one success
    assert table_rows(aws, aws.dependencies.table_name) == rows
    history = aws.sfn.get_execution_history(executionArn=parent)["events"]
    assert [e["type"] for e in history].count("TaskSucceeded") == 1
    waiter = aws.dependencies.get(payload_id(), waiter_id_for_parent(aws, parent))
    assert waiter is not None
    assert waiter.notify_outcome == "SENT:SUCCEEDED"


def waiter_id_for_parent(aws: Aws, parent: str) -> str:
    rows = [r for r in aws.dependencies.waiters(payload_id()) if r.parent_execution == parent]
    assert len(rows) == 1
    return waiter_id_for(rows[0].task_token)
