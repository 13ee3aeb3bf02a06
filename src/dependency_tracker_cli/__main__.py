"""``dependency-tracker``: operator and demo commands (one module each in ``commands/``)."""

from __future__ import annotations

from typing import Annotated

import typer

from dependency_tracker import __version__
from dependency_tracker_cli.commands import (
    cirrus_params,
    demo,
    follow,
    graph,
    list_cmd,
    logs,
    publish,
    redrive,
    release,
    rerun,
    serve,
    status,
    stuck,
    ui,
    wait,
    waiters,
    why,
)
from dependency_tracker_cli.options import Command, Group

app = typer.Typer(
    name="dependency-tracker",
    help="Event-driven dependency tracker for payload pipelines on AWS Step Functions.",
    no_args_is_help=True,
    add_completion=False,
    cls=Group,
)


def _print_version(value: bool) -> None:
    if value:
        print(__version__)
        raise typer.Exit


@app.callback()
def _root(
    _version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_print_version,
            is_eager=True,  # before the command is looked for: `--version` alone is enough
            help="Print the version and exit.",
        ),
    ] = False,
) -> None:
    """Event-driven dependency tracker for payload pipelines on AWS Step Functions."""


@app.command(cls=Command)
def version() -> None:
    """Print the version (as --version does)."""
    print(__version__)


app.command(cls=Command)(demo.demo)
app.command(cls=Command)(serve.serve)
app.command(cls=Command)(publish.publish)
app.command(cls=Command)(wait.wait)
app.command(cls=Command)(follow.follow)
app.command(cls=Command)(status.status)
app.command(cls=Command)(waiters.waiters)
app.command(cls=Command)(why.why)
app.command(cls=Command)(graph.graph)
app.command(cls=Command)(stuck.stuck)
app.command(cls=Command)(redrive.redrive)
app.command(cls=Command)(release.release)
app.command(name="list", cls=Command)(list_cmd.list_payloads)
app.command(cls=Command)(rerun.rerun)
app.command(cls=Command)(logs.logs)
app.command(cls=Command)(ui.ui)
app.command(name="cirrus-params", cls=Command)(cirrus_params.cirrus_params)


def main() -> None:
    """Console entry point."""
    app()


if __name__ == "__main__":
    main()
