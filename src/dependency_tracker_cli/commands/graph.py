"""``dependency-tracker graph``: the wait-for graph, as mermaid, dot or JSON."""

# No ``from __future__ import annotations``: Typer reads these annotations at runtime.

from enum import StrEnum
from typing import Annotated

import typer

from dependency_tracker.core.errors import PayloadNotFoundError
from dependency_tracker_cli import render
from dependency_tracker_cli.options import Json, aws_command
from dependency_tracker_cli.readmodel import CirrusPrefix, CirrusStateTableName
from dependency_tracker_cli.target import Target
from dependency_tracker_cli.waitgraph import WaitGraph, describe_parents


class GraphFormat(StrEnum):
    """Output formats of ``graph``."""

    MERMAID = "mermaid"
    DOT = "dot"
    JSON = "json"


@aws_command
def graph(
    target: Target,
    *,
    root: Annotated[
        str | None,
        typer.Option(
            help="Only what this payload (or join id, or parent execution) waits on and who "
            "waits on it."
        ),
    ] = None,
    output_format: Annotated[
        GraphFormat, typer.Option("--format", help="mermaid, dot (Graphviz) or json.")
    ] = GraphFormat.MERMAID,
    include_done: Annotated[
        bool, typer.Option("--all", help="Include waits that are over (parent notified).")
    ] = False,
    json_output: Json = False,
    cirrus_prefix: CirrusPrefix = None,
    cirrus_state_table: CirrusStateTableName = None,
) -> None:
    """Print the wait-for graph: parents → dependencies, nodes coloured by state.

    Cycles (payloads that wait on each other) are outlined and listed on stderr.
    In cirrus mode the payloads' states are cirrus-geo's. A failed payload or wait
    shows its error and cause (short in labels, whole in JSON); a parent told a
    failure shows its execution's own (one DescribeExecution per such parent).

    Examples:
      dependency-tracker graph
      dependency-tracker graph --root ID --format dot | dot -Tsvg > why.svg
      dependency-tracker graph --all --json
      dependency-tracker graph --format json --cirrus-prefix cirrus
    """
    target.use_cirrus(prefix=cirrus_prefix, state_table=cirrus_state_table)
    whole = load_graph(target, include_done=include_done)
    shown = whole
    if root is not None:
        node = whole.find(root)
        if node is None:
            raise PayloadNotFoundError(f"{root} (nothing waits on it and it waits on nothing)")
        shown = whole.around(node)
    shown.set_parent_runs(describe_parents(target.client("stepfunctions"), shown.failed_parents()))
    if json_output or output_format is GraphFormat.JSON:
        render.emit_json(shown.to_json())
    elif output_format is GraphFormat.DOT:
        typer.echo(shown.to_dot())
    else:
        typer.echo(shown.to_mermaid())
    notes = render.stderr()
    for group in shown.cycles():
        labels = [shown.nodes[node_id].label for node_id in group]
        notes.print(f"[red]cycle:[/] {render.escape_line(' ⇄ '.join(labels))}", soft_wrap=True)


def load_graph(target: Target, *, include_done: bool) -> WaitGraph:
    """Scan the dependency table and colour the payloads with their states (either mode's)."""
    rows = []
    with render.progress(total_label=False) as bar:
        task = bar.add_task("reading the dependency table", total=None)
        for page in target.dependencies.scan_pages(unnotified_only=not include_done):
            rows.extend(page)
            bar.update(task, description=f"reading the dependency table ({len(rows)} rows)")
        built = WaitGraph.from_rows(rows, include_done=include_done)
        bar.update(task, description="reading payload states")
        reader = target.payloads
        built.set_states(reader.get_many(built.payload_ids()), source=reader.source)
    return built
