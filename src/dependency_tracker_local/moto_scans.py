"""A table's items in key order, kept between scans, so a ``Scan`` page costs what AWS's does.

moto answers each ``Scan`` page by sorting every item of the table, then
walking from the first one until it passes ``ExclusiveStartKey``: a page costs
O(n log n), a whole scan O(n² log n). The sweeper scans both tables in pages
every 5 minutes; at 100,000 join members (400,000 rows) its pages took almost
all of the local engine's time while it ran. Here the order is sorted once per
change of the table's keys, on plain Python values rather than moto's
``DynamoType`` (the same order: moto compares ``cast_value``), and a page starts
at the start key by bisection.
"""

from __future__ import annotations

import bisect
import threading
from typing import TYPE_CHECKING, Any

from moto.dynamodb.models.dynamo_type import DynamoType

if TYPE_CHECKING:
    from collections.abc import Iterator

    from moto.dynamodb.models.table import Table

Keys = list[tuple["DynamoType", "DynamoType | None"]]
SortKeys = list[tuple[Any, ...]]

_lock = threading.Lock()
# id(table) -> version, bumped by every write that may add or remove a key.
_versions: dict[int, int] = {}
# id(table) -> (version, sort keys, moto's keys), both lists in moto's order.
_orders: dict[
    int, tuple[int, list[tuple[Any, ...]], list[tuple[DynamoType, DynamoType | None]]]
] = {}


def changed(table: Table) -> None:
    """``table``'s keys may have changed (an item put, deleted, or restored)."""
    with _lock:
        _versions[id(table)] = _versions.get(id(table), 0) + 1


def forget() -> None:
    """Drop every order kept (the block that kept them ended)."""
    with _lock:
        _versions.clear()
        _orders.clear()


def _order(
    table: Table,
) -> tuple[list[tuple[Any, ...]], list[tuple[DynamoType, DynamoType | None]]]:
    with _lock:
        version = _versions.get(id(table), 0)
        kept = _orders.get(id(table))
        if kept is not None and kept[0] == version:
            return kept[1], kept[2]
    entries: list[tuple[tuple[Any, ...], tuple[DynamoType, DynamoType | None]]] = []
    for hash_key, stored in table.items.items():
        if table.range_key_attr:
            entries.extend(
                ((hash_key.cast_value, range_key.cast_value), (hash_key, range_key))
                for range_key in stored
            )
        else:
            entries.append(((hash_key.cast_value,), (hash_key, None)))
    entries.sort(key=lambda entry: entry[0])
    order = ([entry[0] for entry in entries], [entry[1] for entry in entries])
    with _lock:
        _orders[id(table)] = (version, *order)
    return order


def items_after(table: Table, exclusive_start_key: dict[str, Any] | None) -> Iterator[Any]:
    """The table's items in moto's scan order, from just after ``exclusive_start_key``."""
    sort_keys, keys = _order(table)
    start = 0
    if exclusive_start_key:
        wanted: tuple[Any, ...] = (DynamoType(exclusive_start_key[table.hash_key_attr]).cast_value,)
        if table.range_key_attr:
            wanted += (DynamoType(exclusive_start_key[table.range_key_attr]).cast_value,)
        start = bisect.bisect_right(sort_keys, wanted)
    for index in range(start, len(keys)):
        hash_key, range_key = keys[index]
        stored = table.items.get(hash_key)
        item = stored if range_key is None else (stored or {}).get(range_key)
        if item is not None:  # deleted since the order was kept
            yield item
