"""Typed dependency-table rows: which model an item (or stream image) is.

The table knows its own rows (waiters, memberships) and the keys of every row
(table/prefixes.py). A feature with rows of its own at a reserved ``waiter_id``
registers their model here (:func:`register_row_kind`; joins/rows.py does for the
join row): the table decodes them without importing the feature above it.
"""

from __future__ import annotations

from typing import Any

from boto3.dynamodb.types import TypeDeserializer

from dependency_tracker.table.items import (
    DependencyRow,
    MembershipItem,
    WaiterItem,
    is_edge_item,
    restore_keys,
)
from dependency_tracker.table.prefixes import (
    CHUNK_KEY_PREFIX,
    COUNT_SHARD_KEY,
    MEMBERSHIP_KEY_PREFIX,
    PARENT_LINK_KEY_PREFIX,
)

_DESERIALIZER = TypeDeserializer()

# Every row a reader gets: a WaiterItem, a MembershipItem or a registered kind (a JoinItem).
Row = DependencyRow

# Models of the rows at a reserved waiter_id, by that id.
_KINDS: dict[str, type[DependencyRow]] = {}


def register_row_kind(waiter_id: str, model: type[DependencyRow]) -> None:
    """Decode the rows at ``waiter_id`` as ``model`` (called once, when its module loads)."""
    _KINDS[waiter_id] = model


def is_bookkeeping_item(item: dict[str, Any]) -> bool:
    """True for items that are not waiters: wait edges, join count shards, chunks, parent links."""
    if is_edge_item(item):
        return True
    key = item.get("waiter_id")
    text = key.get("S") if isinstance(key, dict) else key
    return isinstance(text, str) and (
        text == COUNT_SHARD_KEY or text.startswith((CHUNK_KEY_PREFIX, PARENT_LINK_KEY_PREFIX))
    )


def row_from_plain(plain: dict[str, Any]) -> Row:
    """The typed row for a deserialized dependency-table item (or stream image)."""
    plain = restore_keys(plain)
    waiter_id = str(plain.get("waiter_id", ""))
    kind = _KINDS.get(waiter_id)
    if kind is not None:
        return kind.from_plain(plain)
    if waiter_id.startswith(MEMBERSHIP_KEY_PREFIX):
        return MembershipItem.from_plain(plain)
    return WaiterItem.from_plain(plain)


def row_from_item(item: dict[str, Any]) -> Row:
    """The typed row for an attribute-value map."""
    return row_from_plain({key: _DESERIALIZER.deserialize(value) for key, value in item.items()})
