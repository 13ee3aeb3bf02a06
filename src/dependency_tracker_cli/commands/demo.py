"""``dependency-tracker demo``: the whole system on the embedded stack, with every outcome."""

from __future__ import annotations

import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

from dependency_tracker_cli.render import STATE_STYLE

if TYPE_CHECKING:
    # The local extra (moto) is imported only when the demo runs: every other command must
    # start without it, and fast (importing moto costs seconds).
    from dependency_tracker_local.demo import ParentStatus, Report, Scenario, Snapshot


def demo(
    *,
    parents: Annotated[
        int, typer.Option(min=0, max=50, help="Random parents added to the fixed cases.")
    ] = 4,
    dependencies: Annotated[
        int, typer.Option(min=1, max=10, help="Dependencies per random parent.")
    ] = 3,
    seed: Annotated[int, typer.Option(help="Seed of the random parents.")] = 7,
    join_members: Annotated[
        int | None,
        typer.Option(
            min=0,
            max=1000,
            help="Members of the all-of join (0 leaves it out; default 200, 20 with --cirrus).",
        ),
    ] = None,
    live: Annotated[bool, typer.Option(help="Show a live display while it runs.")] = True,
    cirrus: Annotated[
        bool,
        typer.Option(
            "--cirrus",
            help="Cirrus mode: cirrus-geo 2.0.0's own Lambdas run every payload "
            "(needs cirrus-geo installed, Python >= 3.12: make demo-cirrus).",
        ),
    ] = False,
) -> None:
    """Run the whole system on the embedded stack and show what every parent did.

    Exits 1 if any parent or dependency ended otherwise than its story says.

    Examples:
      dependency-tracker demo
      dependency-tracker demo --parents 10 --dependencies 4 --seed 3 --join-members 50
      dependency-tracker demo --cirrus
    """
    # The local extra, imported only when the demo runs (see TYPE_CHECKING above).
    from dependency_tracker_local import EmbeddedStack  # noqa: PLC0415
    from dependency_tracker_local.cirrus import cirrus_logs_to  # noqa: PLC0415
    from dependency_tracker_local.demo import build_scenario, run_scenario  # noqa: PLC0415
    from dependency_tracker_local.demo_cirrus import build_cirrus_scenario  # noqa: PLC0415

    console = Console(file=sys.stdout)
    if not console.is_terminal:
        console.width = max(console.width, 140)
    if cirrus:
        scenario = build_cirrus_scenario(
            parents=parents,
            dependencies=dependencies,
            seed=seed,
            join_members=20 if join_members is None else join_members,
        )
    else:
        scenario = build_scenario(
            parents=parents,
            dependencies=dependencies,
            seed=seed,
            join_members=200 if join_members is None else join_members,
        )
    log_path = Path(tempfile.gettempdir()) / "dependency-tracker-demo.log"
    mode = " beside cirrus-geo (its own Lambdas run every payload)" if cirrus else ""
    console.print(
        f"[bold]dependency-tracker demo[/]{mode}: {len(scenario.parents)} parents, "
        f"{len(scenario.dependencies)} dependencies (seed {seed}); handler logs in {log_path}"
    )
    started = time.monotonic()
    with (
        log_path.open("w") as sink,
        EmbeddedStack(log_level="INFO", sink=sink, cirrus=cirrus) as stack,
        cirrus_logs_to(sink),
    ):
        if stack.cirrus is not None:
            stack.cirrus.create_test_workflows(stack.client)
        console.print(f"embedded stack up in {time.monotonic() - started:.1f} s")
        if live and console.is_terminal:
            with Live(console=console, refresh_per_second=8, transient=True) as display:
                report = run_scenario(
                    stack,
                    scenario,
                    on_progress=lambda snap: display.update(_progress(scenario, snap)),
                )
        else:
            report = run_scenario(stack, scenario)
    console.print(_final_table(scenario, report))
    console.print(f"wall time {time.monotonic() - started:.1f} s")
    if not report.ok:
        for problem in report.problems:
            console.print(f"[red]✗ {problem}[/]")
        raise typer.Exit(code=1)
    if cirrus:
        console.print(
            "[green]✓ every parent ended as expected; cirrus ran every payload once, "
            "and a second time only where the story asks (a fixed input, replace)[/]"
        )
        return
    console.print("[green]✓ every parent ended as expected; every dependency ran exactly once[/]")


def _styled(state: str | None) -> str:
    text = state or "—"
    style = STATE_STYLE.get(text, "")
    return f"[{style}]{text}[/]" if style else text


def _progress(scenario: Scenario, snap: Snapshot) -> Group:
    parents = Table(title=f"parents ({snap.elapsed:.1f} s)", expand=False)
    for column in ("parent", "waits on", "status", "waited"):
        parents.add_column(column)
    for status in snap.parents:
        waited = "" if status.waited is None else f"{status.waited:.1f} s"
        parents.add_row(
            status.parent.name, _waits(snap, status, ":"), _styled(status.status), waited
        )
    return Group(parents, _dependencies(scenario, snap, final=False))


MAX_LISTED = 6


def _waits(snap: Snapshot, status: ParentStatus, separator: str = " ") -> str:
    dependencies = status.parent.dependencies
    if len(dependencies) > MAX_LISTED:
        counts = Counter(_state_name(snap, d.item) or "PENDING" for d in dependencies)
        states = ", ".join(f"{count} {_styled(state)}" for state, count in sorted(counts.items()))
        return f"{len(dependencies)} members: {states}"
    return ", ".join(
        f"{d.item}{separator}{_styled(_state_name(snap, d.item))}" for d in dependencies
    )


def _did(status: ParentStatus) -> str:
    if status.status != "SUCCEEDED":
        return f"[red]took Catch, failed {status.error}[/]"
    if not status.parent.join or status.output is None:
        return "[green]resumed, SUCCEEDED[/]"
    summary = status.output["join"]
    # counts, not the lists: past its bound a summary carries no lists (summary_url instead)
    counts = summary["counts"]
    did = f"resumed: {counts['succeeded']}/{summary['total']} succeeded"
    if summary.get("winner"):
        did += f", winner {summary['winner'].rsplit('/', 1)[-1]}"
    if counts["pending"]:
        did += f", {counts['pending']} still running"
    return f"[green]{did}[/]"


def _state_name(snap: Snapshot, item: str) -> str | None:
    state = snap.states.get(item)
    return None if state is None else state.value


def _final_table(scenario: Scenario, report: Report) -> Group:
    snap = report.snapshot
    parents = Table(title="what every parent did")
    for column in ("parent", "story", "waited on", "parent did", "waited", "ok"):
        parents.add_column(column)
    for status in snap.parents:
        waited = "" if status.waited is None else f"{status.waited:.1f} s"
        ok = "[green]✓[/]" if status.as_expected else "[red]✗[/]"
        parents.add_row(
            status.parent.name, status.parent.story, _waits(snap, status), _did(status), waited, ok
        )
    return Group(parents, _dependencies(scenario, snap, final=True))


def _dependencies(scenario: Scenario, snap: Snapshot, *, final: bool) -> Table:
    table = Table(title="dependencies")
    for column in ("dependency", "final state" if final else "state", "executions"):
        table.add_column(column)
    if final:
        table.add_column("waiters")
    listed = [
        d
        for d in scenario.dependencies
        if any(d in p.dependencies and len(p.dependencies) <= MAX_LISTED for p in scenario.parents)
        or d in scenario.finished_before
    ]
    for dependency in listed:
        row = [
            dependency.item,
            _styled(_state_name(snap, dependency.item)),
            str(snap.executions.get(dependency.item, 0)),
        ]
        if final:
            row.append(str(snap.waiters.get(dependency.item, 0)))
        table.add_row(*row)
    return table
