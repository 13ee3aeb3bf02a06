"""Small statistics helpers (no numpy)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0-100), linear between closest ranks; None if empty."""
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low, high = math.floor(position), math.ceil(position)
    if low == high:
        return ordered[low]
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def median(values: Sequence[float]) -> float | None:
    """The 50th percentile."""
    return percentile(values, 50)


def mean(values: Sequence[float]) -> float | None:
    """Arithmetic mean; None if empty."""
    return sum(values) / len(values) if values else None


def rounded(value: float | None, digits: int = 3) -> float | None:
    """``value`` rounded for results.json (None stays None)."""
    return None if value is None else round(value, digits)
