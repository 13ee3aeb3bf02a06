"""Which joins cancel with a parent: a link row per join, under the parent's execution.

A join with ``on_parent_gone: cancel`` writes ``join#parent#<execution arn>`` /
``link#<join_id>`` when it is registered. When an execution ends, update-state
reads that one partition (a consistent ``Query``, empty for almost every
execution) to learn which joins lost their parent: no index, no scan.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from dependency_tracker.joins.row_access import bookkeeping_expiry
from dependency_tracker.table.items import TableItem
from dependency_tracker.table.keys import partition_key
from dependency_tracker.table.prefixes import (
    PARENT_LINK_KEY_PREFIX,
    PARENT_LINK_PARTITION_PREFIX,
)

if TYPE_CHECKING:
    from dependency_tracker.joins.row_access import RowAccess


def link_partition_for(parent_execution: str) -> str:
    """The partition of a parent's links (its key form, for any ARN length)."""
    return partition_key(f"{PARENT_LINK_PARTITION_PREFIX}{parent_execution}")


class ParentLink(TableItem):
    """``join_id`` cancels with ``parent_execution``."""

    payload_id: str  # link_partition_for(parent_execution)
    waiter_id: str  # link#<join_id>
    parent_execution: str
    join_id: str
    created_at: datetime
    expiration_time: int

    @classmethod
    def of(cls, parent_execution: str, join_id: str, now: datetime) -> ParentLink:
        """The link row of ``join_id`` under ``parent_execution``."""
        return cls(
            payload_id=link_partition_for(parent_execution),
            waiter_id=f"{PARENT_LINK_KEY_PREFIX}{join_id}",
            parent_execution=parent_execution,
            join_id=join_id,
            created_at=now,
            expiration_time=bookkeeping_expiry(now),
        )


class ParentLinks:
    """Writes and reads the link rows."""

    def __init__(self, access: RowAccess) -> None:
        self._access = access

    def link(self, parent_execution: str, join_id: str, now: datetime) -> None:
        """Write the link (a redelivery writes the same row again)."""
        self._access.client.put_item(
            TableName=self._access.table_name,
            Item=ParentLink.of(parent_execution, join_id, now).to_item(),
        )

    def joins_of(self, parent_execution: str) -> list[str]:
        """The joins linked to ``parent_execution``: one consistent ``Query`` (a page per 1 MB)."""
        rows = self._access.rows_under(
            link_partition_for(parent_execution), PARENT_LINK_KEY_PREFIX, projection="join_id"
        )
        return [item["join_id"]["S"] for item in rows if "join_id" in item]
