"""``dependency-tracker``: operator and demo commands."""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

from dependency_tracker import __version__
from dependency_tracker.demo import Report, Scenario, Snapshot, build_scenario, run_scenario

app = typer.Typer(
    name="dependency-tracker",
    help="Event-driven dependency tracker for payload pipelines on AWS Step Functions.",
    no_args_is_help=True,
    add_completion=False,
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


@app.command()
def version() -> None:
    """Print the version."""
    print(__version__)


@app.command()
def demo(
    parents: Annotated[
        int, typer.Option(min=0, max=50, help="Random parents added to the fixed cases.")
    ] = 4,
    dependencies: Annotated[
        int, typer.Option(min=1, max=10, help="Dependencies per random parent.")
    ] = 3,
    seed: Annotated[int, typer.Option(help="Seed of the random parents.")] = 7,
    live: Annotated[bool, typer.Option(help="Show a live display while it runs.")] = True,
) -> None:
    """Run the whole system on the embedded stack and show what every parent did."""
    from dependency_tracker.local import LocalStack  # noqa: PLC0415  (needs the local extra)

    console = Console(file=sys.stdout)
    if not console.is_terminal:
        console.width = max(console.width, 140)
    scenario = build_scenario(parents=parents, dependencies=dependencies, seed=seed)
    log_path = Path(tempfile.gettempdir()) / "dependency-tracker-demo.log"
    console.print(
        f"[bold]dependency-tracker demo[/]: {len(scenario.parents)} parents, "
        f"{len(scenario.dependencies)} dependencies (seed {seed}); handler logs in {log_path}"
    )
    started = time.monotonic()
    with log_path.open("w") as sink, LocalStack(log_level="INFO", sink=sink) as stack:
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
        waits = ", ".join(
            f"{d.item}:{_styled(_state_name(snap, d.item))}" for d in status.parent.dependencies
        )
        waited = "" if status.waited is None else f"{status.waited:.1f} s"
        parents.add_row(status.parent.name, waits, _styled(status.status), waited)
    return Group(parents, _dependencies(scenario, snap, final=False))


def _state_name(snap: Snapshot, item: str) -> str | None:
    state = snap.states.get(item)
    return None if state is None else state.value


def _final_table(scenario: Scenario, report: Report) -> Group:
    snap = report.snapshot
    parents = Table(title="what every parent did")
    for column in ("parent", "story", "waited on", "parent did", "waited", "ok"):
        parents.add_column(column)
    for status in snap.parents:
        waits = ", ".join(
            f"{d.item} {_styled(_state_name(snap, d.item))}" for d in status.parent.dependencies
        )
        if status.status == "SUCCEEDED":
            did = "[green]resumed, SUCCEEDED[/]"
        else:
            did = f"[red]took Catch, failed {status.error}[/]"
        waited = "" if status.waited is None else f"{status.waited:.1f} s"
        ok = "[green]✓[/]" if status.as_expected else "[red]✗[/]"
        parents.add_row(status.parent.name, status.parent.story, waits, did, waited, ok)
    return Group(parents, _dependencies(scenario, snap, final=True))


def _dependencies(scenario: Scenario, snap: Snapshot, *, final: bool) -> Table:
    table = Table(title="dependencies")
    for column in ("dependency", "final state" if final else "state", "executions"):
        table.add_column(column)
    if final:
        table.add_column("waiters")
    for dependency in scenario.dependencies:
        row = [
            dependency.item,
            _styled(_state_name(snap, dependency.item)),
            str(snap.executions.get(dependency.item, 0)),
        ]
        if final:
            row.append(str(snap.waiters.get(dependency.item, 0)))
        table.add_row(*row)
    return table


def main() -> None:
    """Console entry point."""
    app()


if __name__ == "__main__":
    main()
