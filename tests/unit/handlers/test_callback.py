"""callback handler: stream events in, SendTaskSuccess/SendTaskFailure out."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pytest
from botocore.exceptions import ClientError

from dependency_tracker.core import clients
from dependency_tracker.core.enums import PayloadState
from dependency_tracker.handlers.callback import callback_flow, lambda_handler
from dependency_tracker.table.items import WaiterItem
from tests.conftest import Aws, load_event, payload
from tests.harness import Pumps, create_parent, start_parent

if TYPE_CHECKING:
    from dependency_tracker_local.context import LocalContext

NOW = datetime.now(UTC)


def stored_waiter(aws: Aws, event: dict[str, Any]) -> WaiterItem:
    """Put the row the static stream event describes into the table."""
    image = event["Records"][0]["dynamodb"]["NewImage"]
    waiter = WaiterItem.from_item(image)
    aws.dynamodb.put_item(TableName=aws.dependencies.table_name, Item=image)
    return waiter


@pytest.mark.usefixtures("workflows")
@pytest.mark.parametrize(
    ("workflow", "status", "caught"),
    [
        ("pass", "SUCCEEDED", None),
        ("fail", "SUCCEEDED", "DependencyFailed"),
        ("invalid", "SUCCEEDED", "DependencyInvalid"),
    ],
)
def test_parent_resumes_with_the_outcome(
    aws: Aws, workflow: str, status: str, caught: str | None
) -> None:
    # GIVEN a real parent waiting on a dependency with its task token
    pumps = Pumps.create(aws)
    parent = start_parent(aws, create_parent(aws), payload(workflow=workflow), name="p1")
    # WHEN the pumps feed the three handlers
    pumps.settle()
    # THEN the parent resumed with the summary or took its Catch path
    described = aws.wait_for_execution(parent)
    assert described["status"] == status
    output = json.loads(described["output"])
    if caught is None:
        assert output["state"] == "SUCCEEDED"
        assert output["replayed"] is False
        assert output["payload_id"].endswith(f"workflow-{workflow}/item-1")
        assert output["execution_arn"].startswith("arn:aws:states:")
    else:
        assert output["caught"]["Error"] == caught
    waiters = list(aws.dependencies.waiters(f"sentinel-2-l2a/workflow-{workflow}/item-1"))
    assert len(waiters) == 1
    assert waiters[0].notified_at is not None
    assert waiters[0].expiration_time is not None
    assert (waiters[0].notify_outcome or "").startswith("SENT:")


def test_gone_parent_is_recorded_not_failed(aws: Aws, lambda_context: LocalContext) -> None:
    # GIVEN the real stream event for a row whose token Step Functions no longer knows
    event = load_event("ddb_stream_waiter.json")
    waiter = stored_waiter(aws, event)
    # WHEN the callback runs
    response = lambda_handler(event, lambda_context)
    # THEN the batch succeeds and the row says what happened
    assert response == {"batchItemFailures": []}
    row = aws.dependencies.get(waiter.payload_id, waiter.waiter_id)
    assert row is not None
    assert row.notify_outcome == "PARENT_GONE:InvalidToken"
    assert row.expiration_time is not None


@pytest.fixture
def no_waits(aws: Aws) -> None:
    """The handler retries a refused send without sleeping (see test_callback_backoff.py)."""
    flow = callback_flow()
    flow.backoff = replace(flow.backoff, sleep=lambda _seconds: None)


@pytest.mark.usefixtures("no_waits")
def test_throttling_fails_only_that_record(aws: Aws, lambda_context: LocalContext) -> None:
    # GIVEN two terminal rows in one stream batch, and Step Functions throttling the first token
    # (every try: the handler's own retries run out)
    event = load_event("ddb_stream_waiter.json")
    first = stored_waiter(aws, event)
    second_record = json.loads(json.dumps(event["Records"][0]))
    second_record["dynamodb"]["SequenceNumber"] = "111100000000000000000002"
    for image in (second_record["dynamodb"]["NewImage"], second_record["dynamodb"]["Keys"]):
        image["waiter_id"] = {"S": "token#1111"}
    second_record["dynamodb"]["NewImage"]["task_token"] = {"S": "OTHER"}
    aws.dynamodb.put_item(
        TableName=aws.dependencies.table_name, Item=second_record["dynamodb"]["NewImage"]
    )
    event["Records"].append(second_record)

    def throttle(params: dict[str, Any], **_: Any) -> None:
        if params.get("taskToken") == "TOKEN":
            raise ClientError(
                {"Error": {"Code": "ThrottlingException", "Message": "slow down"}},
                "SendTaskSuccess",
            )

    clients.client("stepfunctions").meta.events.register(
        "provide-client-params.sfn.SendTaskSuccess", throttle
    )
    # WHEN the callback runs
    response = lambda_handler(event, lambda_context)
    # THEN only the throttled record is retried, and it is not marked notified
    assert response == {"batchItemFailures": [{"itemIdentifier": "111100000000000000000001"}]}
    row = aws.dependencies.get(first.payload_id, first.waiter_id)
    assert row is not None
    assert row.notified_at is None
    other = aws.dependencies.get(first.payload_id, "token#1111")
    assert other is not None
    assert other.notify_outcome == "PARENT_GONE:InvalidToken"


def test_rows_not_ready_or_already_notified_are_skipped(
    aws: Aws, lambda_context: LocalContext
) -> None:
    event = load_event("ddb_stream_waiter.json")
    waiter = stored_waiter(aws, event)
    processing = json.loads(json.dumps(event))
    processing["Records"][0]["dynamodb"]["NewImage"]["workflow_state"] = {"S": "PROCESSING"}
    assert lambda_handler(processing, lambda_context) == {"batchItemFailures": []}
    row = aws.dependencies.get(waiter.payload_id, waiter.waiter_id)
    assert row is not None
    assert row.notified_at is None
    # a duplicate delivery after the row was marked sends nothing
    aws.dependencies.mark_notified(
        waiter.payload_id, waiter.waiter_id, outcome="SENT:SUCCEEDED", retention_days=1
    )
    calls: list[str] = []
    clients.client("stepfunctions").meta.events.register(
        "before-call.sfn.*", lambda model, **_: calls.append(model.name)
    )
    assert lambda_handler(event, lambda_context) == {"batchItemFailures": []}
    assert calls == []


def test_remove_records_are_ignored(aws: Aws, lambda_context: LocalContext) -> None:
    event = load_event("ddb_stream_waiter.json")
    record = event["Records"][0]
    record["eventName"] = "REMOVE"
    del record["dynamodb"]["NewImage"]
    assert lambda_handler(event, lambda_context) == {"batchItemFailures": []}


def test_malformed_image_fails_the_record(aws: Aws, lambda_context: LocalContext) -> None:
    event = load_event("ddb_stream_waiter.json")
    del event["Records"][0]["dynamodb"]["NewImage"]["task_token"]
    response = lambda_handler(event, lambda_context)
    assert response == {"batchItemFailures": [{"itemIdentifier": "111100000000000000000001"}]}


def test_invalid_message_parent_is_told(aws: Aws, lambda_context: LocalContext) -> None:
    # GIVEN a real parent whose dependency message is invalid (no features, no id)
    pumps = Pumps.create(aws)
    parent = start_parent(
        aws, create_parent(aws), {"features": [], "process": [{"workflow": "pass"}]}, name="p2"
    )
    pumps.settle()
    described = aws.wait_for_execution(parent)
    assert json.loads(described["output"])["caught"]["Error"] == "DependencyInvalid"
    rows = [
        r
        for r in aws.dynamodb.scan(TableName=aws.dependencies.table_name)["Items"]
        if r["payload_id"]["S"].startswith("invalid-message/")
    ]
    assert len(rows) == 1
    assert WaiterItem.from_item(rows[0]).workflow_state is PayloadState.INVALID
