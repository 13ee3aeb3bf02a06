"""Output for people (Rich tables, progress on stderr) and for scripts (``--json``)."""

from __future__ import annotations

import json
import re
import sys
from datetime import datetime, timedelta
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)

STATE_STYLE = {
    "SUCCEEDED": "green",
    "FAILED": "red",
    "INVALID": "magenta",
    "ABORTED": "red",
    "TIMED_OUT": "red",
    "PROCESSING": "yellow",
    "CLAIMED": "yellow",
    "RUNNING": "yellow",
    "PENDING": "dim",
}

# Wide enough for ARNs and payload ids when stdout is a pipe or a file.
_MIN_WIDTH_OFF_TERMINAL = 160


def stdout() -> Console:
    """Console for results (made per call: tests swap ``sys.stdout``)."""
    console = Console(file=sys.stdout, highlight=False)
    if not console.is_terminal:
        console.width = max(console.width, _MIN_WIDTH_OFF_TERMINAL)
    return console


def stderr() -> Console:
    """Console for progress and notes, so ``--json`` output stays clean."""
    return Console(file=sys.stderr, highlight=False)


def emit_json(data: Any) -> None:
    """Print ``data`` as JSON on stdout (datetimes as ISO-8601 text)."""
    typer.echo(json.dumps(data, indent=2, default=_json_default))


def _json_default(value: object) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def progress(*, total_label: bool = True) -> Progress:
    """A progress display on stderr; silent when stderr is not a terminal."""
    console = stderr()
    columns = [SpinnerColumn(), TextColumn("{task.description}"), BarColumn()]
    if total_label:
        columns.append(MofNCompleteColumn())
    columns.append(TimeElapsedColumn())
    return Progress(*columns, console=console, transient=True, disable=not console.is_terminal)


def styled(state: str | None) -> str:
    """Rich markup for a state name, coloured by what it means."""
    text = state or "—"
    style = STATE_STYLE.get(text, "")
    return f"[{style}]{escape(text)}[/]" if style else escape(text)


def plain(value: object) -> str:
    """A value as escaped table text (``—`` for nothing)."""
    if value is None or value == "":
        return "—"
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    return escape(str(value))


def clipped(text: str | None, limit: int = 80) -> str:
    """``text`` on one line, at most ``limit`` characters."""
    if not text:
        return "—"
    line = " ".join(text.split())
    return escape(line if len(line) <= limit else line[: limit - 1] + "…")


def age(since: datetime | None, now: datetime) -> str:
    """How long ago ``since`` was, e.g. ``2h 05m``."""
    if since is None:
        return "—"
    return duration_text(now - since)


def duration_text(delta: timedelta) -> str:
    """A duration as ``3d 4h``, ``2h 05m``, ``4m 10s`` or ``12s``."""
    seconds = max(0, int(delta.total_seconds()))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h" if hours else f"{days}d"
    if hours:
        return f"{hours}h {minutes:02d}m" if minutes else f"{hours}h"
    if minutes:
        return f"{minutes}m {seconds:02d}s" if seconds else f"{minutes}m"
    return f"{seconds}s"


_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)([dhms])")
_UNIT_SECONDS = {"d": 86400, "h": 3600, "m": 60, "s": 1}


def parse_duration(text: str) -> timedelta:
    """``1h``, ``30m``, ``1h30m``, ``90s``, ``2d`` or plain seconds as a timedelta.

    Raises:
        ValueError: The text is not a duration.
    """
    compact = text.strip().lower().replace(" ", "")
    if compact.replace(".", "", 1).isdigit():
        return timedelta(seconds=float(compact))
    parts = _DURATION_PART.findall(compact)
    if not parts or "".join(number + unit for number, unit in parts) != compact:
        msg = f"not a duration: {text!r} (use e.g. 90s, 30m, 1h30m, 2d)"
        raise ValueError(msg)
    return timedelta(seconds=sum(float(number) * _UNIT_SECONDS[unit] for number, unit in parts))


def escape_line(text: str) -> str:
    """``text`` on one line, with Rich markup escaped."""
    return escape(" ".join(text.split()))
