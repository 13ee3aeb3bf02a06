"""``dependency-tracker``: operator and demo commands (one module each in ``commands/``)."""

from __future__ import annotations

from typing import Annotated

import typer

from dependency_tracker import __version__
from dependency_tracker_cli.commands import (
    demo,
    graph,
    publish,
    redrive,
    serve,
    status,
    stuck,
    wait,
    waiters,
)

app = typer.Typer(
    name="dependency-tracker",
    help="Event-driven dependency tracker for payload pipelines on AWS Step Functions.",
    no_args_is_help=True,
    add_completion=False,
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


@app.command()
def version() -> None:
    """Print the version (as --version does)."""
    print(__version__)


app.command()(demo.demo)
app.command()(serve.serve)
app.command()(publish.publish)
app.command()(wait.wait)
app.command()(status.status)
app.command()(waiters.waiters)
app.command()(graph.graph)
app.command()(stuck.stuck)
app.command()(redrive.redrive)


def main() -> None:
    """Console entry point."""
    app()


if __name__ == "__main__":
    main()
