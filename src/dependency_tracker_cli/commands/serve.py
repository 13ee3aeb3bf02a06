"""``dependency-tracker serve``: the embedded stack behind a local AWS endpoint."""

# No ``from __future__ import annotations``: Typer reads these annotations at runtime.

import contextlib
import importlib.metadata
import json
import os
import shlex
import signal
import sys
import tempfile
import threading
import warnings
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from dependency_tracker.core import settings
from dependency_tracker_cli import hints, render
from dependency_tracker_cli.options import ENV_STACK_NAME, Json, Prefix, fail, reported_errors

# 4566 is the LocalStack product's port (and 4510-4559 its services'): serve must not collide.
DEFAULT_PORT = 4600
_TMP = Path(tempfile.gettempdir())
DEFAULT_OUTPUTS_FILE = _TMP / "dependency-tracker-serve.json"
DEFAULT_LOG_FILE = _TMP / "dependency-tracker-serve.log"


def serve(
    *,
    port: Annotated[
        int, typer.Option(min=0, max=65535, help="Port to listen on (0: any free port).")
    ] = DEFAULT_PORT,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    prefix: Prefix = settings.DEFAULT_PREFIX,
    region: Annotated[str, typer.Option(help="Region of the local resources.")] = "us-east-1",
    outputs_file: Annotated[
        Path, typer.Option(help="Where to write the outputs (JSON); removed on exit.")
    ] = DEFAULT_OUTPUTS_FILE,
    log_file: Annotated[
        Path, typer.Option(help="Where the handlers' logs and metrics go.")
    ] = DEFAULT_LOG_FILE,
    log_level: Annotated[str, typer.Option(help="Log level of the handlers.")] = "INFO",
    strict: Annotated[
        bool,
        typer.Option(
            help="Refuse what AWS would refuse (sizes, names, batch limits; docs/local.md)."
        ),
    ] = True,
    stack_name: Annotated[
        str | None,
        typer.Option(
            "--stack-name",
            envvar=ENV_STACK_NAME,
            help="Name of the local CloudFormation stack holding the outputs, for other "
            "commands' --stack-name (default: the prefix).",
            show_default=False,
        ),
    ] = None,
    cirrus: Annotated[
        bool,
        typer.Option(
            "--cirrus",
            help="Cirrus mode: beside a local cirrus-geo (prefix cirrus) whose own Lambdas run "
            "every payload (needs cirrus-geo, Python >= 3.12: .venv-cirrus).",
        ),
    ] = False,
    json_output: Json = False,
) -> None:
    """Run the embedded stack behind a local AWS-compatible endpoint until Ctrl-C.

    moto serves SQS, DynamoDB (with streams), S3, Step Functions (executing
    state machines) and CloudFormation on the endpoint; the pumps feed the
    handlers. Any program can use it with boto3 or the AWS CLI and the printed
    endpoint. A state machine created later as {prefix}-{workflow} is managed
    at once. The outputs are also a CloudFormation stack on the endpoint
    (--stack-name, default the prefix), with the deployed template's output
    names, so --stack-name works against serve as against AWS. With --cirrus
    the tracker runs in cirrus mode beside a local cirrus-geo deployment (its
    test workflows cirrus-succeed, cirrus-fail, ... created), and the outputs
    hold cirrus's names too (CirrusStateTableName, ...).

    Examples:
      dependency-tracker serve
      dependency-tracker serve --port 4600 --prefix mine --outputs-file outputs.json
      .venv-cirrus/bin/dependency-tracker serve --cirrus
    """
    try:
        from dependency_tracker_local import EmbeddedStack  # noqa: PLC0415  (the local extra)
        from dependency_tracker_local.cirrus import CirrusUnavailableError  # noqa: PLC0415
    except ImportError as exc:
        fail(f"serve needs the local extra (pip install 'dependency-tracker[local]'): {exc}")
    if cirrus:
        _require_cirrus()

    stop = threading.Event()
    previous = (
        {
            number: signal.signal(number, lambda *_: stop.set())
            for number in (signal.SIGINT, signal.SIGTERM)
        }
        if threading.current_thread() is threading.main_thread()
        else {}  # signals reach the main thread only; it stops with the process
    )
    notes = render.stderr()
    try:
        with reported_errors(), log_file.open("w", encoding="utf-8") as sink:
            stack = EmbeddedStack(
                prefix=prefix,
                region=region,
                port=port,
                host=host,
                log_level=log_level,
                sink=sink,
                strict=strict,
                cirrus=cirrus,
            )
            try:
                stack.start()
            except OSError as exc:
                fail(f"cannot listen on {host}:{port}: {exc.strerror or exc}")
            except CirrusUnavailableError as exc:
                # Its first clause: the whole message repeats the hint over several sentences.
                fail(f"serve --cirrus: {str(exc).split(': ', 1)[0]}", 2, hint=_CIRRUS_HINT)
            try:
                if stack.cirrus is not None:
                    stack.cirrus.create_test_workflows(stack.client)
                outputs = dict(stack.outputs)
                outputs["StackName"] = stack_name or prefix
                outputs["LogFile"] = str(log_file.resolve())  # where `logs` reads
                register_stack(stack.client("cloudformation"), outputs["StackName"], outputs)
                _write_atomically(outputs_file, outputs)
                example = example_payload_file(outputs_file)
                _write_atomically(example, example_payload(cirrus=cirrus))
                _show(outputs, example, json_output=json_output)
                notes.print(
                    f"outputs in {outputs_file}, handler logs in {log_file}; serving until Ctrl-C",
                    soft_wrap=True,
                )
                with _cirrus_logs(sink, on=cirrus):
                    while not stop.wait(1.0):
                        pass
            finally:
                stack.stop()
                outputs_file.unlink(missing_ok=True)
                example_payload_file(outputs_file).unlink(missing_ok=True)
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
    notes.print("stopped")


_CIRRUS_HINT = (
    "make venv-cirrus, then run .venv-cirrus/bin/dependency-tracker serve --cirrus "
    "(cirrus-geo 2.0.0 needs Python >= 3.12)"
)


def _require_cirrus() -> None:
    """Exit 2 with a hint when cirrus-geo is not installed (before starting anything)."""
    try:
        importlib.metadata.version("cirrus-geo")
    except importlib.metadata.PackageNotFoundError:
        fail(
            f"serve --cirrus runs cirrus-geo's own Lambdas: cirrus-geo is not installed in "
            f"{sys.executable}",
            2,
            hint=_CIRRUS_HINT,
        )


def _cirrus_logs(sink: Any, *, on: bool) -> contextlib.AbstractContextManager[None]:
    """Send cirrus's log lines to the log file, as the handlers' go (cirrus logs to stderr)."""
    if not on:
        return contextlib.nullcontext()
    from dependency_tracker_local.cirrus import cirrus_logs_to  # noqa: PLC0415  (the local extra)

    return cirrus_logs_to(sink)


def template_outputs(outputs: dict[str, Any]) -> dict[str, str]:
    """The local outputs under the names ``template.yaml`` gives them.

    Text outputs keep their names; each state machine ``name`` becomes
    ``{CamelName}StateMachineArn`` (``wait-for-join``: ``WaitForJoinStateMachineArn``).
    """
    named = {
        key: str(value)
        for key, value in outputs.items()
        if isinstance(value, str) and key not in {"EndpointUrl", "StackName"}
    }
    for name, arn in outputs.get("StateMachines", {}).items():
        camel = "".join(part.capitalize() for part in name.split("-"))
        named[f"{camel}StateMachineArn"] = str(arn)
    return named


def register_stack(cloudformation: Any, stack_name: str, outputs: dict[str, Any]) -> None:
    """Create a CloudFormation stack on the local endpoint whose outputs are the stack's.

    ``DescribeStacks`` then answers ``--stack-name`` locally the way it does for a
    deployed stack. Its only resource is a ``WaitConditionHandle``, which
    CloudFormation (and moto) create without touching anything.
    """
    template = {
        "Description": "dependency-tracker serve: the embedded stack's outputs",
        "Resources": {"Outputs": {"Type": "AWS::CloudFormation::WaitConditionHandle"}},
        "Outputs": {key: {"Value": value} for key, value in template_outputs(outputs).items()},
    }
    # moto notes that it models no WaitConditionHandle, which is the point here.
    warnings.filterwarnings("ignore", message="Tried to parse AWS::CloudFormation::WaitCondition")
    cloudformation.create_stack(StackName=stack_name, TemplateBody=json.dumps(template))


def _write_atomically(path: Path, outputs: dict[str, Any]) -> None:
    """Write the outputs so a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_text(json.dumps(outputs, indent=2) + "\n", encoding="utf-8")
    partial.replace(path)


def example_payload_file(outputs_file: Path) -> Path:
    """Where ``serve`` writes the payload its "try:" hint publishes: beside the outputs."""
    return outputs_file.with_name(f"{outputs_file.stem}-example-payload.json")


def example_payload(*, cirrus: bool) -> dict[str, Any]:
    """A payload that runs as printed: ``simulate`` for 2 s (cirrus mode: cirrus's ``succeed``)."""
    if cirrus:
        process = {"workflow": "succeed", "upload_options": {}, "tasks": {}}
    else:
        process = {"workflow": "simulate", "tasks": {"simulate": {"seconds": 2}}}
    return {
        "type": "FeatureCollection",
        "features": [{"type": "Feature", "id": "example-1", "collection": "s2"}],
        "process": [process],
    }


def _show(outputs: dict[str, Any], example: Path, *, json_output: bool) -> None:
    if json_output:
        render.emit_json(outputs)
    else:
        table = Table(title="dependency-tracker serve: stack outputs")
        table.add_column("output")
        table.add_column("value")
        for key, value in outputs.items():
            if key == "StateMachines":
                continue
            table.add_row(key, render.plain(value))
        for name, arn in outputs.get("StateMachines", {}).items():
            table.add_row(f"StateMachines.{name}", render.plain(arn))
        console = render.stdout()
        render.print_table(console, table, keys=(0, 1))
        endpoint, queue = outputs["EndpointUrl"], outputs["ProcessQueueUrl"]
        publish = hints.command("publish", str(example), "--wait", "--endpoint-url", endpoint)
        body = shlex.quote(f"file://{example}")
        console.print(
            f"try: {publish}\n"
            f"     aws --endpoint-url {endpoint} sqs send-message --queue-url {queue} "
            f"--message-body {body}",
            soft_wrap=True,
        )
        if "CirrusStateTableName" in outputs:
            console.print(
                "     "
                + hints.command(
                    "status", "ID", "--endpoint-url", endpoint, "--stack-name", outputs["StackName"]
                )
                + "   (payload state from cirrus's state table)",
                soft_wrap=True,
            )
    sys.stdout.flush()
