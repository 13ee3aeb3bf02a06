"""cirrus-geo's side, seen from the tracker: read its state table, send to its process queue.

The tracker never writes cirrus's table: cirrus's own process Lambda claims,
starts and records every run. What the tracker sends is an ordinary cirrus
process payload on cirrus's own queue.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

from dependency_tracker.cirrus.models import CirrusStateItem, cirrus_key
from dependency_tracker.core.limits import SQS_DEFAULT_MAX_MESSAGE_BYTES, utf8_size

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_sqs import SQSClient

# Where a payload too large for one SQS message is put in cirrus's payload bucket, under
# "{PayloadRootPrefix}/tmp/" (cirrus's lifecycle rule expires it after 10 days); cirrus's
# process Lambda reads {"url": ...} bodies with its own role, which reads its own bucket.
FORWARDED_PREFIX = "deptrack-forwarded"


def forwarded_prefix(root_prefix: str) -> str:
    """Key prefix of forwarded payloads in cirrus's bucket (the process role may write it)."""
    # cirrus's scratch prefix in its bucket, not a local temporary directory
    return f"{root_prefix.strip('/')}/tmp/{FORWARDED_PREFIX}"  # noqa: S108


class CirrusStateTable:
    """Strongly consistent reads of cirrus's ``${CirrusPrefix}-state`` table."""

    def __init__(self, client: DynamoDBClient, table_name: str) -> None:
        self._client = client
        self.table_name = table_name

    def get(self, payload_id: str) -> CirrusStateItem | None:
        """The payload's item, read after every write cirrus acknowledged (or None)."""
        response = self._client.get_item(
            TableName=self.table_name,
            Key={name: {"S": value} for name, value in cirrus_key(payload_id).items()},
            ConsistentRead=True,
        )
        item = response.get("Item")
        return None if item is None else CirrusStateItem.from_item(item)


class CirrusQueue:
    """cirrus's process queue: where a payload goes to be run by cirrus."""

    def __init__(
        self,
        sqs: SQSClient,
        queue_url: str,
        *,
        s3: S3Client | None = None,
        bucket: str | None = None,
        root_prefix: str = "cirrus",
    ) -> None:
        self._sqs = sqs
        self.queue_url = queue_url
        self._s3 = s3
        self._bucket = bucket
        self._key_prefix = forwarded_prefix(root_prefix)

    def send(self, payload: dict[str, Any]) -> str:
        """Send one payload; returns how it travelled (``inline`` or the pointer's URL).

        Raises:
            ValueError: Over one SQS message and no cirrus payload bucket to pass it by.
        """
        body = json.dumps(payload, sort_keys=True)
        if utf8_size(body) <= SQS_DEFAULT_MAX_MESSAGE_BYTES:
            self._sqs.send_message(QueueUrl=self.queue_url, MessageBody=body)
            return "inline"
        if self._s3 is None or self._bucket is None:
            msg = (
                f"the payload is {utf8_size(body)} bytes, over one SQS message "
                f"({SQS_DEFAULT_MAX_MESSAGE_BYTES}), and no cirrus payload bucket is "
                "configured to pass it by"
            )
            raise ValueError(msg)
        digest = hashlib.sha256(body.encode("utf-8")).hexdigest()
        key = f"{self._key_prefix}/{digest}.json"
        self._s3.put_object(Bucket=self._bucket, Key=key, Body=body.encode("utf-8"))
        url = f"s3://{self._bucket}/{key}"
        self._sqs.send_message(QueueUrl=self.queue_url, MessageBody=json.dumps({"url": url}))
        return url
