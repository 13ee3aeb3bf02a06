"""Bounds on free text copied from executions and messages into items and callbacks."""

from __future__ import annotations

# Causes can be 32 KiB; items stay small and callbacks stay far below 256 KiB.
MAX_CAUSE_CHARS = 4096
# What marks a text that was cut.
TRUNCATED_MARK = "...[truncated]"


def clip(text: str | None, limit: int = MAX_CAUSE_CHARS) -> str | None:
    """``text`` cut to ``limit`` characters, marked when cut."""
    if text is None or len(text) <= limit:
        return text
    return text[: limit - len(TRUNCATED_MARK)] + TRUNCATED_MARK
