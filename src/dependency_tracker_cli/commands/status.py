"""``dependency-tracker status``: state, attempts, executions, last error, stored result."""

# No ``from __future__ import annotations``: Typer reads these annotations at runtime.

from typing import Annotated

import typer

from dependency_tracker.core.errors import PayloadNotFoundError
from dependency_tracker_cli import render
from dependency_tracker_cli.options import Json, aws_command
from dependency_tracker_cli.readmodel import CirrusPrefix, CirrusStateTableName
from dependency_tracker_cli.target import Target
from dependency_tracker_cli.views import payload_card, payload_json


@aws_command
def status(
    target: Target,
    *,
    payload_ids: Annotated[list[str], typer.Argument(metavar="PAYLOAD_ID...", show_default=False)],
    json_output: Json = False,
    cirrus_prefix: CirrusPrefix = None,
    cirrus_state_table: CirrusStateTableName = None,
) -> None:
    """Show payloads: state, attempts, executions, last error and stored result.

    In cirrus mode (--cirrus-prefix, or a stack with cirrus outputs) the state is
    cirrus-geo's, from its state table. Exits 5 if a payload id is unknown (after
    showing the others).

    Examples:
      dependency-tracker status sentinel-2-l2a/workflow-simulate/tile-1
      dependency-tracker status ID1 ID2 --json
      dependency-tracker status "$(cat id.txt)" --stack-name deptrack
      dependency-tracker status s2/workflow-cog/tile-1 --cirrus-prefix cirrus
    """
    target.use_cirrus(prefix=cirrus_prefix, state_table=cirrus_state_table)
    found = target.payloads.get_many(payload_ids)
    rows = [(payload_id, found.get(payload_id)) for payload_id in dict.fromkeys(payload_ids)]
    if json_output:
        render.emit_json([payload_json(payload_id, item) for payload_id, item in rows])
    else:
        console = render.stdout()
        for payload_id, item in rows:
            render.print_table(console, payload_card(payload_id, item), keys=())
    missing = [payload_id for payload_id, item in rows if item is None]
    if missing:
        raise PayloadNotFoundError(", ".join(missing))
