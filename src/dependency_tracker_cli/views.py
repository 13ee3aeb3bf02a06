"""Views of payload state shared by ``status`` and ``publish --wait``.

They show a :class:`~dependency_tracker_cli.readmodel.PayloadView` (either mode's
state table), or a tracker state item as one.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from rich.table import Table

from dependency_tracker.table.items import PayloadStateItem
from dependency_tracker_cli import render
from dependency_tracker_cli.readmodel import PayloadSource, PayloadView, as_view
from dependency_tracker_cli.waitgraph import execution_label

if TYPE_CHECKING:
    from collections.abc import Collection, Iterable


# The payload id and the last execution's name: copied into other commands, never cut.
PAYLOAD_TABLE_KEYS = (0, 4)

# What the views take: a read-model view, or a tracker state item (``publish --wait``).
Shown = PayloadView | PayloadStateItem | None


def stored_result(item: PayloadView | PayloadStateItem) -> Any:
    """The stored result of a payload (inline JSON or an ``s3://`` pointer), or None."""
    view = as_view(item)
    return None if view is None else view.result


def result_text(result: Any) -> str:
    """One-line summary of a stored result."""
    if result is None:
        return "—"
    if isinstance(result, dict) and isinstance(result.get("url"), str):
        return render.escape_line(result["url"])
    if isinstance(result, dict) and isinstance(result.get("items"), list):
        return f"inline, {len(result['items'])} item(s)"
    return render.clipped(json.dumps(result), 60)


def payload_json(payload_id: str, item: Shown) -> dict[str, Any]:
    """``--json`` view of one payload: every stored field, the result parsed, its source."""
    view = as_view(item)
    if view is None:
        return {"payload_id": payload_id, "found": False}
    return view.to_json()


def error_text(view: PayloadView) -> str | None:
    """The last error, with its cause when the source keeps one apart."""
    if view.last_error and view.last_cause:
        return f"{view.last_error}: {view.last_cause}"
    return view.last_error


def unknown_workflow(workflow: str, *, prefix: str, machines: Collection[str]) -> str | None:
    """Why a message for ``workflow`` cannot start: no ``{prefix}-{workflow}`` (else None).

    The tracker keeps such a message ``CLAIMED`` and retries it; only its log
    says why, so the operator's commands check the state machine themselves.
    """
    machine = f"{prefix}-{workflow}"
    if machine in machines:
        return None
    return f"unknown workflow {workflow!r}: no state machine {machine}"


def payload_table(rows: Iterable[tuple[str, Shown]], *, title: str = "payloads") -> Table:
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
        view = as_view(item)
        if view is None:
            table.add_row(render.plain(payload_id), "[red]not found[/]", *["—"] * 6)
            continue
        last = view.last_execution
        table.add_row(
            render.plain(payload_id),
            render.styled(view.state.value),
            render.plain(view.attempt),
            str(len(view.executions)),
            render.plain(execution_label(last) if last else None),
            render.clipped(error_text(view), 60),
            result_text(view.result),
            render.plain(view.updated_at),
        )
    return table


def payload_card(payload_id: str, item: Shown, *, reason: str | None = None) -> Table:
    """Everything the state table holds on one payload, one field a line.

    A payload read from cirrus's state table says so (``source``); cirrus counts
    no attempts (``—``) and keeps its error as one text (``last error``). ``reason``
    says why a payload does not move on (``why``), when the caller found out.
    Print it with :func:`~dependency_tracker_cli.render.print_table` (no key column:
    an ARN is one word, and a card too narrow for its longest word prints as lines).
    """
    card = Table(title=render.escape_line(payload_id), title_justify="left", show_header=False)
    card.add_column("field", style="bold")
    card.add_column("value")
    view = as_view(item)
    if view is None:
        card.add_row("state", "[red]not found[/]")
        return card
    card.add_row("state", render.styled(view.state.value))
    if reason:
        card.add_row("why", render.clipped(reason, 400))
    if view.source is PayloadSource.CIRRUS:
        card.add_row("source", f"cirrus ({render.plain(view.table)})")
    card.add_row("workflow", render.plain(view.workflow))
    card.add_row("attempt", render.plain(view.attempt))
    card.add_row(
        f"executions ({len(view.executions)})",
        "\n".join(render.plain(arn) for arn in view.executions) or "—",
    )
    card.add_row("last error", render.plain(view.last_error))
    if view.source is PayloadSource.TRACKER:
        card.add_row("last cause", render.clipped(view.last_cause, 400))
        card.add_row("result", result_text(view.result))
    else:
        outputs = view.extra.get("outputs") or []
        card.add_row("outputs", "\n".join(render.plain(url) for url in outputs) or "—")
    for name in ("created_at", "claimed_at", "updated_at", "finished_at"):
        card.add_row(name.removesuffix("_at"), render.plain(getattr(view, name)))
    return card
