"""Where moto's cost grows with the table and AWS's does not: patched for local runs.

moto backs up every table a ``TransactWriteItems`` touches with ``copy.deepcopy``
before applying it, so each transaction costs time in the size of the whole
table: counting n join members one transaction each becomes O(n²) locally,
while on AWS a transaction costs the same whatever the table holds. While
:func:`cheap_transactions` is active, a transaction backs up only the items it
touches and puts them back if it is cancelled, which is what moto's table copy
achieves, without the copy. Semantics are moto's own: the same checks, the same
errors, the same all-or-nothing outcome.

Transactions also run one at a time here. moto applies the items after a failed
condition before it rolls back; two transactions on the same item from two
threads (a redelivered stream record counted twice at once) could then undo each
other's writes, which AWS's isolation never does.
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

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

_lock = threading.Lock()
_transactions = threading.Lock()
_depth = 0
_original: Callable[..., None] | None = None
_original_copy_module: Any = None


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
    # A cancelled transaction writes nothing, so it leaves no stream record either.
    for table, *_ in taken:
        shard = table.stream_shard
        if shard is not None and id(shard) in streams:
            del shard.items[streams[id(shard)] :]


def _transact_write_items(self: DynamoDBBackend, transact_items: list[dict[str, Any]]) -> None:
    assert _original is not None  # noqa: S101 (installed before use)
    with _transactions:
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


@contextlib.contextmanager
def cheap_transactions() -> Iterator[None]:
    """Within the block, moto's ``TransactWriteItems`` copies items, not tables (re-entrant)."""
    global _depth, _original, _original_copy_module  # noqa: PLW0603 (one patch per process)
    with _lock:
        if _depth == 0:
            _original = DynamoDBBackend.transact_write_items
            _original_copy_module = dynamodb_models.copy  # type: ignore[attr-defined]
            dynamodb_models.copy = _NoTableCopies  # type: ignore[attr-defined,assignment]
            DynamoDBBackend.transact_write_items = _transact_write_items  # type: ignore[method-assign]
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                DynamoDBBackend.transact_write_items = _original  # type: ignore[method-assign,assignment]
                dynamodb_models.copy = _original_copy_module  # type: ignore[attr-defined]
