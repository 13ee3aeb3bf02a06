"""The sweeper's reads: bounded ``Scan`` pages of both tables, and where the last run stopped.

The flows never scan; the sweeper does, one page at a time, because nothing
indexes "terminal and not notified" (a sparse index would, at the price of a
write to it on every resolution and every notification; see
``docs/reliability.md``). Both scans are eventually consistent, which halves
their read units: a row seen here is read again, strongly consistent, before
anything is sent for it, and a row missed because it changed a moment ago is
younger than the sweeper's threshold anyway.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError
from pydantic import BaseModel, ValidationError

from dependency_tracker.core.enums import TERMINAL_STATES, PayloadState, utcnow
from dependency_tracker.core.observability import logger
from dependency_tracker.joins.rows import Row, row_from_item
from dependency_tracker.table.dynamodb import values
from dependency_tracker.table.items import PayloadStateItem
from dependency_tracker.table.prefixes import JOIN_ROW_KEY
from dependency_tracker.table.rows import is_bookkeeping_item

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_s3 import S3Client

# Where the cursor lives in the payload bucket (the sweeper's grant covers this prefix).
CURSOR_KEY = "sweeper/cursor.json"
_TERMINAL = sorted(state.value for state in TERMINAL_STATES)
_LIVE = (PayloadState.CLAIMED.value, PayloadState.PROCESSING.value)


@dataclass
class ScanPage:
    """One ``Scan`` page: what passed the filter, and what reading it cost."""

    items: list[dict[str, Any]] = field(default_factory=list)
    next_key: dict[str, Any] | None = None
    scanned: int = 0  # items read (and paid for) before the filter
    read_units: float | None = None  # as DynamoDB reported them


class SweepStore:
    """Pages of terminal, un-notified waiter rows and of payloads held past their lease."""

    def __init__(self, client: DynamoDBClient, *, dependency_table: str, state_table: str) -> None:
        self._client = client
        self.dependency_table = dependency_table
        self.state_table = state_table

    def unnotified_page(
        self, *, resolved_before: datetime, start_key: dict[str, Any] | None
    ) -> tuple[list[Row], ScanPage]:
        """Rows of one page that are terminal, not notified, and resolved before the cutoff.

        Waiters, joins and join memberships alike: each is what the stream
        would have delivered to the callback function. Rows without
        ``resolved_at`` are judged by ``updated_at``.
        """
        terminal = {f":t{index}": state for index, state in enumerate(_TERMINAL)}
        page = self._scan(
            TableName=self.dependency_table,
            FilterExpression=(
                f"attribute_not_exists(notified_at) AND workflow_state IN ({', '.join(terminal)}) "
                "AND (resolved_at < :cutoff "
                "OR (attribute_not_exists(resolved_at) AND updated_at < :cutoff))"
            ),
            ExpressionAttributeValues=values(
                cutoff=resolved_before, **{name[1:]: state for name, state in terminal.items()}
            ),
            start_key=start_key,
        )
        rows: list[Row] = []
        for item in page.items:
            if is_bookkeeping_item(item):
                continue
            try:
                row = row_from_item(item)
            except ValidationError as exc:
                logger.error(
                    "dependency-table item is not a row",
                    extra={"errors": exc.errors(include_url=False, include_input=False)},
                )
                continue
            # ISO texts compare as times except within one second across formats: check.
            if (row.resolved_at or row.updated_at) < resolved_before:
                rows.append(row)
        return rows, page

    def waiting_page(
        self, *, registered_before: datetime, start_key: dict[str, Any] | None
    ) -> tuple[list[str], ScanPage]:
        """Payload ids of one page with rows still ``PROCESSING``, written before the cutoff.

        Waiters and join memberships (not the joins' own rows): cirrus mode asks
        cirrus's state table about each payload, in case its event was lost.
        """
        page = self._scan(
            TableName=self.dependency_table,
            FilterExpression="workflow_state = :processing AND updated_at < :cutoff",
            ExpressionAttributeValues=values(
                processing=PayloadState.PROCESSING.value, cutoff=registered_before
            ),
            start_key=start_key,
        )
        found: dict[str, None] = {}
        for item in page.items:
            if is_bookkeeping_item(item):
                continue
            try:
                row = row_from_item(item)
            except ValidationError:
                continue  # reported by the unnotified pass
            if row.waiter_id != JOIN_ROW_KEY and row.updated_at < registered_before:
                found[row.payload_id] = None
        return list(found), page

    def stuck_page(
        self, *, claimed_before: datetime, start_key: dict[str, Any] | None
    ) -> tuple[list[PayloadStateItem], ScanPage]:
        """Payloads of one page still ``CLAIMED``/``PROCESSING``, claimed before the cutoff."""
        page = self._scan(
            TableName=self.state_table,
            FilterExpression=(
                "#state IN (:claimed, :processing) AND (claimed_at < :cutoff "
                "OR (attribute_not_exists(claimed_at) AND updated_at < :cutoff))"
            ),
            ExpressionAttributeNames={"#state": "state"},
            ExpressionAttributeValues=values(
                claimed=_LIVE[0], processing=_LIVE[1], cutoff=claimed_before
            ),
            start_key=start_key,
        )
        stuck: list[PayloadStateItem] = []
        for item in page.items:
            try:
                payload = PayloadStateItem.from_item(item)
            except ValidationError:
                continue  # not a payload (nothing else should live here)
            if (payload.claimed_at or payload.updated_at) < claimed_before:
                stuck.append(payload)
        return stuck, page

    def _scan(self, *, start_key: dict[str, Any] | None, **request: Any) -> ScanPage:
        if start_key:
            request["ExclusiveStartKey"] = start_key
        response = self._client.scan(ReturnConsumedCapacity="TOTAL", **request)
        consumed = response.get("ConsumedCapacity", {}).get("CapacityUnits")
        return ScanPage(
            items=list(response.get("Items", [])),
            next_key=response.get("LastEvaluatedKey") or None,
            scanned=int(response.get("ScannedCount", 0)),
            read_units=None if consumed is None else float(consumed),
        )


class SweepCursor(BaseModel):
    """Where each table's sweep continues: ``None`` starts a new pass from the top."""

    dependency_table: str
    state_table: str
    dependencies: dict[str, Any] | None = None
    states: dict[str, Any] | None = None
    # cirrus mode: the dependency table again, for rows still waiting.
    waiting: dict[str, Any] | None = None
    updated_at: datetime | None = None

    @property
    def at_top(self) -> bool:
        """True when every sweep starts a new pass."""
        return self.dependencies is None and self.states is None and self.waiting is None


class CursorStore:
    """Keeps the :class:`SweepCursor` as one small object in the payload bucket.

    Not an item in either table: a foreign item would be read by every tool
    that scans them. One LIST (under the cursor's own key) and, when it is there,
    one GET per run, and one PUT only when a sweep stopped part way (a table
    larger than a run's budget).
    """

    def __init__(self, client: S3Client, bucket: str, key: str = CURSOR_KEY) -> None:
        self._client = client
        self.bucket = bucket
        self.key = key

    def load(self, *, dependency_table: str, state_table: str) -> SweepCursor:
        """The saved cursor, or a fresh one (missing, unreadable, or for other tables)."""
        fresh = SweepCursor(dependency_table=dependency_table, state_table=state_table)
        # S3 answers a GetObject of a missing key with AccessDenied, not NoSuchKey, unless the
        # caller may list the bucket for that request, and a GetObject carries no s3:prefix:
        # the role's listing is granted under the cursor's prefix only. So list first.
        listed = self._client.list_objects_v2(Bucket=self.bucket, Prefix=self.key, MaxKeys=1)
        if not any(entry.get("Key") == self.key for entry in listed.get("Contents", [])):
            return fresh
        try:
            body = self._client.get_object(Bucket=self.bucket, Key=self.key)["Body"].read()
        except ClientError as exc:
            # Deleted between the two calls (by hand: the sweeper never deletes it).
            if exc.response.get("Error", {}).get("Code") in {"NoSuchKey", "404"}:
                return fresh
            raise
        try:
            cursor = SweepCursor.model_validate(json.loads(body))
        except (ValueError, ValidationError):
            logger.warning("sweeper cursor unreadable: starting over", extra={"key": self.key})
            return fresh
        if (cursor.dependency_table, cursor.state_table) != (dependency_table, state_table):
            return fresh
        return cursor

    def save(self, cursor: SweepCursor) -> None:
        """Store ``cursor`` (stamped with the time)."""
        stamped = cursor.model_copy(update={"updated_at": utcnow()})
        self._client.put_object(
            Bucket=self.bucket,
            Key=self.key,
            Body=stamped.model_dump_json().encode(),
            ContentType="application/json",
        )
