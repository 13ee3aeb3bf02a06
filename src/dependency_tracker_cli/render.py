"""Output for people (Rich tables, progress on stderr) and for scripts (``--json``)."""

from __future__ import annotations

import json
import re
import sys
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text

if TYPE_CHECKING:
    from collections.abc import Iterable

    from rich.console import RenderableType
    from rich.table import Table

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
    return escape(one_line(text, limit))


def one_line(text: str, limit: int) -> str:
    """``text`` on one line, at most ``limit`` characters, not escaped (graph labels)."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


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


# --------------------------------------------------------------------------- narrow terminals

# Table measurement ignores the console's width when given this much room.
_UNBOUNDED = 1_000_000
_INDENT = "    "


def print_table(console: Console, table: Table, *, keys: Iterable[int] = (0,)) -> None:
    """Print ``table`` whole, or as one block per row when it cannot fit.

    Columns ``keys`` hold identifiers (payload ids, ARNs, message ids): they
    are never cut or folded, because a broken id cannot be copied back into a
    command. The table is printed when every identifier and every word fits
    in the console's width; otherwise each row becomes a heading and
    ``column: value`` lines, printed without Rich's line breaks (the terminal
    wraps long ids, and copying them gives the id back whole). A table
    without a header (a card, as ``status`` prints) becomes its title
    followed by ``field: value`` lines.
    """
    identifiers = set(keys)
    padding = table.padding[1] + table.padding[3]  # Rich counts it in min_width, not in width
    least: list[int] = []
    most: list[int] = []
    for index, column in enumerate(table.columns):
        cells = [column.header, *column.cells] if table.show_header else list(column.cells)
        most.append(max((_width(cell) for cell in cells), default=0) + padding)
        if index in identifiers:
            column.no_wrap = True
            column.overflow = "ignore"
            least.append(most[-1])
        else:
            least.append(max((_longest_word(cell) for cell in cells), default=0) + padding)
        column.min_width = least[-1]
    if table.title is not None:
        table.min_width = max(table.min_width or 0, _width(table.title))
    needed = Measurement.get(console, console.options.update(max_width=_UNBOUNDED), table)
    if max(needed.minimum, sum(least) + _edges(table)) <= console.width:
        # Rich narrows the widest columns first and may cut a word ("2026-11…") even
        # when every word fits: the widths are given, each column at least its longest word.
        room = console.width - _edges(table)
        for column, width in zip(table.columns, _share(least, most, room), strict=True):
            column.width = width - padding
        console.print(table)
    elif table.show_header:
        _print_blocks(console, table)
    else:
        _print_card(console, table)


def _edges(table: Table) -> int:
    """Cells a table's borders take (as Rich draws them)."""
    if table.box is None:
        return 0
    return len(table.columns) - 1 + (2 if table.show_edge else 0)


def _share(least: list[int], most: list[int], room: int) -> list[int]:
    """Column widths from ``least`` toward ``most``, the room shared out evenly."""
    widths = list(least)
    spare = room - sum(widths)
    hungry = sorted(range(len(widths)), key=lambda i: most[i] - least[i])
    for done, index in enumerate(hungry):
        give = min(most[index] - widths[index], spare // (len(hungry) - done))
        widths[index] += max(give, 0)
        spare -= max(give, 0)
    return widths


def _width(cell: RenderableType) -> int:
    """Cells on screen of a cell given as markup text (0 for other renderables)."""
    if isinstance(cell, str):
        return max((Text.from_markup(line).cell_len for line in cell.splitlines()), default=0)
    if isinstance(cell, Text):
        return cell.cell_len
    return 0


def _longest_word(cell: RenderableType) -> int:
    """Cells on screen of a cell's longest word (0 for renderables other than text)."""
    if isinstance(cell, str):
        cell = Text.from_markup(cell)
    if not isinstance(cell, Text):
        return 0
    return max((Text(word).cell_len for word in cell.plain.split()), default=0)


def _print_blocks(console: Console, table: Table) -> None:
    if table.title is not None:
        console.print(table.title, style="bold", soft_wrap=True)
    headers = [str(column.header) for column in table.columns]
    columns = [list(column.cells) for column in table.columns]
    for row in range(table.row_count):
        cells = [column[row] for column in columns]
        if _text(cells[0]):
            console.print()
            console.print(cells[0], style="bold", soft_wrap=True)
        for header, cell in zip(headers[1:], cells[1:], strict=True):
            _print_field(console, header, cell)


def _print_card(console: Console, table: Table) -> None:
    if table.title is not None:
        console.print(table.title, style="bold", soft_wrap=True)
    fields, values = (list(column.cells) for column in table.columns[:2])
    for field, value in zip(fields, values, strict=True):
        _print_field(console, _text(field), value)


def _print_field(console: Console, header: str, cell: RenderableType) -> None:
    """``    header: value``; a value of several lines continues under the first."""
    lines = _text(cell).splitlines()
    if not lines:
        return
    console.print(f"{_INDENT}[dim]{escape(header)}:[/] {lines[0]}", soft_wrap=True)
    for line in lines[1:]:
        console.print(f"{_INDENT}{_INDENT}{line}", soft_wrap=True)


def _text(cell: RenderableType) -> str:
    """A cell's markup text (tables here hold markup strings)."""
    if isinstance(cell, Text):
        return escape(cell.plain)
    return cell if isinstance(cell, str) else ""
