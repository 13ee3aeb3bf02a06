"""``dependency-tracker stuck``: parents waiting too long, and the dependencies holding them."""

# No ``from __future__ import annotations``: Typer reads these annotations at runtime.

from datetime import datetime, timedelta
from typing import Annotated

import typer
from rich.table import Table

from dependency_tracker.core.enums import utcnow
from dependency_tracker_cli import render
from dependency_tracker_cli.commands.graph import load_graph
from dependency_tracker_cli.options import Json, aws_command
from dependency_tracker_cli.readmodel import CirrusPrefix, CirrusStateTableName
from dependency_tracker_cli.target import Target
from dependency_tracker_cli.waitgraph import StuckParent, describe_parents, failure_of


@aws_command
def stuck(
    target: Target,
    *,
    older_than: Annotated[
        str, typer.Option(metavar="DURATION", help="Threshold, e.g. 90s, 30m, 1h30m, 2d.")
    ] = "1h",
    include_ended: Annotated[
        bool,
        typer.Option(
            "--all",
            help="Also list parents whose execution ended or is gone (their rows hold nobody).",
        ),
    ] = False,
    json_output: Json = False,
    cirrus_prefix: CirrusPrefix = None,
    cirrus_state_table: CirrusStateTableName = None,
) -> None:
    """List parents waiting longer than a threshold, and what holds each of them.

    Only parents whose execution still runs are listed (one DescribeExecution per
    parent); --all adds the others once each, with "parent ended: STATUS" (GONE: no
    such execution; UNKNOWN: the row names none). In cirrus mode a dependency's state
    and reason come from cirrus-geo's state table.

    Examples:
      dependency-tracker stuck --older-than 30m
      dependency-tracker stuck --older-than 1d --all
      dependency-tracker stuck --stack-name deptrack --older-than 2h --json
      dependency-tracker stuck --older-than 10m --cirrus-prefix cirrus
    """
    target.use_cirrus(prefix=cirrus_prefix, state_table=cirrus_state_table)
    try:
        threshold = render.parse_duration(older_than)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="'--older-than'") from exc
    now = utcnow()
    waiting = load_graph(target, include_done=False).stuck(now - threshold)
    arns = [arn for parent in waiting if (arn := parent.parent.parent_arn)]
    runs = describe_parents(target.client("stepfunctions"), arns)
    for parent in waiting:
        arn = parent.parent.parent_arn
        parent.parent.run = runs.get(arn) if arn else None
    parents = [parent for parent in waiting if include_ended or parent.run.running]
    hidden = len(waiting) - len(parents)
    if json_output:
        render.emit_json(
            {
                "now": now.isoformat(),
                "older_than_seconds": int(threshold.total_seconds()),
                "hidden_ended": hidden,
                "parents": [parent.to_json(now) for parent in parents],
            }
        )
        return
    console = render.stdout()
    if not parents:
        running = "running " if hidden else ""
        console.print(
            f"no {running}parent has waited longer than {render.duration_text(threshold)}"
        )
    else:
        render.print_table(console, _table(parents, now, threshold), keys=(0, 2))
    if hidden:
        render.stderr().print(
            f"{hidden} parent(s) whose execution ended not listed (--all lists them)"
        )


def _table(parents: list[StuckParent], now: datetime, older_than: timedelta) -> Table:
    table = Table(
        title=f"{len(parents)} parent(s) waiting longer than {render.duration_text(older_than)}"
    )
    for column in ("parent", "waiting", "dependency", "state", "attempt", "why", "last error"):
        table.add_column(column)
    for parent in parents:
        if parent.reason is not None:  # ended: its rows hold nobody, shown once
            run = parent.run
            failure = failure_of(run, None, None)
            table.add_row(
                render.plain(parent.parent.label),
                render.age(parent.since, now),
                "—",
                render.styled(run.status),
                "—",
                render.plain(parent.reason),
                render.clipped(None if failure is None else failure.text()),
                end_section=True,
            )
            continue
        first = True
        for hold in parent.holds:
            dependency = hold.dependency
            name = dependency.label if hold.join is None else f"{dependency.label} (via join)"
            view = dependency.payload
            table.add_row(
                render.plain(parent.parent.label) if first else "",
                render.age(parent.since, now) if first else "",
                render.plain(name),
                render.styled(dependency.state),
                render.plain(None if view is None else view.attempt),
                render.plain(hold.reason),
                render.clipped(None if hold.failure is None else hold.failure.text()),
                end_section=hold is parent.holds[-1],
            )
            first = False
    return table
