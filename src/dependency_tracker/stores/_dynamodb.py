"""Small helpers shared by the table stores."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from boto3.dynamodb.types import TypeSerializer

if TYPE_CHECKING:
    from botocore.exceptions import ClientError

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
