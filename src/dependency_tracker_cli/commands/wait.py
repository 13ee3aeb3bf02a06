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
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Annotated, Any

import typer
from pydantic import ValidationError

from dependency_tracker.core.errors import (
    DependencyTrackerError,
    InvalidMessageError,
)
from dependency_tracker.core.settings import MAX_JOIN_CHUNK_SIZE
from dependency_tracker.joins.manifest import ManifestReader
from dependency_tracker.joins.messages import JoinMessage, read_members
from dependency_tracker.joins.rows import ParentGone
from dependency_tracker.payloads.model import ProcessPayload
from dependency_tracker_cli import hints, io, render
from dependency_tracker_cli.commands.follow import JOIN, SINGLE, follow_parent, machine_arn
from dependency_tracker_cli.options import Json, aws_command, fail
from dependency_tracker_cli.readmodel import CirrusPrefix, CirrusStateTableName
from dependency_tracker_cli.target import Target

# Step Functions: execution names are 1-80 characters.
MAX_NAME_CHARS = 80
# A manifest is counted (for --quorum) when it ends within the tracker's first chunk:
# the entries its first invocation reads, and reads references of, before any other.
COUNTED_MANIFEST_ENTRIES = MAX_JOIN_CHUNK_SIZE
# The parent's own task token is not known before it starts; the checks need one.
_ANY_TOKEN = "-"  # noqa: S105  (a placeholder, no secret)
_ANY_EXECUTION = "arn:aws:states:us-east-1:000000000000:execution:wait-for-join:check"


class WouldFailError(DependencyTrackerError):
    """The parent would fail on its input at once: refused before it starts (exit 3)."""

    exit_code = 3

    def __init__(self, error: str, cause: str) -> None:
        self.error = error
        self.cause = cause
        super().__init__(f"nothing started: the parent would fail {error}: {cause}")


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
    deadline: Annotated[
        str | None,
        typer.Option(
            "--deadline",
            help="Decide the join then with what succeeded: an RFC 3339 time "
            "(2026-12-01T06:00:00Z) or seconds after registration (implies --join).",
            metavar="TIME|SECONDS",
            show_default=False,
        ),
    ] = None,
    min_succeeded: Annotated[
        int | None,
        typer.Option(
            "--min-succeeded",
            min=0,
            help="Successes the join needs at its --deadline (default 1); fewer: "
            "JoinDeadlineExceeded.",
            metavar="N",
            show_default=False,
        ),
    ] = None,
    on_parent_gone: Annotated[
        ParentGone | None,
        typer.Option(
            "--on-parent-gone",
            help="cancel: once the parent ends (or is released), stop the members nobody "
            "else waits on (implies --join; default: keep them running).",
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
    cirrus_prefix: CirrusPrefix = None,
    cirrus_state_table: CirrusStateTableName = None,
) -> None:
    """Start a parent that waits on payloads, and follow it until it ends.

    The parent is the stack's wait-for-dependencies state machine (one task token
    per payload), or wait-for-join with --join, --quorum or --manifest-url (one
    token for k of n). It sends the payloads to the process queue with its
    tokens; the tracker runs each payload once, or replays a finished one, and
    answers. Exits 0 when the parent succeeded, 1 when it failed (with the
    tracker's error name), 3 for an invalid payload or a join its parent could
    only fail (a quorum over the distinct members, a manifest that cannot be
    read: nothing is started), 4 for an unknown workflow. In cirrus mode
    (--cirrus-prefix, or a stack with cirrus outputs) the dependencies' states
    shown are cirrus-geo's.

    Examples:
      dependency-tracker wait tile-1.json tile-2.json
      dependency-tracker wait tiles.json --quorum 2 --payload-id mosaic/1
      dependency-tracker wait tiles.json --deadline 2026-12-01T06:00:00Z --min-succeeded 10
      dependency-tracker wait tiles.json --on-parent-gone cancel
      dependency-tracker wait slow.json --payload-id mosaic/1 --no-follow
      dependency-tracker wait --manifest-url s3://bucket/manifests/m.jsonl --timeout-seconds 3600
    """
    if manifest_url is not None and sources:
        fail("give FILE|- ... or --manifest-url, not both", 2)
    if manifest_url is None and not sources:
        fail("nothing to wait on: give FILE|- ... or --manifest-url URL", 2)
    if name is not None and not 1 <= len(name) <= MAX_NAME_CHARS:
        fail(f"--name must be 1 to {MAX_NAME_CHARS} characters", 2)
    target.use_cirrus(prefix=cirrus_prefix, state_table=cirrus_state_table)
    by = _deadline(deadline, min_succeeded)
    if on_parent_gone is not None:
        by["on_parent_gone"] = on_parent_gone.value
    joined = join or quorum is not None or manifest_url is not None or bool(by)
    machine = JOIN if joined else SINGLE
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
    document.update(by)
    if machine == JOIN:
        _check_join(target, dependencies, manifest_url=manifest_url, quorum=quorum, by=by)
    sfn = target.client("stepfunctions")
    started = sfn.start_execution(
        stateMachineArn=machine_arn(target, machine),
        name=name or _default_name(),
        input=json.dumps(document),
    )
    execution_arn = str(started["executionArn"])
    notes = render.stderr()
    notes.print(f"started {machine}: {render.escape_line(execution_arn)}", soft_wrap=True)
    if not follow:
        _show_started(execution_arn, machine, payload_id, json_output=json_output)
        return
    follow_parent(
        target, execution_arn, machine, dependencies.ids, poll=poll, json_output=json_output
    )


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


def _deadline(deadline: str | None, min_succeeded: int | None) -> dict[str, Any]:
    """The join's deadline fields as the parent's input takes them (seconds as a number)."""
    fields: dict[str, Any] = {}
    if deadline is not None:
        seconds = deadline.isascii() and deadline.isdigit()
        fields["deadline"] = int(deadline) if seconds else deadline
    if min_succeeded is not None:
        fields["min_succeeded"] = min_succeeded
    return fields


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


def _check_join(
    target: Target,
    dependencies: Dependencies,
    *,
    manifest_url: str | None,
    quorum: int | None,
    by: dict[str, Any],
) -> None:
    """Refuse a join its parent could only fail (``InvalidJoin``), with the tracker's cause.

    The join message the parent would send goes through the tracker's own checks;
    a manifest's first chunk is read as the tracker's first invocation reads it.
    Its quorum is checked against the distinct members when they are known: the
    FILEs' (references read), or a manifest's that ends within that first chunk
    (a longer one is counted by the tracker once every chunk is registered).

    Raises:
        WouldFailError: The tracker would fail the parent ``InvalidJoin`` at once.
        InvalidMessageError: A referenced member cannot be read yet (retryable).
    """
    source: dict[str, Any] = (
        {"payloads_url": manifest_url}
        if manifest_url is not None
        else {"payloads": dependencies.entries}
    )
    # The parent's execution is its own $$.Execution.Id, made when it starts: any will do here.
    checked = {"task_token": _ANY_TOKEN, "parent_execution": _ANY_EXECUTION, "quorum": quorum}
    document = {"join": {**checked, **by}, **source}
    try:
        JoinMessage.from_document(document, message_id=None, load_url=None)
        ids = dependencies.ids if manifest_url is None else _manifest_ids(target, manifest_url)
    except InvalidMessageError as exc:
        if exc.retryable:
            raise
        raise WouldFailError(exc.error_name, exc.reason) from exc
    distinct = len(set(ids)) if ids is not None else None
    if quorum is not None and distinct is not None and quorum > distinct:
        # The tracker's cause (joins/decision.py) names the join too: its id is not made yet.
        raise WouldFailError(
            "InvalidJoin", f"quorum {quorum} is more than the {distinct} distinct payloads"
        )


def _manifest_ids(target: Target, url: str) -> list[str] | None:
    """The ids of a manifest's members, None past the first chunk (they are not counted here).

    Raises:
        InvalidMessageError: As the tracker's first chunk would (``InvalidJoin``).
    """
    reader = ManifestReader(target.client("s3"))
    piece = reader.read(url, limit=COUNTED_MANIFEST_ENTRIES)
    members = read_members(
        piece.entries, first_index=0, where=url, load_url=target.bucket.read_url, task_token=None
    )
    return [member.id for member in members] if piece.end else None


def _default_name() -> str:
    """``wait-20260101T120000Z-3f2a1c``: sortable, and unique enough for a person's runs."""
    return f"wait-{datetime.now(UTC):%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}"


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
        f"while it waits: {hints.command('graph', '--root', parent)}; "
        f"{hints.command('stuck', '--older-than', '10s')}; "
        f"to its end: {hints.command('follow', execution_arn.rsplit(':', 1)[-1])}",
        soft_wrap=True,
    )
