"""``dependency-tracker list``: payloads (or waiters) by state, workflow, age and error, paged.

The module is ``list_cmd``: a function named ``list`` would shadow the builtin.
"""

# No ``from __future__ import annotations``: Typer reads these annotations at runtime.

from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any

import typer
from rich.table import Table

from dependency_tracker.core.enums import PayloadState, utcnow
from dependency_tracker.core.tokens import redact_token
from dependency_tracker.table.items import MembershipItem, WaiterItem
from dependency_tracker.table.rows import is_bookkeeping_item, row_from_item
from dependency_tracker_cli import render
from dependency_tracker_cli.options import Json, aws_command
from dependency_tracker_cli.readmodel.filters import PayloadFilter, time_filter_parts, within
from dependency_tracker_cli.readmodel.paging import (
    Expression,
    InvalidNextTokenError,
    PageRequest,
    ScanResult,
    scan_page,
)
from dependency_tracker_cli.readmodel.readers import CirrusPrefix, CirrusStateTableName
from dependency_tracker_cli.readmodel.view import PayloadView, collections_of, workflow_of
from dependency_tracker_cli.target import Target
from dependency_tracker_cli.views import error_text
from dependency_tracker_cli.waitgraph import execution_label

_FILTERS = "Filters"
_PAGING = "Paging"
_DEPENDENCY_KEY = ("payload_id", "waiter_id")

States = Annotated[
    list[PayloadState] | None,
    typer.Option(
        "--state",
        metavar="STATE",
        help="Only this state (repeat for several).",
        case_sensitive=False,
        rich_help_panel=_FILTERS,
        show_default=False,
    ),
]
Workflow = Annotated[
    str | None,
    typer.Option(help="Only payloads of this workflow.", rich_help_panel=_FILTERS),
]
Collection = Annotated[
    str | None,
    typer.Option(
        help="Only payloads whose id names this collection ({collections}/workflow-...).",
        rich_help_panel=_FILTERS,
    ),
]
OlderThan = Annotated[
    str | None,
    typer.Option(
        metavar="DURATION",
        help="Only rows last changed (waiters: waiting since) longer ago, e.g. 30m, 2d.",
        rich_help_panel=_FILTERS,
    ),
]
NewerThan = Annotated[
    str | None,
    typer.Option(
        metavar="DURATION",
        help="Only rows last changed (waiters: waiting since) within this time.",
        rich_help_panel=_FILTERS,
    ),
]
ErrorText = Annotated[
    str | None,
    typer.Option(
        "--error",
        metavar="TEXT",
        help="Only rows whose last error or cause contains TEXT (case-sensitive).",
        rich_help_panel=_FILTERS,
    ),
]
Limit = Annotated[int, typer.Option(min=1, help="Rows to show at most.", rich_help_panel=_PAGING)]
NextToken = Annotated[
    str | None,
    typer.Option(
        metavar="TOKEN",
        help="Go on where the previous listing stopped (the token it printed).",
        rich_help_panel=_PAGING,
    ),
]
MaxPages = Annotated[
    int,
    typer.Option(
        min=1,
        help="Scan pages (1 MB each) to read at most before stopping with a next token.",
        rich_help_panel=_PAGING,
    ),
]


def payload_filter(
    *,
    states: list[PayloadState] | None,
    workflow: str | None,
    collection: str | None,
    older_than: str | None,
    newer_than: str | None,
    error: str | None,
    now: datetime,
    payloads_only: bool = False,
) -> PayloadFilter:
    """The filter the command line asks for (a bad duration is a usage error, exit 2)."""
    return PayloadFilter(
        states=frozenset(states or ()),
        workflow=workflow,
        collection=collection,
        older_than=_instant(older_than, "--older-than", now),
        newer_than=_instant(newer_than, "--newer-than", now),
        error=error,
        payloads_only=payloads_only,
    )


def _instant(text: str | None, option: str, now: datetime) -> datetime | None:
    if text is None:
        return None
    try:
        return now - render.parse_duration(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint=f"'{option}'") from exc


def scanned(read: Any) -> Any:
    """``read()``, with a ``--next-token`` this command did not print as a usage error."""
    try:
        return read()
    except InvalidNextTokenError as exc:
        raise typer.BadParameter(str(exc), param_hint="'--next-token'") from exc


def max_pages_note(result: ScanResult[Any]) -> None:
    """Say on stderr that ``--max-pages`` stopped the scan, and how to go on."""
    if not result.max_pages_reached:
        return
    render.stderr().print(
        f"[yellow]note:[/] stopped after {result.pages} Scan page(s) (--max-pages): "
        "a filter reads the whole table, page by page; go on with --next-token "
        f"{result.next_token} or raise --max-pages",
        soft_wrap=True,
    )


@aws_command
def list_payloads(
    target: Target,
    *,
    waiters: Annotated[
        bool,
        typer.Option("--waiters", help="List waiter rows (who waits on what) instead of payloads."),
    ] = False,
    state: States = None,
    workflow: Workflow = None,
    collection: Collection = None,
    older_than: OlderThan = None,
    newer_than: NewerThan = None,
    error: ErrorText = None,
    limit: Limit = 50,
    next_token: NextToken = None,
    max_pages: MaxPages = 20,
    json_output: Json = False,
    cirrus_prefix: CirrusPrefix = None,
    cirrus_state_table: CirrusStateTableName = None,
) -> None:
    """List payloads (or, with --waiters, waiter rows) by state, workflow, collection, age, error.

    Reads the state table with a paginated Scan (cirrus's in cirrus mode): a filter
    does not make it cheaper, every page read costs its size. Prints --next-token
    when more rows remain; --max-pages stops a long scan early.

    Examples:
      dependency-tracker list --state FAILED --workflow cog --older-than 1h
      dependency-tracker list --error Timeout --limit 20 --json
      dependency-tracker list --waiters --state PROCESSING --older-than 2h
      dependency-tracker list --state FAILED --next-token eyJwYXlsb2FkX2lkIjp...
    """
    target.use_cirrus(prefix=cirrus_prefix, state_table=cirrus_state_table)
    now = utcnow()
    wanted = payload_filter(
        states=state,
        workflow=workflow,
        collection=collection,
        older_than=older_than,
        newer_than=newer_than,
        error=error,
        now=now,
    )
    page = PageRequest(limit=limit, next_token=next_token, max_pages=max_pages)
    if waiters:
        rows_found: ScanResult[DependencyRow] = scanned(lambda: scan_waiters(target, wanted, page))
        _show(
            "waiters",
            rows_found,
            [_waiter_json(row) for row in rows_found.rows],
            lambda: _waiter_table(rows_found.rows, now),
            json_output=json_output,
        )
    else:
        views: ScanResult[PayloadView] = scanned(lambda: target.payloads.scan(wanted, page))
        _show(
            "payloads",
            views,
            [view.to_json() for view in views.rows],
            lambda: _payload_table(views.rows, now),
            json_output=json_output,
        )


def _show(
    kind: str,
    found: ScanResult[Any],
    rows: list[dict[str, Any]],
    table: Callable[[], Table],
    *,
    json_output: bool,
) -> None:
    max_pages_note(found)
    if json_output:
        render.emit_json(
            {
                kind: rows,
                "next_token": found.next_token,
                "pages_scanned": found.pages,
                "max_pages_reached": found.max_pages_reached,
            }
        )
        return
    console = render.stdout()
    if not rows:
        console.print(f"no {kind} match" if found.next_token is None else f"no {kind} match yet")
    else:
        # The payload id (and a waiter's token hash) are copied into other commands.
        render.print_table(console, table(), keys=(0, 1) if kind == "waiters" else (0,))
    if found.next_token is not None:
        console.print(f"more remain: --next-token {found.next_token}", soft_wrap=True)


# ---------------------------------------------------------------- waiters

DependencyRow = WaiterItem | MembershipItem


def scan_waiters(
    target: Target, wanted: PayloadFilter, page: PageRequest
) -> ScanResult[DependencyRow]:
    """One page of waiter and join-membership rows ``wanted`` selects.

    A row's state is its dependency's as the row knows it; its age is how long
    it has waited (``created_at``); workflow and collection come from the id.
    """
    dependencies = target.dependencies

    def row(item: dict[str, Any]) -> DependencyRow | None:
        if is_bookkeeping_item(item):
            return None
        parsed = row_from_item(item)
        return parsed if isinstance(parsed, WaiterItem | MembershipItem) else None

    return scan_page(
        dependencies.client,
        dependencies.table_name,
        _DEPENDENCY_KEY,
        _waiter_expression(wanted),
        parse=row,
        keep=lambda found: _waiter_matches(wanted, found),
        page=page,
    )


def _waiter_expression(wanted: PayloadFilter) -> Expression:
    parts = time_filter_parts(wanted, updated="created_at")
    if wanted.states:
        keys = [f":state{index}" for index in range(len(wanted.states))]
        values = {
            key: {"S": state.value} for key, state in zip(keys, sorted(wanted.states), strict=True)
        }
        parts.append((f"#state IN ({', '.join(keys)})", {"#state": "workflow_state"}, values))
    if wanted.error is not None:
        parts.append(
            (
                "contains(#error, :error) OR contains(#cause, :error)",
                {"#error": "error", "#cause": "cause"},
                {":error": {"S": wanted.error}},
            )
        )
    return Expression.all_of(parts)


def _waiter_matches(wanted: PayloadFilter, row: DependencyRow) -> bool:
    if wanted.states and row.workflow_state not in wanted.states:
        return False
    if wanted.workflow is not None and workflow_of(row.payload_id) != wanted.workflow:
        return False
    if wanted.collection is not None:
        head = row.payload_id.partition("/workflow-")[0]
        if "/workflow-" not in row.payload_id or wanted.collection not in collections_of(head):
            return False
    if not within(row.created_at, wanted.older_than, wanted.newer_than):
        return False
    return wanted.error is None or any(
        wanted.error in text for text in (row.error, row.cause) if text
    )


def _waiter_json(row: DependencyRow) -> dict[str, Any]:
    common: dict[str, Any] = {
        "payload_id": row.payload_id,
        "state": row.workflow_state.value,
        "since": row.created_at,
        "resolved_at": row.resolved_at,
        "error": row.error,
        "cause": row.cause,
        "notified_at": row.notified_at,
    }
    if isinstance(row, MembershipItem):
        return {"kind": "join", "waiter": f"join:{row.join_id}", "join_id": row.join_id} | common
    return {
        "kind": "token",
        "waiter": redact_token(row.task_token),
        "waiter_payload_id": row.waiter_payload_id,
        "parent_execution": row.parent_execution,
    } | common


# ---------------------------------------------------------------- tables


def _payload_table(views: list[PayloadView], now: datetime) -> Table:
    table = Table(title=f"{len(views)} payload(s)")
    for column in ("payload", "state", "workflow", "attempt", "updated", "last error"):
        table.add_column(column)
    for view in views:
        table.add_row(
            render.plain(view.payload_id),
            render.styled(view.state.value),
            render.plain(view.workflow),
            render.plain(view.attempt),
            f"{render.age(view.updated_at, now)} ago" if view.updated_at else "—",
            render.clipped(error_text(view), 60),
        )
    return table


def _waiter_table(rows: list[DependencyRow], now: datetime) -> Table:
    table = Table(title=f"{len(rows)} waiter row(s)")
    for column in ("payload", "waiter", "state", "waiting", "waiting payload", "parent", "told"):
        table.add_column(column)
    for row in rows:
        shown = _waiter_json(row)
        parent = shown.get("parent_execution")
        table.add_row(
            render.plain(row.payload_id),
            render.plain(shown["waiter"]),
            render.styled(row.workflow_state.value),
            render.age(row.created_at, now),
            render.plain(shown.get("waiter_payload_id")),
            render.plain(execution_label(parent) if parent else None),
            "yes" if row.notified_at is not None else "no",
        )
    return table
