"""Small helpers shared by the table stores."""

from __future__ import annotations

import time
from datetime import datetime
from typing import TYPE_CHECKING, Any

from boto3.dynamodb.types import TypeSerializer
from botocore.exceptions import ClientError

from dependency_tracker.core.limits import DDB_MAX_BATCH_GET_KEYS

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

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


def pages(call: Callable[..., Any], request: dict[str, Any]) -> Iterator[list[dict[str, Any]]]:
    """Each page of a ``Query`` or ``Scan`` (``call``, e.g. ``client.query``), to the last."""
    request = dict(request)
    while True:
        response = call(**request)
        yield response.get("Items", [])
        last = response.get("LastEvaluatedKey")
        if not last:
            return
        request["ExclusiveStartKey"] = last


def batch_get(
    client: DynamoDBClient,
    table: str,
    keys: list[dict[str, Any]],
    *,
    projection: str | None = None,
    names: dict[str, str] | None = None,
) -> Iterator[dict[str, Any]]:
    """Strongly consistent ``BatchGetItem`` of any number of keys (100 per request).

    Keys DynamoDB leaves unprocessed (throttling) are asked again with backoff,
    as AWS asks; missing items are simply not yielded.

    Raises:
        RuntimeError: Keys were still unprocessed after 10 tries.
    """
    for start in range(0, len(keys), DDB_MAX_BATCH_GET_KEYS):
        wanted: dict[str, Any] = {
            "Keys": keys[start : start + DDB_MAX_BATCH_GET_KEYS],
            "ConsistentRead": True,
        }
        if projection is not None:
            wanted["ProjectionExpression"] = projection
        if names:
            wanted["ExpressionAttributeNames"] = names
        request: dict[str, Any] = {table: wanted}
        for attempt in range(10):
            response = client.batch_get_item(RequestItems=request)
            yield from response.get("Responses", {}).get(table, [])
            request = dict(response.get("UnprocessedKeys") or {})
            if not request:
                break
            time.sleep(min(1.0, 0.05 * 2**attempt))
        else:
            msg = f"BatchGetItem left keys unprocessed after 10 tries on {table}"
            raise RuntimeError(msg)
