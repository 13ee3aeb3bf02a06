"""Bounds on free text copied from executions and messages into items and callbacks."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

# Causes can be 32 KiB; items stay small and callbacks stay far below 256 KiB.
MAX_CAUSE_CHARS = 4096
# What marks a text that was cut.
TRUNCATED_MARK = "...[truncated]"


def clip(text: str | None, limit: int = MAX_CAUSE_CHARS) -> str | None:
    """``text`` cut to ``limit`` characters, marked when cut."""
    if text is None or len(text) <= limit:
        return text
    return text[: limit - len(TRUNCATED_MARK)] + TRUNCATED_MARK


# Free text kept when a reference itself would not fit (pathological ids).
_MIN_CLIPPED_CHARS = 64


def fit_json(
    fields: dict[str, Any], clippable: list[str], limit: int, measure: Callable[[str], int]
) -> str:
    """Compact JSON of ``fields`` within ``limit`` (as ``measure`` counts it).

    Long strings in ``clippable`` are cut, in that order, until it fits (marked
    ``...[truncated]``); one that cannot shrink enough is dropped. The JSON
    stays valid throughout.
    """
    text = json.dumps(fields, separators=(",", ":"))
    for name in clippable:
        while measure(text) > limit and isinstance(fields.get(name), str):
            value: str = fields[name]
            # Keep the share of characters that fits; escapes (\\uXXXX) cost more
            # than one, so measure the field as it is encoded and repeat if needed.
            encoded = measure(json.dumps(value))
            budget = limit - (measure(text) - encoded) - len(TRUNCATED_MARK) - 8
            keep = len(value) * budget // encoded
            fields[name] = (
                value[: keep - len(TRUNCATED_MARK)] + TRUNCATED_MARK
                if keep >= _MIN_CLIPPED_CHARS
                else None
            )
            text = json.dumps(fields, separators=(",", ":"))
    return text
