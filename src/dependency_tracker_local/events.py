"""Real AWS event shapes built from what moto returns: the pumps' raw material.

Only shapes live here (and in the handlers); no decision about payloads.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from dependency_tracker.payloads.events import status_change_detail

STATUS_CHANGE_DETAIL_TYPE = "Step Functions Execution Status Change"


def sqs_event(messages: list[dict[str, Any]], *, queue_arn: str, region: str) -> dict[str, Any]:
    """Lambda SQS event for messages from ``ReceiveMessage`` (with ``AttributeNames=All``)."""
    return {
        "Records": [
            {
                "messageId": message["MessageId"],
                "receiptHandle": message["ReceiptHandle"],
                "body": message["Body"],
                "attributes": dict(message.get("Attributes", {})),
                "messageAttributes": {
                    name: _lambda_attribute(value)
                    for name, value in message.get("MessageAttributes", {}).items()
                },
                "md5OfBody": message.get("MD5OfBody", ""),
                "eventSource": "aws:sqs",
                "eventSourceARN": queue_arn,
                "awsRegion": region,
            }
            for message in messages
        ]
    }


def _lambda_attribute(value: dict[str, Any]) -> dict[str, Any]:
    """A message attribute as Lambda spells it (``stringValue``), from ``ReceiveMessage``'s."""
    return {
        "stringValue": value.get("StringValue"),
        "binaryValue": value.get("BinaryValue"),
        "stringListValues": [],
        "binaryListValues": [],
        "dataType": value.get("DataType", "String"),
    }


def status_change_event(
    execution: dict[str, Any], *, region: str, account: str, event_id: str | None = None
) -> dict[str, Any]:
    """EventBridge "Step Functions Execution Status Change" event from ``DescribeExecution``."""
    stop = execution.get("stopDate")
    detail = status_change_detail(execution)
    when = stop if isinstance(stop, datetime) else datetime.now(UTC)
    return {
        "version": "0",
        "id": event_id or str(uuid.uuid4()),
        "detail-type": STATUS_CHANGE_DETAIL_TYPE,
        "source": "aws.states",
        "account": account,
        "time": when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": region,
        "resources": [execution["executionArn"]],
        "detail": detail,
    }


def stream_event(records: list[dict[str, Any]], *, stream_arn: str, region: str) -> dict[str, Any]:
    """Lambda DynamoDB stream event for records from ``GetRecords``."""
    return {"Records": [stream_record(r, stream_arn=stream_arn, region=region) for r in records]}


def stream_record(record: dict[str, Any], *, stream_arn: str, region: str) -> dict[str, Any]:
    """One Lambda-shaped stream record (the wire format, timestamps as epoch seconds)."""
    dynamodb = dict(record["dynamodb"])
    created = dynamodb.get("ApproximateCreationDateTime")
    if isinstance(created, datetime):
        dynamodb["ApproximateCreationDateTime"] = int(created.timestamp())
    return {
        "eventID": record["eventID"],
        "eventName": record["eventName"],
        "eventVersion": record.get("eventVersion", "1.1"),
        "eventSource": "aws:dynamodb",
        "awsRegion": region,
        "dynamodb": dynamodb,
        "eventSourceARN": stream_arn,
    }
