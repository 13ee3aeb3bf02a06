"""Wait edges: which payload waits on which, for the cycle check.

A waiter row lives under the payload it waits *on*; the cycle check needs the
opposite direction (what does this payload wait on?). Each wait that names its
``waiter_payload_id`` therefore also writes an :class:`EdgeItem` under
``waits#{waiter}`` in the dependency table, so the check follows edges forward
with strongly consistent ``Query`` calls (a GSI would only be eventually
consistent, and two parents closing one cycle at the same moment could then
both miss it).

An edge lives as long as the longest wait a parent can make (a Standard
execution's year) plus the retention: a long wait stays visible to the check.
It counts only while its wait does: the waiting row (``via`` under the payload
waited on) still waits (``PROCESSING``, and for a join's membership, its join
not released by an operator), or has not been written yet (an edge is written
before its join's membership rows; a few minutes' grace). An ended wait's edge,
kept by its long lifetime, is never followed.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from dependency_tracker.core.enums import PayloadState, utcnow
from dependency_tracker.core.limits import SFN_MAX_EXECUTION_SECONDS
from dependency_tracker.table.dependency_table import MAX_RECORDED_CYCLE_BYTES
from dependency_tracker.table.dynamodb import batch_get, pages, put_if_absent, update_if, values
from dependency_tracker.table.items import (
    JOIN_ROW_KEY,
    EdgeItem,
    edge_id_for,
    edge_partition_for,
    join_partition_for,
    key_attributes,
)
from dependency_tracker.table.keys import partition_key, recorded_ids, whole_ids

if TYPE_CHECKING:
    from collections.abc import Iterable

    from mypy_boto3_dynamodb import DynamoDBClient


# An edge is written before its waiting row only for a join (its membership rows follow in the
# same invocation, or in a redelivery of its message): an edge younger than this whose row is
# missing still counts.
UNWRITTEN_ROW_GRACE = timedelta(hours=1)


class WaitEdges:
    """Adds, follows and refuses wait edges in the dependency table."""

    def __init__(self, client: DynamoDBClient, table_name: str, *, retention_days: int) -> None:
        self._client = client
        self.table_name = table_name
        # The longest wait (a Standard parent runs for a year at most), then the retention.
        self._lifetime = timedelta(seconds=SFN_MAX_EXECUTION_SECONDS, days=retention_days)

    def add(
        self,
        waiter_payload_id: str,
        depends_on: Iterable[str],
        *,
        via: str,
        waiter_attempt: int | None = None,
    ) -> list[str] | None:
        """Record that ``waiter_payload_id`` waits on each of ``depends_on``.

        Idempotent: an edge that exists is left as it is, so a redelivered
        message cannot revive an edge that was refused. Returns the cycle
        recorded when one of these edges was refused before (the wait was
        already turned down), else None; its ids whole, but for a long one
        past :data:`MAX_RECORDED_CYCLE_BYTES` that is neither the waiter nor a
        payload of ``depends_on`` (it keeps its key form).
        """
        depends_on = list(dict.fromkeys(depends_on))
        now = utcnow()
        expires = int((now + self._lifetime).timestamp())
        refused_cycle: list[str] | None = None
        for target in depends_on:
            edge = EdgeItem(
                payload_id=edge_partition_for(waiter_payload_id),
                waiter_id=edge_id_for(via, target),
                waiter_payload_id=waiter_payload_id,
                depends_on=target,
                via=via,
                waiter_attempt=waiter_attempt,
                created_at=now,
                expiration_time=expires,
            )
            if put_if_absent(self._client, self.table_name, edge.to_item(), "waiter_id"):
                continue
            existing = self._client.get_item(
                TableName=self.table_name,
                Key=_key(edge.payload_id, edge.waiter_id),
                ConsistentRead=True,
                ProjectionExpression="refused_at, refused_cycle",
            ).get("Item", {})
            if refused_cycle is None and "refused_at" in existing:
                refused_cycle = [entry["S"] for entry in existing["refused_cycle"]["L"]]
        if refused_cycle is None:
            return None
        return whole_ids(refused_cycle, [waiter_payload_id, *depends_on])

    def targets(self, waiter_payload_id: str, *, attempt: int | None = None) -> list[str]:
        """Payloads ``waiter_payload_id`` still waits on (strongly consistent).

        Refused edges are left out, and edges whose wait has ended (their
        waiting row no longer ``PROCESSING``). With ``attempt``, only the waits
        of that attempt (and of waiters whose attempt was unknown) count.
        """
        query: dict[str, Any] = {
            "TableName": self.table_name,
            "KeyConditionExpression": "payload_id = :pid",
            "FilterExpression": "attribute_not_exists(refused_at)",
            "ProjectionExpression": "depends_on, waiter_attempt, via, created_at",
            "ExpressionAttributeValues": values(
                pid=partition_key(edge_partition_for(waiter_payload_id))
            ),
            "ConsistentRead": True,
        }
        edges: list[tuple[str, str, datetime]] = []
        for items in pages(self._client.query, query):
            for item in items:
                recorded = item.get("waiter_attempt")
                if attempt is None or recorded is None or int(recorded["N"]) == attempt:
                    created = datetime.fromisoformat(item["created_at"]["S"])
                    edges.append((item["depends_on"]["S"], item["via"]["S"], created))
        return list(dict.fromkeys(self._still_waiting(edges)))

    def _still_waiting(self, edges: list[tuple[str, str, datetime]]) -> Iterable[str]:
        """The targets of ``edges`` whose waiting row still waits (or is not written yet)."""
        if not edges:
            return []
        keys = {
            (target, via): key_attributes(payload_id=target, waiter_id=via)
            for target, via, _ in edges
        }
        state_of: dict[tuple[str, str], str | None] = {}
        join_of: dict[tuple[str, str], str] = {}
        for row in batch_get(
            self._client,
            self.table_name,
            list(keys.values()),
            projection="payload_id, waiter_id, workflow_state, join_id",
        ):
            state = row.get("workflow_state", {}).get("S")
            found = (row["payload_id"]["S"], row["waiter_id"]["S"])
            state_of[found] = state
            if "join_id" in row and state == PayloadState.PROCESSING.value:
                join_of[found] = row["join_id"]["S"]  # only a waiting membership asks its join
        released = self._released_joins(set(join_of.values()))
        now = utcnow()
        waiting: list[str] = []
        for target, via, created in edges:
            key = keys[(target, via)]
            found = (key["payload_id"]["S"], key["waiter_id"]["S"])
            if found in state_of:
                if state_of[found] == PayloadState.PROCESSING.value and (
                    join_of.get(found) not in released
                ):
                    waiting.append(target)
            elif now - created < UNWRITTEN_ROW_GRACE:
                waiting.append(target)
        return waiting

    def _released_joins(self, join_ids: set[str]) -> set[str]:
        """Those of ``join_ids`` an operator released: their members' rows wait for nobody.

        A join's membership rows stay ``PROCESSING`` after a release (a retried send
        of its parent may still take the join up, and then its edges count again).
        """
        if not join_ids:
            return set()
        rows = batch_get(
            self._client,
            self.table_name,
            [
                key_attributes(payload_id=join_partition_for(join_id), waiter_id=JOIN_ROW_KEY)
                for join_id in join_ids
            ],
            projection="join_id, released_at",
        )
        return {row["join_id"]["S"] for row in rows if "released_at" in row and "join_id" in row}

    def refuse(
        self, waiter_payload_id: str, depends_on: Iterable[str], *, via: str, cycle: list[str]
    ) -> None:
        """Mark the edges of a refused wait (with the cycle) so no later check follows them.

        The cycle is recorded with its ids whole up to
        :data:`MAX_RECORDED_CYCLE_BYTES` in all, the rest in their key form
        (prefix + hash, at most 2 KiB): a cycle of ids of any length then fits
        in the edge, and :meth:`add` gives the ids back whole.
        """
        now = utcnow()
        recorded = recorded_ids(cycle, MAX_RECORDED_CYCLE_BYTES)
        for target in dict.fromkeys(depends_on):
            update_if(
                self._client,
                TableName=self.table_name,
                Key=_key(edge_partition_for(waiter_payload_id), edge_id_for(via, target)),
                UpdateExpression=(
                    "SET refused_at = if_not_exists(refused_at, :now), "
                    "refused_cycle = if_not_exists(refused_cycle, :cycle)"
                ),
                ConditionExpression="attribute_exists(waiter_id)",
                ExpressionAttributeValues=values(now=now, cycle=recorded),
            )


def _key(partition: str, sort: str) -> dict[str, Any]:
    return key_attributes(payload_id=partition, waiter_id=sort)
