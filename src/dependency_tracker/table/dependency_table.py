"""The dependency table: who waits on which payload, one row per (payload, token hash)."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from dependency_tracker.core.enums import DependencyError, PayloadState, utcnow
from dependency_tracker.core.text import clip
from dependency_tracker.core.threads import ContextExecutor
from dependency_tracker.core.tokens import PARENT_GONE_OUTCOME
from dependency_tracker.table.dynamodb import pages, put_if_absent, update_if, values
from dependency_tracker.table.items import (
    JOIN_ROW_KEY,
    DependencyRow,
    ReleaseMark,
    Resolution,
    WaiterItem,
    key_attributes,
)
from dependency_tracker.table.keys import FULL_ATTRIBUTES, partition_key
from dependency_tracker.table.rows import Row, is_bookkeeping_item, row_from_item

if TYPE_CHECKING:
    from collections.abc import Iterator
    from datetime import datetime

    from mypy_boto3_dynamodb import DynamoDBClient

# A refusal's cause names every payload of the cycle, whole: ids of any length could
# push the row past 400 KB. The parent gets it inside a SendTaskFailure cause
# (32,768 characters with its JSON envelope), so more than half of that is never read.
MAX_REFUSAL_CAUSE_CHARS = 16_384

# A cycle recorded on a row (a refused join's, a refused wait edge's) keeps its ids
# whole up to this many bytes in all, the rest in their key form (at most 2,048
# bytes each): a cycle of ids of any length fits its row, and the ids a parent or an
# operator reads are whole wherever a cause would still show them.
MAX_RECORDED_CYCLE_BYTES = MAX_REFUSAL_CAUSE_CHARS

# Resolving a hot payload's waiters is I/O bound; a few threads keep it fast
# without bursting past the table's (on-demand) write throughput.
DEFAULT_RESOLVE_CONCURRENCY = 8

# cirrus mode: the run (execution ARN) whose outcome a row no longer waits for.
RERUN_AFTER = "rerun_after"


class DependencyTable:
    """Registers, resolves and retires waiter rows."""

    def __init__(
        self,
        client: DynamoDBClient,
        table_name: str,
        *,
        resolve_concurrency: int = DEFAULT_RESOLVE_CONCURRENCY,
    ) -> None:
        self._client = client
        self.table_name = table_name
        self._resolve_concurrency = max(1, resolve_concurrency)

    @property
    def client(self) -> DynamoDBClient:
        """The low-level client (stores over the same table share it)."""
        return self._client

    def register(self, row: DependencyRow) -> bool:
        """Write a row unless it exists; returns False for a duplicate delivery."""
        return put_if_absent(self._client, self.table_name, row.to_item(), "waiter_id")

    def get_row(self, payload_id: str, waiter_id: str) -> Row | None:
        """Strongly consistent read of one row, typed by its kind."""
        response = self._client.get_item(
            TableName=self.table_name, Key=_key(payload_id, waiter_id), ConsistentRead=True
        )
        item = response.get("Item")
        return None if item is None else row_from_item(item)

    def get(self, payload_id: str, waiter_id: str) -> WaiterItem | None:
        """Strongly consistent read of one task-token waiter row."""
        row = self.get_row(payload_id, waiter_id)
        return row if isinstance(row, WaiterItem) else None

    def rows(self, payload_id: str) -> Iterator[Row]:
        """Every row under a payload: task-token waiters and join memberships."""
        for page in self._pages(payload_id, only_pending=False):
            yield from (row_from_item(item) for item in page if not is_bookkeeping_item(item))

    def waiters(self, payload_id: str) -> Iterator[WaiterItem]:
        """The task-token waiter rows of a payload (strongly consistent, paginated)."""
        for row in self.rows(payload_id):
            if isinstance(row, WaiterItem):
                yield row

    def scan_pages(
        self,
        *,
        unnotified_only: bool = False,
        parent_execution: str | None = None,
        joins_decided_since: datetime | None = None,
    ) -> Iterator[list[Row]]:
        """Every row of the table, one page at a time: a full ``Scan``, for operator tools.

        The flows never scan. With ``unnotified_only`` DynamoDB drops rows that
        have ``notified_at``: what is left are waiters and joins whose parent
        has not been told yet, and every join membership row;
        ``joins_decided_since`` keeps the join rows decided since then too. With
        ``parent_execution``, only the waiter and join rows that name it.
        """
        scan: dict[str, Any] = {"TableName": self.table_name, "ConsistentRead": True}
        filters: list[str] = []
        plain: dict[str, object] = {}
        if unnotified_only and joins_decided_since is not None:
            # ISO text in UTC sorts as time does; the filter costs no read units of its own.
            filters.append(
                "(attribute_not_exists(notified_at)"
                " OR (waiter_id = :join_row AND resolved_at >= :decided_since))"
            )
            plain.update(join_row=JOIN_ROW_KEY, decided_since=joins_decided_since)
        elif unnotified_only:
            filters.append("attribute_not_exists(notified_at)")
        if parent_execution is not None:
            filters.append("parent_execution = :parent")
            plain["parent"] = parent_execution
        if plain:
            scan["ExpressionAttributeValues"] = values(**plain)
        if filters:
            scan["FilterExpression"] = " AND ".join(filters)
        for items in pages(self._client.scan, scan):
            yield [row_from_item(item) for item in items if not is_bookkeeping_item(item)]

    def pending_ids(self, payload_id: str) -> Iterator[list[str]]:
        """Pages of waiter ids of a payload that are still ``PROCESSING`` (whole ids)."""
        full = FULL_ATTRIBUTES["waiter_id"]
        for page in self._pages(payload_id, only_pending=True):
            yield [(item.get(full) or item["waiter_id"])["S"] for item in page]

    def resolve(
        self,
        payload_id: str,
        waiter_id: str,
        resolution: Resolution,
        *,
        ended_run: str | None = None,
    ) -> bool:
        """Move one waiter from ``PROCESSING`` to its final state.

        Returns False when the row was already resolved (or is gone): both
        sides of the ordering rule may try, and only the first write counts.
        ``ended_run`` (cirrus mode) is the run the resolution comes from: a row
        that waits for a run after it (:meth:`wait_after`) is left waiting.
        """
        now = utcnow()
        sets = [
            "workflow_state = :state",
            "replayed = :replayed",
            "resolved_at = :now",
            "updated_at = :now",
        ]
        plain: dict[str, object] = {
            "state": resolution.state.value,
            "replayed": resolution.replayed,
            "now": now,
            "processing": PayloadState.PROCESSING.value,
        }
        names: dict[str, str] = {}
        for name in ("execution_arn", "error", "cause", "result_json"):  # "error" is reserved
            value = getattr(resolution, name)
            if value is not None:
                sets.append(f"#{name} = :{name}")
                names[f"#{name}"] = name
                plain[name] = value
        condition = "workflow_state = :processing"
        if ended_run is not None:
            # A row waiting for a later run than the one that ended stays waiting.
            condition += (
                f" AND (attribute_not_exists({RERUN_AFTER}) OR {RERUN_AFTER} <> :ended_run)"
            )
            plain["ended_run"] = ended_run
        extra: dict[str, Any] = {"ExpressionAttributeNames": names} if names else {}
        return (
            update_if(
                self._client,
                TableName=self.table_name,
                Key=_key(payload_id, waiter_id),
                UpdateExpression="SET " + ", ".join(sets),
                ConditionExpression=condition,
                ExpressionAttributeValues=values(**plain),
                **extra,
            )
            is not None
        )

    def wait_after(self, payload_id: str, waiter_id: str, run: str) -> bool:
        """Mark a ``PROCESSING`` row as waiting for a run after ``run`` (cirrus mode).

        A payload that had ended when its waiter arrived is sent to run again;
        until that run ends, the old run's outcome (a late or repeated event)
        must not answer this waiter. False when the row was resolved meanwhile.
        """
        return (
            update_if(
                self._client,
                TableName=self.table_name,
                Key=_key(payload_id, waiter_id),
                UpdateExpression=f"SET {RERUN_AFTER} = :run, updated_at = :now",
                ConditionExpression="workflow_state = :processing",
                ExpressionAttributeValues=values(
                    run=run, now=utcnow(), processing=PayloadState.PROCESSING.value
                ),
            )
            is not None
        )

    def refuse(
        self, payload_id: str, waiter_id: str, error_name: DependencyError, cause: str
    ) -> bool:
        """Turn down a still-``PROCESSING`` wait: the parent gets ``error_name``.

        The row ends ``INVALID`` (the wait, not the payload, is at fault) and
        the stream handler sends ``SendTaskFailure`` with ``error_name``. A cause
        over :data:`MAX_REFUSAL_CAUSE_CHARS` is cut (and marked). Returns False
        when the row had already been resolved.
        """
        now = utcnow()
        cause = clip(cause, MAX_REFUSAL_CAUSE_CHARS) or ""
        return (
            update_if(
                self._client,
                TableName=self.table_name,
                Key=_key(payload_id, waiter_id),
                UpdateExpression=(
                    "SET workflow_state = :state, error_name = :name, #error = :name, "
                    "#cause = :cause, resolved_at = :now, updated_at = :now"
                ),
                ConditionExpression="workflow_state = :processing",
                ExpressionAttributeNames={"#error": "error", "#cause": "cause"},
                ExpressionAttributeValues=values(
                    state=PayloadState.INVALID.value,
                    name=error_name.value,
                    cause=cause,
                    now=now,
                    processing=PayloadState.PROCESSING.value,
                ),
            )
            is not None
        )

    def resolve_all(
        self, payload_id: str, resolution: Resolution, *, ended_run: str | None = None
    ) -> int:
        """Resolve every still-``PROCESSING`` waiter of a payload; returns how many moved.

        ``ended_run``: as in :meth:`resolve`.
        """

        def resolve(waiter_id: str) -> bool:
            return self.resolve(payload_id, waiter_id, resolution, ended_run=ended_run)

        resolved = 0
        if self._resolve_concurrency == 1:
            for page in self.pending_ids(payload_id):
                resolved += sum(map(resolve, page))
            return resolved
        with ContextExecutor(max_workers=self._resolve_concurrency) as pool:
            for page in self.pending_ids(payload_id):
                resolved += sum(pool.map(resolve, page) if len(page) > 1 else map(resolve, page))
        return resolved

    def mark_notified(
        self,
        payload_id: str,
        waiter_id: str,
        *,
        outcome: str,
        retention_days: int,
    ) -> bool:
        """Record that the parent was told (or is gone) and let the row expire.

        Returns False when the row was already marked (a duplicate delivery). A
        join row is marked by its store, once each of its tokens is answered.
        """
        now = utcnow()
        expires = int((now + timedelta(days=retention_days)).timestamp())
        condition = "attribute_exists(waiter_id) AND attribute_not_exists(notified_at)"
        return (
            update_if(
                self._client,
                TableName=self.table_name,
                Key=_key(payload_id, waiter_id),
                UpdateExpression=(
                    "SET notified_at = :now, notify_outcome = :outcome, "
                    "expiration_time = :expires, updated_at = :now"
                ),
                ConditionExpression=condition,
                ExpressionAttributeValues=values(now=now, outcome=outcome, expires=expires),
            )
            is not None
        )

    def mark_refused(self, payload_id: str, waiter_id: str, *, code: str) -> bool:
        """Record, once per code, that Step Functions refused the row's answer.

        The row stays un-notified (the sweeper sends it again). False when the row
        already records this code, or was told meanwhile: nothing is written, so the
        stream record a write makes (the callback's filter passes it) is not followed
        by another one.
        """
        condition = (
            "attribute_exists(waiter_id) AND attribute_not_exists(notified_at) "
            "AND (attribute_not_exists(notify_refused) OR notify_refused <> :code)"
        )
        return (
            update_if(
                self._client,
                TableName=self.table_name,
                Key=_key(payload_id, waiter_id),
                UpdateExpression="SET notify_refused = :code, notify_refused_at = :now",
                ConditionExpression=condition,
                ExpressionAttributeValues=values(code=code, now=utcnow()),
            )
            is not None
        )

    def mark_released(
        self, row: WaiterItem, *, outcome: str, release: ReleaseMark, retention_days: int
    ) -> bool:
        """Mark a waiter told by an operator's release and, still waiting, ``ABORTED``.

        It holds only if the row is as read: same token, same state, not told, or
        told only that its parent was gone (the tracker's answer after the
        release, refused because the release had closed the token). The wait is
        then over: its edge stops counting for the cycle check, and a late
        resolution of the payload leaves the row as the release left it.
        """
        expires = int((release.at + timedelta(days=retention_days)).timestamp())
        sets = [
            "notified_at = :now",
            "notify_outcome = :outcome",
            "expiration_time = :expires",
            "updated_at = :now",
            "released_at = :now",
            "release_reason = :reason",
        ]
        plain: dict[str, object] = {
            "now": release.at,
            "outcome": outcome,
            "expires": expires,
            "reason": release.reason,
            "token": row.task_token,
            "seen": row.workflow_state.value,
            "gone": PARENT_GONE_OUTCOME,
        }
        names: dict[str, str] = {}
        if release.released_by is not None:
            sets.append("released_by = :by")
            plain["by"] = release.released_by
        if row.workflow_state is PayloadState.PROCESSING:
            sets += [
                "workflow_state = :aborted",
                "error_name = :error",
                "#error = :error",
                "#cause = :cause",
                "resolved_at = :now",
            ]
            names |= {"#error": "error", "#cause": "cause"}
            plain |= {
                "aborted": PayloadState.ABORTED.value,
                "error": DependencyError.RELEASED.value,
                "cause": clip(release.cause, MAX_REFUSAL_CAUSE_CHARS),
            }
        extra: dict[str, Any] = {"ExpressionAttributeNames": names} if names else {}
        return (
            update_if(
                self._client,
                TableName=self.table_name,
                Key=_key(row.payload_id, row.waiter_id),
                UpdateExpression="SET " + ", ".join(sets),
                ConditionExpression=(
                    "task_token = :token AND workflow_state = :seen AND "
                    "(attribute_not_exists(notified_at) OR begins_with(notify_outcome, :gone))"
                ),
                ExpressionAttributeValues=values(**plain),
                **extra,
            )
            is not None
        )

    def _pages(self, payload_id: str, *, only_pending: bool) -> Iterator[list[dict[str, Any]]]:
        query: dict[str, Any] = {
            "TableName": self.table_name,
            "KeyConditionExpression": "payload_id = :pid",
            "ExpressionAttributeValues": values(pid=partition_key(payload_id)),
            "ConsistentRead": True,
        }
        if only_pending:
            query["FilterExpression"] = "workflow_state = :processing"
            query["ProjectionExpression"] = f"payload_id, waiter_id, {FULL_ATTRIBUTES['waiter_id']}"
            query["ExpressionAttributeValues"].update(
                values(processing=PayloadState.PROCESSING.value)
            )
        yield from pages(self._client.query, query)


def _key(payload_id: str, waiter_id: str) -> dict[str, Any]:
    return key_attributes(payload_id=payload_id, waiter_id=waiter_id)
