"""Wait edges: which payload waits on which, for the cycle check.

A waiter row lives under the payload it waits *on*; the cycle check needs the
opposite direction (what does this payload wait on?). Each wait that names its
``waiter_payload_id`` therefore also writes an :class:`EdgeItem` under
``waits#{waiter}`` in the dependency table, so the check follows edges forward
with strongly consistent ``Query`` calls (a GSI would only be eventually
consistent, and two parents closing one cycle at the same moment could then
both miss it).
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from dependency_tracker.keys import partition_key
from dependency_tracker.models import EdgeItem, edge_id_for, edge_partition_for, utcnow
from dependency_tracker.models.items import key_attributes
from dependency_tracker.stores._dynamodb import put_if_absent, update_if, values

if TYPE_CHECKING:
    from collections.abc import Iterable

    from mypy_boto3_dynamodb import DynamoDBClient


class WaitEdges:
    """Adds, follows and refuses wait edges in the dependency table."""

    def __init__(self, client: DynamoDBClient, table_name: str, *, retention_days: int) -> None:
        self._client = client
        self.table_name = table_name
        self._retention = timedelta(days=retention_days)

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
        already turned down), else None.
        """
        now = utcnow()
        expires = int((now + self._retention).timestamp())
        refused_cycle: list[str] | None = None
        for target in dict.fromkeys(depends_on):
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
        return refused_cycle

    def targets(self, waiter_payload_id: str, *, attempt: int | None = None) -> list[str]:
        """Payloads ``waiter_payload_id`` waits on (strongly consistent; refused edges left out).

        With ``attempt``, only the waits of that attempt (and of waiters whose
        attempt was unknown) count.
        """
        query: dict[str, Any] = {
            "TableName": self.table_name,
            "KeyConditionExpression": "payload_id = :pid",
            "FilterExpression": "attribute_not_exists(refused_at)",
            "ProjectionExpression": "depends_on, waiter_attempt",
            "ExpressionAttributeValues": values(
                pid=partition_key(edge_partition_for(waiter_payload_id))
            ),
            "ConsistentRead": True,
        }
        found: dict[str, None] = {}
        while True:
            response = self._client.query(**query)
            for item in response.get("Items", []):
                recorded = item.get("waiter_attempt")
                if attempt is None or recorded is None or int(recorded["N"]) == attempt:
                    found[item["depends_on"]["S"]] = None
            last = response.get("LastEvaluatedKey")
            if not last:
                return list(found)
            query["ExclusiveStartKey"] = last

    def refuse(
        self, waiter_payload_id: str, depends_on: Iterable[str], *, via: str, cycle: list[str]
    ) -> None:
        """Mark the edges of a refused wait (with the cycle) so no later check follows them.

        The cycle is recorded with each id in its key form (the id itself up to
        2,048 bytes, else prefix + hash): a cycle of ids of any length then fits
        in the edge, at most ``cycle_depth + 1`` entries of at most 2 KiB.
        """
        now = utcnow()
        recorded = [partition_key(node) for node in cycle]
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
