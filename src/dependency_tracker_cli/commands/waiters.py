"""``dependency-tracker waiters``: who waits on a payload, since when, notified or not."""

# No ``from __future__ import annotations``: Typer reads these annotations at runtime.

from datetime import datetime
from typing import Annotated, Any

import typer
from rich.table import Table

from dependency_tracker.core.enums import utcnow
from dependency_tracker.core.errors import PayloadNotFoundError
from dependency_tracker.core.tokens import redact_token
from dependency_tracker.joins.rows import JoinItem
from dependency_tracker.table.items import MembershipItem, WaiterItem
from dependency_tracker_cli import render
from dependency_tracker_cli.dead_ends import waiting_parent_note
from dependency_tracker_cli.options import Json, aws_command
from dependency_tracker_cli.readmodel import CirrusPrefix, CirrusStateTableName
from dependency_tracker_cli.target import Target
from dependency_tracker_cli.waitgraph import (
    describe_parents,
    execution_label,
    failure_of,
    is_failure,
)


@aws_command
def waiters(
    target: Target,
    *,
    payload_id: Annotated[str, typer.Argument(metavar="PAYLOAD_ID", show_default=False)],
    json_output: Json = False,
    cirrus_prefix: CirrusPrefix = None,
    cirrus_state_table: CirrusStateTableName = None,
) -> None:
    """List who waits on a payload: parent execution, waiting payload, since when, notified.

    A failed wait shows its error and cause: the parent execution's own when it
    failed (one DescribeExecution per such parent), else what the tracker stored on
    the row. Task tokens are shown only as sha256: hashes. Exits 5 if the payload id is
    unknown (no state item and no waiter; in cirrus mode, none in cirrus's state
    table either), so a typo never reads as "nobody waits".

    Examples:
      dependency-tracker waiters sentinel-2-l2a/workflow-simulate/tile-1
      dependency-tracker waiters "$(cat id.txt)" --json
      dependency-tracker waiters s2/workflow-cog/tile-1 --cirrus-prefix cirrus
    """
    target.use_cirrus(prefix=cirrus_prefix, state_table=cirrus_state_table)
    views: list[dict[str, Any]] = []
    joins: dict[str, JoinItem | None] = {}
    counts: dict[str, tuple[int, int]] = {}
    join_store = target.joins
    for row in target.dependencies.rows(payload_id):
        if isinstance(row, WaiterItem):
            views.append(_waiter_view(row))
        elif isinstance(row, MembershipItem):
            if row.join_id not in joins:
                joins[row.join_id], *counted = join_store.read(row.join_id)
                counts[row.join_id] = (counted[0], counted[1])
            views.append(_membership_view(row, joins[row.join_id], counts[row.join_id]))
    views.sort(key=lambda view: (view["since"], view["waiter"]))
    _add_failures(target, views)
    # No rows and no state item: most likely a typo, which must not read as "no waiters".
    known = bool(views) or payload_id in target.payloads.get_many([payload_id])
    if json_output:
        render.emit_json({"payload_id": payload_id, "found": known, "waiters": views})
    if not known:
        note = waiting_parent_note(target, payload_id)
        if note is not None:
            render.stderr().print(render.escape_line(note), soft_wrap=True)
        raise PayloadNotFoundError(f"{payload_id} (no state item, and nothing waits on it)")
    if json_output:
        return
    console = render.stdout()
    if not views:
        console.print(f"nobody waits on {render.escape_line(payload_id)}")
        return
    render.print_table(console, _table(payload_id, views, utcnow()), keys=(0, 1, 2))


def _waiter_view(row: WaiterItem) -> dict[str, Any]:
    return {
        "kind": "token",
        "waiter": redact_token(row.task_token),
        "parent_execution": row.parent_execution,
        "waiter_payload_id": row.waiter_payload_id,
        "since": row.created_at,
        "state": row.workflow_state.value,
        "resolved_at": row.resolved_at,
        "replayed": row.replayed,
        "error": row.error,
        "cause": row.cause,
        "notified": row.notified_at is not None,
        "notified_at": row.notified_at,
        "notify_outcome": row.notify_outcome,
    }


def _add_failures(target: Target, views: list[dict[str, Any]]) -> None:
    """Give each failed wait its ``failure``: its parent's error and cause, else the row's."""
    arns = [
        view["parent_execution"]
        for view in views
        if is_failure(view["state"]) and view["parent_execution"]
    ]
    runs = describe_parents(target.client("stepfunctions"), arns) if arns else {}
    for view in views:
        failed = is_failure(view["state"])
        run = runs.get(view["parent_execution"]) if failed else None
        view["parent_status"] = None if run is None else run.status
        failure = failure_of(run, view["error"], view["cause"]) if failed else None
        view["failure"] = None if failure is None else failure.to_json()


def _failure_text(failure: dict[str, Any] | None, parent_status: str | None) -> str:
    if failure is None:
        return "—"
    text = ": ".join(part for part in (failure["error"], failure["cause"]) if part)
    if failure["source"] == "parent":
        text = f"parent {parent_status}: {text}"
    return render.clipped(text, 60)


def _membership_view(
    row: MembershipItem, join: JoinItem | None, counts: tuple[int, int]
) -> dict[str, Any]:
    view: dict[str, Any] = {
        "kind": "join",
        "waiter": f"join:{row.join_id}",
        "join_id": row.join_id,
        "parent_execution": None if join is None else join.parent_execution,
        "waiter_payload_id": None if join is None else join.waiter_payload_id,
        "since": row.created_at,
        "state": row.workflow_state.value,
        "resolved_at": row.resolved_at,
        "replayed": row.replayed,
        "error": row.error,
        "cause": row.cause,
        # Every token the join holds answered (told, or released by an operator).
        "notified": join is not None and not join.unanswered(),
        "notified_at": None if join is None else (join.notified_at or join.released_at),
        "notify_outcome": None if join is None else join.notify_outcome,
    }
    if join is not None:
        view["join"] = {
            "state": join.workflow_state.value,
            "quorum": join.quorum,
            "total": join.known_total,
            "registered": join.registered,
            "succeeded": counts[0],
            "failed": counts[1],
            "token": redact_token(join.task_token),
        }
    return view


def _table(payload_id: str, views: list[dict[str, Any]], now: datetime) -> Table:
    table = Table(title=f"waiters on {render.escape_line(payload_id)}")
    columns = ("waiter", "parent execution", "waiting payload", "since", "state", "notified")
    for column in (*columns, "error: cause"):
        table.add_column(column)
    for view in views:
        parent = view["parent_execution"]
        notified = (
            f"[green]✓[/] {render.age(view['notified_at'], now)} ago, {view['notify_outcome']}"
            if view["notified"]
            else "[yellow]not yet[/]"
        )
        table.add_row(
            render.plain(view["waiter"]),
            render.plain(execution_label(parent) if parent else None),
            render.plain(view["waiter_payload_id"]),
            f"{render.plain(view['since'])} ({render.age(view['since'], now)} ago)",
            render.styled(view["state"]),
            notified,
            _failure_text(view["failure"], view["parent_status"]),
        )
    return table
