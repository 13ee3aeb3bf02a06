"""``dependency-tracker follow``: show a parent's progress to its end, and how it ended.

A parent is an execution of the stack's ``wait-for-dependencies`` or
``wait-for-join`` machine, such as one ``wait --no-follow`` started. ``wait``
follows the parents it starts with the same code (:func:`follow_parent`), so
both show the same progress, the same end and exit the same way.
"""

# No ``from __future__ import annotations``: Typer reads these annotations at runtime.

import json
import time
from typing import Annotated, Any

import typer
from botocore.exceptions import ClientError
from pydantic import ValidationError
from rich.table import Table

from dependency_tracker.core.errors import DependencyTrackerError, InvalidMessageError
from dependency_tracker.payloads.documents import is_reference
from dependency_tracker.payloads.model import ProcessPayload
from dependency_tracker.table.items import WaiterItem
from dependency_tracker_cli import io, render
from dependency_tracker_cli.options import Json, aws_command, fail
from dependency_tracker_cli.readmodel import CirrusPrefix, CirrusStateTableName
from dependency_tracker_cli.target import Target

SINGLE = "wait-for-dependencies"
JOIN = "wait-for-join"
# The deployed template's outputs naming the two parents (and serve's local stack's).
MACHINE_OUTPUTS = {
    SINGLE: "WaitForDependenciesStateMachineArn",
    JOIN: "WaitForJoinStateMachineArn",
}
STOPPED_FOLLOWING = 130  # as a shell reports Ctrl-C
_ENDED = {"SUCCEEDED", "FAILED", "INVALID", "ABORTED"}
# DescribeExecution's answers for an execution that is not there (or an ARN that names none).
_NO_EXECUTION = frozenset({"ExecutionDoesNotExist", "InvalidArn"})


class ParentNotFoundError(DependencyTrackerError):
    """The stack has no such parent state machine (exit 4, as an unknown workflow)."""

    exit_code = 4


class ExecutionNotFoundError(DependencyTrackerError):
    """No parent execution has that ARN or name (exit 5, as any id that is not there)."""

    exit_code = 5


@aws_command
def follow(
    target: Target,
    *,
    execution: Annotated[
        str,
        typer.Argument(
            metavar="EXECUTION",
            help="The parent's execution ARN, or its name (as `wait --name` gave it).",
            show_default=False,
        ),
    ],
    poll: Annotated[float, typer.Option(min=0.05, hidden=True)] = 0.5,
    json_output: Json = False,
    cirrus_prefix: CirrusPrefix = None,
    cirrus_state_table: CirrusStateTableName = None,
) -> None:
    """Follow a parent until it ends, as wait does: re-attach after `wait --no-follow`.

    EXECUTION is an execution of the stack's wait-for-dependencies or
    wait-for-join machine: its ARN, or its name (looked up in both); or, by its
    ARN, a parent of your own that waits through the tracker. Progress
    goes to stderr; the end (status, join counts, each dependency's state) to
    stdout. A parent that already ended is shown at once. Exits 0 when the
    parent succeeded, 1 when it failed (with the tracker's error name), 5 when
    no parent execution has that ARN or name. In cirrus mode (--cirrus-prefix, or
    a stack with cirrus outputs) the dependencies' states are cirrus-geo's.

    Examples:
      dependency-tracker follow wait-20260101T120000Z-3f2a1c
      dependency-tracker follow mosaic-1 --stack-name tracker --json
    """
    target.use_cirrus(prefix=cirrus_prefix, state_table=cirrus_state_table)
    described, machine, waited = _find(target, execution)
    ids = waited if waited is not None else _payload_ids(target, described.get("input"))
    render.stderr().print(
        f"following {machine}: {render.escape_line(described['executionArn'])}", soft_wrap=True
    )
    follow_parent(
        target, str(described["executionArn"]), machine, ids, poll=poll, json_output=json_output
    )


def follow_parent(
    target: Target,
    execution_arn: str,
    machine: str,
    payload_ids: list[str],
    *,
    poll: float,
    json_output: bool,
) -> None:
    """Show the parent's progress until it stops, then how it ended; exit 1 unless it succeeded.

    Ctrl-C stops following (exit 130) and leaves the parent running.
    """
    try:
        described = _until_stopped(target, execution_arn, payload_ids, poll=poll)
    except KeyboardInterrupt:
        fail(f"stopped following; the parent keeps running: {execution_arn}", STOPPED_FOLLOWING)
    states = _states(target, payload_ids)
    _show_ended(described, machine, states, json_output=json_output)
    if described["status"] != "SUCCEEDED":
        reason = ": ".join(
            str(part) for part in (described.get("error"), described.get("cause")) if part
        )
        fail(f"parent {described['status']}" + (f": {reason}" if reason else ""))


def machine_arn(target: Target, machine: str) -> str:
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


def _parents(target: Target) -> dict[str, str]:
    """``{state machine ARN: wait-for-...}`` of the parents the stack has (at least one)."""
    found: dict[str, str] = {}
    missing: ParentNotFoundError | None = None
    for machine in (SINGLE, JOIN):
        try:
            found[machine_arn(target, machine)] = machine
        except ParentNotFoundError as exc:
            missing = exc
    if not found and missing is not None:
        raise missing
    return found


def _find(target: Target, execution: str) -> tuple[dict[str, Any], str, list[str] | None]:
    """The parent named by ARN or name: its ``DescribeExecution``, its machine, what it waits on.

    What it waits on is None for the stack's own parents (their input says); a parent of
    the user's own, named by its ARN, waits on what the tracker's rows name for it.
    """
    parents = _parents(target)
    names = " or ".join(f"{target.prefix}-{machine}" for machine in parents.values())
    if execution.startswith("arn:"):
        described = _describe(target, execution)
        if described is None:
            raise ExecutionNotFoundError(f"no execution {execution}")
        machine = parents.get(str(described["stateMachineArn"]))
        if machine is not None:
            return described, machine, None
        waited = _waited_on(target, execution)
        if waited is None:
            raise ExecutionNotFoundError(
                f"{execution} waits on nothing through the tracker (no waiter or join row names "
                f"it); follow shows executions of {names} and of any parent that waits"
            )
        return described, str(described["stateMachineArn"]).rsplit(":", 1)[-1], waited
    for arn, machine in parents.items():
        # An execution's ARN is its machine's, with :execution: and its name.
        candidate = f"{arn.replace(':stateMachine:', ':execution:', 1)}:{execution}"
        described = _describe(target, candidate)
        if described is not None:
            return described, machine, None
    raise ExecutionNotFoundError(
        f"no execution named {execution!r} of {names} (a parent of your own: give its ARN)"
    )


def _waited_on(target: Target, execution_arn: str) -> list[str] | None:
    """The payload ids a parent of the user's own waits on, by the rows naming it (None: none).

    A join's members are not listed (there may be 100,000): its progress is the join's.
    """
    rows = [
        row
        for page in target.dependencies.scan_pages(parent_execution=execution_arn)
        for row in page
    ]
    if not rows:
        return None
    return list(dict.fromkeys(row.payload_id for row in rows if isinstance(row, WaiterItem)))


def _describe(target: Target, execution_arn: str) -> dict[str, Any] | None:
    """``DescribeExecution``, or None when there is no such execution."""
    try:
        described: dict[str, Any] = target.client("stepfunctions").describe_execution(
            executionArn=execution_arn
        )
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in _NO_EXECUTION:
            return None
        raise
    return described


def _payload_ids(target: Target, text: str | None) -> list[str]:
    """The ids of a parent's ``dependencies`` (none for a manifest's: it may be long).

    The parent checked its input, or failed on it: an entry that cannot be read
    here is left out of the progress, not an error.
    """
    try:
        document = json.loads(text) if text else {}
    except json.JSONDecodeError:
        return []
    entries = document.get("dependencies") if isinstance(document, dict) else None
    ids: list[str] = []
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict):
            continue
        try:
            payload = entry
            if is_reference(entry):
                url = str(entry["url"])
                payload = io.load_json(target.bucket.read_url(url), url)
            ids.append(ProcessPayload.model_validate(payload).id)
        except (InvalidMessageError, ValidationError, ClientError):
            continue
    return ids


def _until_stopped(
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


def _states(target: Target, payload_ids: list[str]) -> dict[str, str | None]:
    """Each payload's state now (None: no state item yet), cirrus's in cirrus mode."""
    wanted = list(dict.fromkeys(payload_ids))
    items = target.payloads.get_many(wanted) if wanted else {}
    return {pid: (items[pid].state.value if pid in items else None) for pid in payload_ids}


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
