"""``dependency-tracker cirrus-params NAME``: sam deploy overrides beside a cirrus deployment."""

# No ``from __future__ import annotations``: Typer reads these annotations at runtime.

import shlex
from typing import Annotated

import typer

from dependency_tracker.core.settings import DEFAULT_CIRRUS_PAYLOAD_ROOT_PREFIX
from dependency_tracker_cli import render
from dependency_tracker_cli.cirrus_deployment import read_deployment, template_parameters
from dependency_tracker_cli.cirrus_lifecycle import expiry_warning
from dependency_tracker_cli.options import Json, aws_command
from dependency_tracker_cli.target import Target


@aws_command
def cirrus_params(
    target: Target,
    *,
    name: Annotated[str, typer.Argument(metavar="NAME", show_default=False)],
    json_output: Json = False,
) -> None:
    """Print the sam deploy --parameter-overrides for cirrus mode beside deployment NAME.

    Reads the cirrus-geo deployment's names from SSM as cirrus's FilmDrop deployment
    writes them (the pointer /cirrus/deployments/NAME, then the parameters under the
    path it names) and maps them onto the template's cirrus parameters. --prefix is the
    tracker's own Prefix, which CirrusPrefix must differ from. Exits 5 if there is no
    such deployment, 2 if its parameters are missing or the template would refuse one
    (nothing is deployed either way). Warns on stderr (still exit 0) when no lifecycle
    rule of cirrus's payload bucket expires ROOT/tmp/deptrack-forwarded/, where the
    tracker forwards large payloads, and says how to add one.

    Examples:
      dependency-tracker cirrus-params fd-myproject-dev --region us-west-2
      dependency-tracker cirrus-params cirrus-prod --json
    """
    variables = read_deployment(target.client("ssm"), name)
    region = str(target.client("ssm").meta.region_name)
    parameters = template_parameters(name, variables, region=region, prefix=target.prefix)
    root = parameters.get("CirrusPayloadRootPrefix", DEFAULT_CIRRUS_PAYLOAD_ROOT_PREFIX)
    warning = expiry_warning(target.client("s3"), parameters["CirrusPayloadBucketName"], root)
    warnings = [] if warning is None else [warning]
    notes = render.stderr()
    for text in warnings:
        notes.print(f"[yellow]warning:[/] {render.escape_line(text)}", soft_wrap=True)
    overrides = " ".join(shlex.quote(f"{key}={value}") for key, value in parameters.items())
    command = f"sam deploy --parameter-overrides {overrides}"
    if json_output:
        render.emit_json(
            {
                "deployment": name,
                "parameters": parameters,
                "overrides": overrides,
                "command": command,
                "warnings": warnings,
            }
        )
        return
    lines = [f"{shlex.quote(f'{key}={value}')}" for key, value in parameters.items()]
    print("sam deploy --parameter-overrides \\")
    print(" \\\n".join(f"  {line}" for line in lines))
