"""DynamoDB item sizes and capacity units, as DynamoDB bills them.

Sizes follow the DynamoDB developer guide: attribute names plus values
(strings as UTF-8 bytes, numbers about one byte per two digits plus one,
lists and maps 3 bytes plus one per element). Writes cost one write request
unit per started KB of the larger of the old and new item; strongly
consistent reads one read request unit per started 4 KB (half for eventually
consistent reads).

moto's task tokens are 36-character UUIDs, far shorter than the ones AWS
issues, so the size of a row holding ``task_token`` is corrected to an assumed
AWS token length (``prices.json``, ``assumptions.aws_task_token_chars``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

KIB = 1024
READ_UNIT_BYTES = 4 * KIB


def _text(value: Any) -> int:
    return len(str(value).encode("utf-8"))


def _number(value: Any) -> int:
    digits = str(value).lstrip("-").replace(".", "")
    return (len(digits) + 1) // 2 + 1


_SIZES: dict[str, Callable[[Any], int]] = {
    "S": _text,
    "N": _number,
    "B": len,
    "BOOL": lambda _: 1,
    "NULL": lambda _: 1,
    "SS": lambda items: sum(_text(item) for item in items),
    "NS": lambda items: sum(_number(item) for item in items),
    "BS": lambda items: sum(len(item) for item in items),
    "L": lambda items: 3 + sum(attribute_size(item) + 1 for item in items),
    "M": lambda items: 3 + sum(_text(k) + attribute_size(v) + 1 for k, v in items.items()),
}


def attribute_size(value: Mapping[str, Any]) -> int:
    """Bytes of one attribute value in the low-level ``{"S": ...}`` form."""
    ((kind, inner),) = value.items()
    size = _SIZES.get(kind)
    if size is None:
        msg = f"unknown DynamoDB type {kind!r}"
        raise ValueError(msg)
    return size(inner)


def item_size(item: Mapping[str, Any], *, token_chars: int | None = None) -> int:
    """Bytes of an item; ``task_token`` counted at ``token_chars`` when given."""
    size = 0
    for name, value in item.items():
        size += len(name.encode("utf-8")) + attribute_size(value)
    token = item.get("task_token", {}).get("S")
    if token_chars is not None and isinstance(token, str):
        size += token_chars - len(token.encode("utf-8"))
    return size


def write_units(size: int) -> int:
    """Write request units of one standard write of an item of ``size`` bytes."""
    return max(1, math.ceil(size / KIB))


def read_units(size: int, *, consistent: bool) -> float:
    """Read request units of one read of ``size`` bytes (a missing item costs the minimum)."""
    units = max(1, math.ceil(size / READ_UNIT_BYTES))
    return float(units) if consistent else units / 2
