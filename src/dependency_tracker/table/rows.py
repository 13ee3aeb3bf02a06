"""Typed dependency-table rows: which model an item (or stream image) is."""

from __future__ import annotations

from typing import Any

from boto3.dynamodb.types import TypeDeserializer

from dependency_tracker.table.items import MembershipItem, WaiterItem, is_edge_item, restore_keys
from dependency_tracker.table.join_items import JoinItem, is_join_bookkeeping
from dependency_tracker.table.prefixes import JOIN_ROW_KEY, MEMBERSHIP_KEY_PREFIX

_DESERIALIZER = TypeDeserializer()

Row = WaiterItem | MembershipItem | JoinItem


def is_bookkeeping_item(item: dict[str, Any]) -> bool:
    """True for items that are not waiters: wait edges, join count shards and chunks."""
    return is_edge_item(item) or is_join_bookkeeping(item)


def row_from_plain(plain: dict[str, Any]) -> Row:
    """The typed row for a deserialized dependency-table item (or stream image)."""
    plain = restore_keys(plain)
    waiter_id = str(plain.get("waiter_id", ""))
    if waiter_id == JOIN_ROW_KEY:
        return JoinItem.from_plain(plain)
    if waiter_id.startswith(MEMBERSHIP_KEY_PREFIX):
        return MembershipItem.from_plain(plain)
    return WaiterItem.from_plain(plain)


def row_from_item(item: dict[str, Any]) -> Row:
    """The typed row for an attribute-value map."""
    return row_from_plain({key: _DESERIALIZER.deserialize(value) for key, value in item.items()})
