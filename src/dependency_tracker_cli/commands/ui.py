"""``dependency-tracker ui``: a read-only page of payloads, waits, joins and the wait graph."""

# No ``from __future__ import annotations``: Typer reads these annotations at runtime.

from typing import Annotated

import typer

from dependency_tracker_cli import render
from dependency_tracker_cli.options import aws_command
from dependency_tracker_cli.readmodel import CirrusPrefix, CirrusStateTableName
from dependency_tracker_cli.target import Target

DEFAULT_PORT = 4700


@aws_command
def ui(
    target: Target,
    *,
    port: Annotated[
        int, typer.Option(min=0, max=65535, help="Port to listen on (0: any free port).")
    ] = DEFAULT_PORT,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    refresh: Annotated[
        int, typer.Option(min=1, metavar="SECONDS", help="Refresh the page every SECONDS.")
    ] = 5,
    stuck_after: Annotated[
        str,
        typer.Option(
            metavar="DURATION", help="A parent waiting longer is stuck, e.g. 90s, 30m, 1h."
        ),
    ] = "1h",
    cirrus_prefix: CirrusPrefix = None,
    cirrus_state_table: CirrusStateTableName = None,
) -> None:
    """Serve a read-only page of the tracker's state until Ctrl-C.

    Payload counts by state, parents waiting and on what, joins with their
    progress, stuck parents with reasons and causes, and the wait graph drawn as
    SVG; long sections are paged. The page refreshes itself every few seconds.

    Examples:
      dependency-tracker ui --endpoint-url http://127.0.0.1:4600
      dependency-tracker ui --stack-name deptrack --port 8080
    """
    # Flask only when serving: the other commands start without it.
    from dependency_tracker_cli.ui.app import Settings, create_app, page_server  # noqa: PLC0415

    target.use_cirrus(prefix=cirrus_prefix, state_table=cirrus_state_table)
    try:
        threshold = render.parse_duration(stuck_after)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="'--stuck-after'") from exc
    # Fail now, with the usual one-line error, rather than on the first page load.
    target.client("dynamodb").describe_table(TableName=target.names.dependency_table)
    app = create_app(target, Settings(refresh_seconds=refresh, stuck_after=threshold))
    server = page_server(app, host, port)
    render.stdout().print(f"ui: http://{host}:{server.server_port}/ (Ctrl-C stops)")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
