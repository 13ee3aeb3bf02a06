"""The DynamoDB calls a join's rows share: consistent reads, transactions retried on conflict."""

from __future__ import annotations

import random
import time
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from dependency_tracker.table.dynamodb import batch_get, pages, values
from dependency_tracker.table.items import key_attributes

if TYPE_CHECKING:
    from collections.abc import Iterator
    from datetime import datetime

    from mypy_boto3_dynamodb import DynamoDBClient

# Chunk rows and count shards outlive any wait (MaxWaitSeconds is at most a year):
# the decision and the summary need them until the parent is told.
BOOKKEEPING_RETENTION_DAYS = 400
# Transaction conflicts retried in place before the stream retries the record.
MAX_CONFLICT_RETRIES = 5
# Membership puts and summary reads are I/O bound and spread over members' partitions.
DEFAULT_CONCURRENCY = 8


class RowAccess:
    """One client and one table: the calls the parts of ``JoinStore`` share."""

    def __init__(
        self, client: DynamoDBClient, table_name: str, *, concurrency: int = DEFAULT_CONCURRENCY
    ) -> None:
        self.client = client
        self.table_name = table_name
        self.concurrency = max(1, concurrency)

    def transact(self, items: list[dict[str, Any]]) -> bool:
        """Run a transaction; False when a condition refused it (it wrote nothing).

        Two transactions on one item at once conflict on AWS (the count shards are
        few and hot): a conflict is retried here, with jittered backoff, before the
        error goes back to the stream, whose retries are few and then discard.
        """
        for attempt in range(MAX_CONFLICT_RETRIES + 1):
            try:
                self.client.transact_write_items(TransactItems=items)  # type: ignore[arg-type]
            except ClientError as exc:
                if _cancelled_by_condition(exc):
                    return False
                if not _conflicted(exc) or attempt == MAX_CONFLICT_RETRIES:
                    raise
                time.sleep(random.uniform(0, min(1.0, 0.025 * 2**attempt)))  # noqa: S311
                continue
            return True
        return True  # unreachable: the last attempt returns or raises

    def get(self, payload_id: str, waiter_id: str) -> dict[str, Any] | None:
        """Strongly consistent ``GetItem``; None when the row does not exist."""
        response = self.client.get_item(
            TableName=self.table_name,
            Key=key_attributes(payload_id=payload_id, waiter_id=waiter_id),
            ConsistentRead=True,
        )
        return response.get("Item")

    def rows_under(
        self,
        partition: str,
        prefix: str,
        *,
        limit: int | None = None,
        projection: str | None = None,
    ) -> Iterator[dict[str, Any]]:
        """The rows of ``partition`` (its key form) whose sort key starts with ``prefix``.

        Consistent ``Query`` pages to the last; ``limit`` items a page at most, and only the
        ``projection`` attributes when given.
        """
        query: dict[str, Any] = {
            "TableName": self.table_name,
            "KeyConditionExpression": "payload_id = :pid AND begins_with(waiter_id, :prefix)",
            "ExpressionAttributeValues": values(pid=partition, prefix=prefix),
            "ConsistentRead": True,
        }
        if limit is not None:
            query["Limit"] = limit
        if projection is not None:
            query["ProjectionExpression"] = projection
        for items in pages(self.client.query, query):
            yield from items

    def batch_get(self, keys: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        """Consistent ``BatchGetItem`` of at most 100 keys, unprocessed keys retried."""
        yield from batch_get(self.client, self.table_name, keys)


def bookkeeping_expiry(now: datetime) -> int:
    """When a chunk row or count shard written at ``now`` expires (epoch seconds)."""
    return int((now + timedelta(days=BOOKKEEPING_RETENTION_DAYS)).timestamp())


def _conflicted(exc: ClientError) -> bool:
    """Another transaction held one of the items (retryable)."""
    code = exc.response.get("Error", {}).get("Code")
    if code == "TransactionConflictException":
        return True
    reasons = exc.response.get("CancellationReasons") or []
    return code == "TransactionCanceledException" and any(
        reason.get("Code") == "TransactionConflict" for reason in reasons
    )


def _cancelled_by_condition(exc: ClientError) -> bool:
    """A transaction cancelled only because one of its conditions failed."""
    if exc.response.get("Error", {}).get("Code") != "TransactionCanceledException":
        return False
    reasons = exc.response.get("CancellationReasons") or []
    codes = {reason.get("Code") for reason in reasons}
    if reasons:
        return codes <= {"ConditionalCheckFailed", "None"} and "ConditionalCheckFailed" in codes
    return "ConditionalCheckFailed" in exc.response.get("Error", {}).get("Message", "")
