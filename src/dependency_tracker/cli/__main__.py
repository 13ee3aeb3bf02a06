"""``dependency-tracker``: operator and demo commands (one module each in ``commands/``)."""

from __future__ import annotations

import typer

from dependency_tracker import __version__
from dependency_tracker.cli.commands import (
    demo,
    graph,
    publish,
    redrive,
    serve,
    status,
    stuck,
    waiters,
)

app = typer.Typer(
    name="dependency-tracker",
    help="Event-driven dependency tracker for payload pipelines on AWS Step Functions.",
    no_args_is_help=True,
    add_completion=False,
)


@app.command()
def version() -> None:
    """Print the version."""
    print(__version__)


app.command()(demo.demo)
app.command()(serve.serve)
app.command()(publish.publish)
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
