"""Small helpers shared by the table stores."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from boto3.dynamodb.types import TypeSerializer
from botocore.exceptions import ClientError

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

_SERIALIZER = TypeSerializer()


def is_conditional_failure(exc: ClientError) -> bool:
    """True when a conditional write lost (the expected outcome of a race)."""
    return exc.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException"


def values(**plain: object) -> dict[str, Any]:
    """``ExpressionAttributeValues`` from plain Python values (datetimes as ISO text)."""
    return {
        f":{name}": _SERIALIZER.serialize(
            value.isoformat() if isinstance(value, datetime) else value
        )
        for name, value in plain.items()
    }


def put_if_absent(client: DynamoDBClient, table: str, item: dict[str, Any], key: str) -> bool:
    """``PutItem`` unless an item with that key exists; False when it did (a duplicate)."""
    try:
        client.put_item(
            TableName=table, Item=item, ConditionExpression=f"attribute_not_exists({key})"
        )
    except ClientError as exc:
        if is_conditional_failure(exc):
            return False
        raise
    return True


def update_if(client: DynamoDBClient, **request: Any) -> dict[str, Any] | None:
    """``UpdateItem`` with a condition; the response, or None when the condition failed."""
    try:
        response: dict[str, Any] = client.update_item(**request)  # type: ignore[assignment]
    except ClientError as exc:
        if is_conditional_failure(exc):
            return None
        raise
    return response
