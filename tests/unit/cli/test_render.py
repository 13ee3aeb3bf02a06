"""Durations in and out."""

from __future__ import annotations

from datetime import timedelta

import pytest

from dependency_tracker_cli.render import duration_text, parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("30m", 1800), ("1h", 3600), ("1h30m", 5400), ("2d", 172800), ("45", 45)],
)
def test_parse_duration(text: str, seconds: int) -> None:
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "h", "1x", "1h-2m", "soon"])
def test_parse_duration_refuses_junk(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (5, "5s"),
        (250, "4m 10s"),
        (600, "10m"),
        (3600, "1h"),
        (7500, "2h 05m"),
        (172800, "2d"),
        (273600, "3d 4h"),
        (-3, "0s"),
    ],
)
def test_duration_text(seconds: int, text: str) -> None:
    assert duration_text(timedelta(seconds=seconds)) == text
