"""``dependency-tracker wait``: start a parent that waits on payloads, and follow it to its end.

The parent is one of the stack's own state machines: ``wait-for-dependencies``
(one task token per payload) or, with ``--join``/``--quorum``/``--manifest-url``,
``wait-for-join`` (one token for k of n). It publishes the payloads with its
tokens, the tracker runs each once (or replays it), and the parent resumes.
While it waits, ``waiters``, ``stuck`` and ``graph`` show it.
"""

# No ``from __future__ import annotations``: Typer reads these annotations at runtime.

import json
import secrets
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Annotated, Any

import typer
from pydantic import ValidationError
from rich.table import Table

from dependency_tracker.core.errors import (
    DependencyTrackerError,
    InvalidMessageError,
)
from dependency_tracker.payloads.model import ProcessPayload
from dependency_tracker_cli import io, render
from dependency_tracker_cli.options import Json, aws_command, fail
from dependency_tracker_cli.target import Target

SINGLE = "wait-for-dependencies"
JOIN = "wait-for-join"
# The deployed template's outputs naming the two parents (and serve's local stack's).
MACHINE_OUTPUTS = {
    SINGLE: "WaitForDependenciesStateMachineArn",
    JOIN: "WaitForJoinStateMachineArn",
}
# Step Functions: execution names are 1-80 characters.
MAX_NAME_CHARS = 80
_STOPPED_FOLLOWING = 130  # as a shell reports Ctrl-C


class ParentNotFoundError(DependencyTrackerError):
    """The stack has no such parent state machine (exit 4, as an unknown workflow)."""

    exit_code = 4


@dataclass
class Dependencies:
    """What the parent waits on: the entries it is given, and the ids known here."""

    entries: list[dict[str, Any]] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)
    workflows: set[str] = field(default_factory=set)


@aws_command
def wait(
    target: Target,
    *,
    sources: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="FILE|-...",
            help="JSON files (- for stdin): a payload, {url: s3://...}, or a JSON array of those.",
            show_default=False,
        ),
    ] = None,
    join: Annotated[
        bool,
        typer.Option(
            "--join", help="Wait with one token for all of them (wait-for-join), not one each."
        ),
    ] = False,
    quorum: Annotated[
        int | None,
        typer.Option(
            "--quorum",
            min=1,
            help="Resume once K succeeded (implies --join; 1: either-or; default: all).",
            metavar="K",
            show_default=False,
        ),
    ] = None,
    manifest_url: Annotated[
        str | None,
        typer.Option(
            "--manifest-url",
            help="Join the members of this manifest (s3://...; `publish --manifest` makes one) "
            "instead of FILEs; implies --join.",
            metavar="URL",
            show_default=False,
        ),
    ] = None,
    payload_id: Annotated[
        str | None,
        typer.Option(
            "--payload-id",
            help="The waiting payload's id: waiters, stuck and graph name the parent by it, and "
            "a wait that would close a cycle is refused.",
            show_default=False,
        ),
    ] = None,
    name: Annotated[
        str | None,
        typer.Option(
            "--name",
            help="Execution name (default: wait-<UTC time>-<random>).",
            show_default=False,
        ),
    ] = None,
    timeout_seconds: Annotated[
        int | None,
        typer.Option(
            "--timeout-seconds",
            min=1,
            help="The parent's callback timeout (default: the state machine's).",
            show_default=False,
        ),
    ] = None,
    follow: Annotated[
        bool,
        typer.Option(help="Show progress until the parent ends (--no-follow: start it and exit)."),
    ] = True,
    check_workflows: Annotated[
        bool,
        typer.Option(help="Refuse payloads whose workflow has no {prefix}-{workflow} machine."),
    ] = True,
    poll: Annotated[float, typer.Option(min=0.05, hidden=True)] = 0.5,
    json_output: Json = False,
) -> None:
    """Start a parent that waits on payloads, and follow it until it ends.

    The parent is the stack's wait-for-dependencies state machine (one task token
    per payload), or wait-for-join with --join, --quorum or --manifest-url (one
    token for k of n). It sends the payloads to the process queue with its
    tokens; the tracker runs each payload once, or replays a finished one, and
    answers. Exits 0 when the parent succeeded, 1 when it failed (with the
    tracker's error name), 3 for an invalid payload, 4 for an unknown workflow.

    Examples:
      dependency-tracker wait tile-1.json tile-2.json
      dependency-tracker wait tiles.json --quorum 2 --payload-id mosaic/1
      dependency-tracker wait slow.json --payload-id mosaic/1 --no-follow
      dependency-tracker wait --manifest-url s3://bucket/manifests/m.jsonl --timeout-seconds 3600
    """
    if manifest_url is not None and sources:
        fail("give FILE|- ... or --manifest-url, not both", 2)
    if manifest_url is None and not sources:
        fail("nothing to wait on: give FILE|- ... or --manifest-url URL", 2)
    if name is not None and not 1 <= len(name) <= MAX_NAME_CHARS:
        fail(f"--name must be 1 to {MAX_NAME_CHARS} characters", 2)
    machine = JOIN if join or quorum is not None or manifest_url is not None else SINGLE
    dependencies = _dependencies(target, sources or [])
    if check_workflows and dependencies.workflows:
        target.require_workflows(sorted(dependencies.workflows))
    document = _input(
        dependencies,
        manifest_url=manifest_url,
        quorum=quorum,
        payload_id=payload_id,
        timeout_seconds=timeout_seconds,
    )
    sfn = target.client("stepfunctions")
    started = sfn.start_execution(
        stateMachineArn=_machine_arn(target, machine),
        name=name or _default_name(),
        input=json.dumps(document),
    )
    execution_arn = str(started["executionArn"])
    notes = render.stderr()
    notes.print(f"started {machine}: {render.escape_line(execution_arn)}", soft_wrap=True)
    if not follow:
        _show_started(execution_arn, machine, payload_id, json_output=json_output)
        return
    try:
        described = _follow(target, execution_arn, dependencies.ids, poll=poll)
    except KeyboardInterrupt:
        fail(f"stopped following; the parent keeps running: {execution_arn}", _STOPPED_FOLLOWING)
    states = _states(target, dependencies.ids)
    _show_ended(described, machine, states, json_output=json_output)
    if described["status"] != "SUCCEEDED":
        reason = ": ".join(
            str(part) for part in (described.get("error"), described.get("cause")) if part
        )
        fail(f"parent {described['status']}" + (f": {reason}" if reason else ""))


def _input(
    dependencies: Dependencies,
    *,
    manifest_url: str | None,
    quorum: int | None,
    payload_id: str | None,
    timeout_seconds: int | None,
) -> dict[str, Any]:
    """The parent's input (the public contract of both parents); unset fields left out."""
    document: dict[str, Any] = (
        {"dependencies_url": manifest_url}
        if manifest_url is not None
        else {"dependencies": dependencies.entries}
    )
    optional = {"quorum": quorum, "payload_id": payload_id, "timeout_seconds": timeout_seconds}
    document.update({key: value for key, value in optional.items() if value is not None})
    return document


def _dependencies(target: Target, sources: list[str]) -> Dependencies:
    """Every entry of the files, checked: a process payload, or an ``{"url": ...}`` to one."""
    found = Dependencies()
    for source in sources:
        for where, entry in io.documents(source):
            if not isinstance(entry, dict):
                raise InvalidMessageError(f"{where}: expected a JSON object (a payload or {{url}})")
            document = entry
            if "url" in entry and "process" not in entry:
                # Read here only to check it and to know its id; the parent passes the url on.
                document = io.load_json(
                    target.bucket.read_url(str(entry["url"])), f"{where}: {entry['url']}"
                )
            try:
                payload = ProcessPayload.model_validate(document)
            except ValidationError as exc:
                errors = exc.errors(include_url=False, include_input=False)
                reason = "; ".join(
                    ".".join(["payload", *(str(part) for part in error["loc"])])
                    + f": {error['msg']}"
                    for error in errors
                )
                raise InvalidMessageError(f"{where}: {reason}") from exc
            found.entries.append(entry)
            found.ids.append(payload.id)
            found.workflows.add(payload.workflow)
    return found


def _machine_arn(target: Target, machine: str) -> str:
    """The parent's ARN: the stack's output with --stack-name, else found by its name."""
    from_outputs = target.outputs.get(MACHINE_OUTPUTS[machine])
    if from_outputs:
        return from_outputs
    wanted = f"{target.prefix}-{machine}"
    pages = target.client("stepfunctions").get_paginator("list_state_machines").paginate()
    for page in pages:
        for found in page["stateMachines"]:
            if found["name"] == wanted:
                return str(found["stateMachineArn"])
    raise ParentNotFoundError(
        f"no state machine {wanted} here (check --prefix, --stack-name and --region)"
    )


def _default_name() -> str:
    """``wait-20260101T120000Z-3f2a1c``: sortable, and unique enough for a person's runs."""
    return f"wait-{datetime.now(UTC):%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}"


def _follow(
    target: Target, execution_arn: str, payload_ids: list[str], *, poll: float
) -> dict[str, Any]:
    """``DescribeExecution`` once the parent stopped; progress on stderr meanwhile."""
    sfn = target.client("stepfunctions")
    with render.progress() as bar:
        task = bar.add_task("waiting", total=len(payload_ids) or None)
        while True:
            described: dict[str, Any] = sfn.describe_execution(executionArn=execution_arn)
            if described["status"] != "RUNNING":
                return described
            if payload_ids:
                states = _states(target, payload_ids)
                done = sum(1 for state in states.values() if state in _ENDED)
                bar.update(task, completed=done, description=f"{done} of {len(payload_ids)} ended")
            time.sleep(poll)


_ENDED = {"SUCCEEDED", "FAILED", "INVALID", "ABORTED"}


def _states(target: Target, payload_ids: list[str]) -> dict[str, str | None]:
    """Each payload's state now (None: no state item yet)."""
    items = target.states.batch_get(list(dict.fromkeys(payload_ids))) if payload_ids else {}
    return {pid: (items[pid].state.value if pid in items else None) for pid in payload_ids}


def _show_started(
    execution_arn: str, machine: str, payload_id: str | None, *, json_output: bool
) -> None:
    if json_output:
        render.emit_json(
            {"execution_arn": execution_arn, "state_machine": machine, "status": "RUNNING"}
        )
        return
    console = render.stdout()
    console.print(execution_arn, soft_wrap=True)
    parent = payload_id or execution_arn.rsplit(":", 1)[-1]
    render.stderr().print(
        f"while it waits: dependency-tracker graph --root {parent!r}; "
        "dependency-tracker stuck --older-than 10s",
        soft_wrap=True,
    )


def _show_ended(
    described: dict[str, Any],
    machine: str,
    states: dict[str, str | None],
    *,
    json_output: bool,
) -> None:
    output = json.loads(described["output"]) if described.get("output") else None
    if json_output:
        render.emit_json(
            {
                "execution_arn": described["executionArn"],
                "name": described.get("name"),
                "state_machine": machine,
                "status": described["status"],
                "started": described.get("startDate"),
                "stopped": described.get("stopDate"),
                "error": described.get("error"),
                "cause": described.get("cause"),
                "output": output,
                "dependencies": [
                    {"payload_id": pid, "state": state} for pid, state in states.items()
                ],
            }
        )
        return
    console = render.stdout()
    card = Table(title=f"parent {described.get('name', '')}", show_header=False)
    card.add_column("field")
    card.add_column("value")
    card.add_row("status", render.styled(described["status"]))
    card.add_row("execution", render.plain(described["executionArn"]))
    card.add_row("state machine", machine)
    if isinstance(output, dict) and isinstance(output.get("join"), dict):
        counts = output["join"].get("counts", {})
        card.add_row("join", ", ".join(f"{key} {value}" for key, value in counts.items()))
        if output["join"].get("winner"):
            card.add_row("winner", render.plain(output["join"]["winner"]))
    if described.get("error"):
        card.add_row("error", render.plain(described["error"]))
        card.add_row("cause", render.clipped(described.get("cause"), 200))
    render.print_table(console, card, keys=(1,))
    if states:
        table = Table(title="dependencies")
        table.add_column("payload id")
        table.add_column("state")
        for pid, state in states.items():
            table.add_row(render.plain(pid), render.styled(state))
        render.print_table(console, table, keys=(0,))
