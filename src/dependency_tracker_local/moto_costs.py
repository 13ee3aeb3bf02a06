"""Where moto's cost grows with the table and AWS's does not: patched for local runs.

Queries: moto answers a table ``Query`` by listing and sorting every item of the
table, then keeping the queried partition's (O(table) per query: resolving the
waiters of n join members became O(n²) locally). While :func:`aws_like_costs`
is active, a query on a table's own key looks at its partition only; the items
it keeps, and their order, are the same. A query on a global secondary index
(the sparse ``deadlines`` index the sweeper's minute schedule reads) looks only at
the items that carry the index's partition key attributes, which are all the
items such an index holds; moto then filters and sorts them as it would have.
Finding them is still a pass over the table, but a test of one attribute per item
instead of moto's whole per-item check: a few milliseconds at thousands of rows.

moto backs up every table a ``TransactWriteItems`` touches with ``copy.deepcopy``
before applying it, so each transaction costs time in the size of the whole
table: counting n join members one transaction each becomes O(n²) locally,
while on AWS a transaction costs the same whatever the table holds. While
:func:`aws_like_costs` is active, a transaction backs up only the items it
touches and puts them back if it is cancelled, which is what moto's table copy
achieves, without the copy. Semantics are moto's own: the same checks, the same
errors, the same all-or-nothing outcome.

Scans: moto sorts the whole table for each ``Scan`` page and walks to its start
key; while :func:`aws_like_costs` is active a page starts there directly
(:mod:`~.moto_scans`, the same items in the same order).

Requests also run one at a time here. moto's DynamoDB is not thread-safe: an
``UpdateItem`` copies or serializes an item while another thread's write
changes it (``dictionary changed size during iteration``, seen in CI), a
condition checked by one thread can be made false by another before the first
writes, and moto applies a transaction's items after a failed condition before
it rolls back, so two transactions on one item could undo each other's writes.
AWS applies every write to an item atomically and isolates transactions; one
lock around each DynamoDB request (its response serialized inside) gives the
local stack that guarantee, at no cost that the GIL was not already charging.
"""

from __future__ import annotations

import contextlib
import copy
import threading
from typing import TYPE_CHECKING, Any

from moto.dynamodb import models as dynamodb_models
from moto.dynamodb.exceptions import MockValidationException, TransactionCanceledException
from moto.dynamodb.models import DynamoDBBackend
from moto.dynamodb.models.dynamo_type import DynamoType
from moto.dynamodb.models.table import Table
from moto.dynamodb.responses import DynamoHandler

from dependency_tracker_local import moto_scans
from dependency_tracker_local.moto_executions import indexed_executions
from dependency_tracker_local.moto_speed import quick_requests

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

_lock = threading.Lock()
# Re-entrant: a transaction runs inside its request's hold of the lock.
_requests = threading.RLock()
_depth = 0
_original: Callable[..., None] | None = None
_original_copy_module: Any = None
_original_query: Callable[..., Any] | None = None
_original_all_items: Callable[..., Any] | None = None
_original_call_action: Callable[..., Any] | None = None
_partition = threading.local()
_scanning = threading.local()
_indexed = threading.local()
_saved: dict[str, Any] = {}
_SCAN_PARAMETERS = ("filters", "limit", "exclusive_start_key", "filter_expression", "index_name")


class _NoTableCopies:
    """Stands in for the ``copy`` module inside moto's DynamoDB backend: tables are not copied."""

    @staticmethod
    def deepcopy(value: Any, memo: Any = None) -> Any:
        if isinstance(value, Table):
            return value
        return copy.deepcopy(value, memo)

    @staticmethod
    def copy(value: Any) -> Any:
        return copy.copy(value)


Snapshot = tuple[Table, DynamoType, DynamoType | None, Any]


def _snapshots(backend: DynamoDBBackend, transact_items: list[dict[str, Any]]) -> list[Snapshot]:
    taken: list[Snapshot] = []
    for entry in transact_items:
        _, op = next(iter(entry.items()))
        table_name = op.get("TableName")
        if not table_name or table_name not in backend.tables:
            continue
        table = backend.tables[table_name]
        key = op.get("Key") or op.get("Item") or {}
        if table.hash_key_attr not in key:
            continue
        hash_value = DynamoType(key[table.hash_key_attr])
        range_value = None
        if table.range_key_attr is not None:
            if table.range_key_attr not in key:
                continue
            range_value = DynamoType(key[table.range_key_attr])
        old = (
            table.get_item(hash_value, range_value)
            if range_value or not table.has_range_key
            else None
        )
        taken.append((table, hash_value, range_value, copy.deepcopy(old)))
    return taken


def _restore(taken: list[Snapshot], streams: dict[int, int]) -> None:
    for table, hash_value, range_value, old in reversed(taken):
        if range_value is None:
            if old is None:
                table.items.pop(hash_value, None)
            else:
                table.items[hash_value] = old
        elif old is None:
            table.items.get(hash_value, {}).pop(range_value, None)
        else:
            table.items[hash_value][range_value] = old
    for table, *_ in taken:
        moto_scans.changed(table)
    # A cancelled transaction writes nothing, so it leaves no stream record either.
    for table, *_ in taken:
        shard = table.stream_shard
        if shard is not None and id(shard) in streams:
            del shard.items[streams[id(shard)] :]


def _transact_write_items(self: DynamoDBBackend, transact_items: list[dict[str, Any]]) -> None:
    assert _original is not None  # noqa: S101 (installed before use)
    with _requests:
        taken = _snapshots(self, transact_items)
        streams = {
            id(table.stream_shard): len(table.stream_shard.items)
            for table, *_ in taken
            if table.stream_shard is not None
        }
        try:
            _original(self, transact_items)
        except (TransactionCanceledException, MockValidationException):
            _restore(taken, streams)
            raise


def _call_action(self: DynamoHandler) -> Any:
    assert _original_call_action is not None  # noqa: S101 (installed before use)
    with _requests:
        return _original_call_action(self)


def _query(self: Table, hash_key: Any, *args: Any, **kwargs: Any) -> Any:
    assert _original_query is not None  # noqa: S101 (installed before use)
    # moto's backend passes index_name as the 8th positional argument.
    index_name = args[6] if len(args) > 6 else kwargs.get("index_name")
    if index_name is not None:
        _indexed.key = (id(self), _index_hash_attributes(self, index_name))
        try:
            return _original_query(self, hash_key, *args, **kwargs)
        finally:
            _indexed.key = None
    if hash_key is None:
        return _original_query(self, hash_key, *args, **kwargs)
    _partition.key = (id(self), hash_key)
    try:
        return _original_query(self, hash_key, *args, **kwargs)
    finally:
        _partition.key = None


def _scan(self: Table, *args: Any, **kwargs: Any) -> Any:
    assert _saved is not None  # noqa: S101 (installed before use)
    # moto's Table.scan(filters, limit, exclusive_start_key, filter_expression, index_name, ...)
    named = dict(zip(_SCAN_PARAMETERS, args, strict=False)) | kwargs
    if named.get("index_name") is not None or named.get("segments", (None, None)) != (None, None):
        return _saved["scan"](self, *args, **kwargs)
    _scanning.items = (id(self), moto_scans.items_after(self, named.get("exclusive_start_key")))
    try:
        return _saved["scan"](self, *args, **kwargs)
    finally:
        _scanning.items = None


def _noting_keys(original: Callable[..., Any]) -> Callable[..., Any]:
    def write(self: Table, *args: Any, **kwargs: Any) -> Any:
        try:
            return original(self, *args, **kwargs)
        finally:
            moto_scans.changed(self)

    return write


def _index_hash_attributes(table: Table, index_name: str) -> tuple[str, ...]:
    """The partition key attributes of ``table``'s global index ``index_name`` (none: unknown)."""
    for index in table.global_indexes:
        if index.name == index_name:
            return tuple(key["AttributeName"] for key in index.schema if key["KeyType"] == "HASH")
    return ()


def _all_items(self: Table) -> Any:
    assert _original_all_items is not None  # noqa: S101 (installed before use)
    scanning = getattr(_scanning, "items", None)
    if scanning is not None and scanning[0] == id(self):
        return scanning[1]
    indexed = getattr(_indexed, "key", None)
    if indexed is not None and indexed[0] == id(self) and indexed[1]:
        # Only the items a global index can hold: those with all its partition key attributes.
        # Unsorted: moto sorts an index query's results itself (by the index's keys).
        first, *rest = indexed[1]
        if self.range_key_attr:
            found = [
                item
                for partition in self.items.values()
                for item in partition.values()
                if first in item.attrs
            ]
        else:
            found = [item for item in self.items.values() if first in item.attrs]  # type: ignore[attr-defined]
        return [item for item in found if all(name in item.attrs for name in rest)]
    key = getattr(_partition, "key", None)
    if key is None or key[0] != id(self) or not self.range_key_attr:
        return _original_all_items(self)
    # The queried partition only (moto keeps just those items anyway), in key order.
    # No other request writes meanwhile: each holds the request lock.
    partition = self.items.get(key[1]) or {}
    return sorted(partition.values(), key=lambda item: item.range_key)


@contextlib.contextmanager
def aws_like_costs() -> Iterator[None]:
    """Within the block, moto's DynamoDB costs what AWS's does and applies each request atomically.

    moto's fixed per-request work is also done once (:func:`~.moto_speed.quick_requests`),
    and Step Functions executions are found by key (:func:`~.moto_executions.indexed_executions`).
    Re-entrant.
    """
    global _depth, _original, _original_copy_module, _original_query, _original_all_items  # noqa: PLW0603 (one patch per process)
    global _original_call_action  # noqa: PLW0603 (one patch per process)
    with _lock:
        if _depth == 0:
            _original = DynamoDBBackend.transact_write_items
            _original_copy_module = dynamodb_models.copy  # type: ignore[attr-defined]
            dynamodb_models.copy = _NoTableCopies  # type: ignore[attr-defined,assignment]
            DynamoDBBackend.transact_write_items = _transact_write_items  # type: ignore[method-assign]
            _original_query, _original_all_items = Table.query, Table.all_items
            Table.query = _query  # type: ignore[method-assign]
            Table.all_items = _all_items  # type: ignore[method-assign]
            _original_call_action = DynamoHandler.call_action
            DynamoHandler.call_action = _call_action  # type: ignore[method-assign]
            _saved.update(scan=Table.scan, put_item=Table.put_item, delete_item=Table.delete_item)
            Table.scan = _scan  # type: ignore[method-assign]
            Table.put_item = _noting_keys(_saved["put_item"])  # type: ignore[method-assign]
            Table.delete_item = _noting_keys(_saved["delete_item"])  # type: ignore[method-assign]
        _depth += 1
    try:
        with quick_requests(), indexed_executions():
            yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                DynamoDBBackend.transact_write_items = _original  # type: ignore[method-assign,assignment]
                dynamodb_models.copy = _original_copy_module  # type: ignore[attr-defined]
                Table.query = _original_query  # type: ignore[method-assign,assignment]
                Table.all_items = _original_all_items  # type: ignore[method-assign,assignment]
                DynamoHandler.call_action = _original_call_action  # type: ignore[method-assign,assignment]
                Table.scan = _saved["scan"]  # type: ignore[method-assign]
                Table.put_item = _saved["put_item"]  # type: ignore[method-assign]
                Table.delete_item = _saved["delete_item"]  # type: ignore[method-assign]
                _saved.clear()
                moto_scans.forget()
