"""Views of payload state items shared by ``status`` and ``publish --wait``."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from rich.table import Table

from dependency_tracker_cli import render
from dependency_tracker_cli.waitgraph import execution_label

if TYPE_CHECKING:
    from collections.abc import Iterable

    from dependency_tracker.table.items import PayloadStateItem


# The payload id and the last execution's name: copied into other commands, never cut.
PAYLOAD_TABLE_KEYS = (0, 4)


def stored_result(item: PayloadStateItem) -> Any:
    """The stored result of a payload (inline JSON or an ``s3://`` pointer), or None."""
    text = item.model_dump().get("result_json")
    if not text:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def result_text(result: Any) -> str:
    """One-line summary of a stored result."""
    if result is None:
        return "—"
    if isinstance(result, dict) and isinstance(result.get("url"), str):
        return render.escape_line(result["url"])
    if isinstance(result, dict) and isinstance(result.get("items"), list):
        return f"inline, {len(result['items'])} item(s)"
    return render.clipped(json.dumps(result), 60)


def payload_json(payload_id: str, item: PayloadStateItem | None) -> dict[str, Any]:
    """``--json`` view of one payload: every stored field, the result parsed."""
    if item is None:
        return {"payload_id": payload_id, "found": False}
    data = item.model_dump(mode="json")
    data.pop("result_json", None)
    data["result"] = stored_result(item)
    data["found"] = True
    return data


def payload_table(
    rows: Iterable[tuple[str, PayloadStateItem | None]], *, title: str = "payloads"
) -> Table:
    """Human view of payloads: state, attempts, executions, last error, result.

    Print it with :func:`~dependency_tracker_cli.render.print_table`, keys
    :data:`PAYLOAD_TABLE_KEYS`.
    """
    table = Table(title=title)
    # Key columns (PAYLOAD_TABLE_KEYS): render.print_table keeps them whole.
    for column in ("payload", "state", "attempt", "executions", "last execution"):
        table.add_column(column)
    for column in ("last error", "result", "updated"):
        table.add_column(column)
    for payload_id, item in rows:
        if item is None:
            table.add_row(render.plain(payload_id), "[red]not found[/]", *["—"] * 6)
            continue
        error = item.last_error
        if error and item.last_cause:
            error = f"{error}: {item.last_cause}"
        table.add_row(
            render.plain(payload_id),
            render.styled(item.state.value),
            str(item.attempt),
            str(len(item.executions)),
            render.plain(execution_label(item.execution_arn) if item.execution_arn else None),
            render.clipped(error, 60),
            result_text(stored_result(item)),
            render.plain(item.updated_at),
        )
    return table


def payload_card(payload_id: str, item: PayloadStateItem | None) -> Table:
    """Everything the state table holds on one payload, one field a line.

    Print it with :func:`~dependency_tracker_cli.render.print_table` (no key column:
    an ARN is one word, and a card too narrow for its longest word prints as lines).
    """
    card = Table(title=render.escape_line(payload_id), title_justify="left", show_header=False)
    card.add_column("field", style="bold")
    card.add_column("value")
    if item is None:
        card.add_row("state", "[red]not found[/]")
        return card
    card.add_row("state", render.styled(item.state.value))
    card.add_row("workflow", render.plain(item.workflow))
    card.add_row("attempt", str(item.attempt))
    card.add_row(
        f"executions ({len(item.executions)})",
        "\n".join(render.plain(arn) for arn in item.executions) or "—",
    )
    card.add_row("last error", render.plain(item.last_error))
    card.add_row("last cause", render.clipped(item.last_cause, 400))
    card.add_row("result", result_text(stored_result(item)))
    for name in ("created_at", "claimed_at", "updated_at", "finished_at"):
        card.add_row(name.removesuffix("_at"), render.plain(getattr(item, name)))
    return card
