"""``dependency-tracker rerun``: send failed payloads to the process queue again, with replace.

The tracker keeps no copy of a payload's document on its state item. What it
started is the input of the payload's last execution (canonical JSON, or an
``{"url": "s3://..."}`` pointer into the payload bucket for a large payload),
which Step Functions keeps for 90 days after the run ends (Standard workflows;
an Express run's input cannot be described). A payload whose execution input
cannot be read is rerun only from a document given with ``--from FILE``.

Each message says what it replaces (``process[0].replace_if``: the state and
attempt read here), so the tracker runs it only while the payload is still
there; a second rerun of the same outcome is answered as a duplicate. A
document too large to send inline is written to the payload bucket and sent as
``{"url": "s3://..."}``.
"""

# No ``from __future__ import annotations``: Typer reads these annotations at runtime.

import copy
import hashlib
import json
from dataclasses import dataclass
from enum import StrEnum, unique
from typing import Annotated, Any

import typer
from botocore.exceptions import ClientError
from pydantic import ValidationError
from rich.markup import escape
from rich.table import Table

from dependency_tracker.core.enums import PayloadState, utcnow
from dependency_tracker.core.errors import DependencyTrackerError, InvalidMessageError
from dependency_tracker.payloads.bucket import goes_by_reference, reference_body
from dependency_tracker.payloads.model import ProcessPayload, ReplaceIf
from dependency_tracker.table.prefixes import INVALID_MESSAGE_PREFIX
from dependency_tracker_cli import io, render
from dependency_tracker_cli.commands.join_members import failed_members
from dependency_tracker_cli.commands.list_cmd import (
    Collection,
    ErrorText,
    Limit,
    MaxPages,
    NewerThan,
    OlderThan,
    Workflow,
    max_pages_note,
    payload_filter,
    scanned,
)
from dependency_tracker_cli.options import Json, aws_command, fail
from dependency_tracker_cli.readmodel import (
    CirrusPrefix,
    CirrusStateTableName,
    PageRequest,
    PayloadFilter,
    PayloadView,
    ScanResult,
)
from dependency_tracker_cli.target import Target

_BATCH = 10
# Key prefix, in the payload bucket, of rerun documents too large to send inline.
RERUN_PREFIX = "reruns"
# What a new submission with ``replace`` runs again (docs/idempotency.md).
RERUNNABLE = frozenset({PayloadState.FAILED, PayloadState.ABORTED, PayloadState.INVALID})
# A payload refused for its state is a message the tracker would not rerun: exit 3.
REFUSED_EXIT = InvalidMessageError.exit_code


@unique
class RerunState(StrEnum):
    """States ``rerun --state`` selects."""

    FAILED = "FAILED"
    ABORTED = "ABORTED"
    INVALID = "INVALID"


class NoDocumentError(DependencyTrackerError):
    """No payload document could be found for a payload to rerun."""


@dataclass
class Rerun:
    """One payload to send again: its view, its document, where the document came from."""

    payload_id: str
    view: PayloadView | None
    document: dict[str, Any] | None = None
    document_from: str | None = None
    problem: str | None = None
    # Where a document too large to send inline goes (s3://...); None: sent inline.
    url: str | None = None
    sent: bool = False

    @property
    def expected(self) -> ReplaceIf | None:
        """What this rerun replaces: the state and attempt read (None for an unknown payload)."""
        if self.view is None or not self.view.state.is_terminal:
            return None
        return ReplaceIf(state=self.view.state, attempt=self.view.attempt)

    @property
    def message(self) -> dict[str, Any]:
        """The document with ``process[0].replace = true`` and ``replace_if``."""
        return with_replace(self.document or {}, self.expected)

    @property
    def text(self) -> str:
        """The message as sent inline, or as written to the payload bucket."""
        return json.dumps(self.message, separators=(",", ":"))

    @property
    def key(self) -> str:
        """Bucket key of the message: from the payload id and the message itself.

        A retried rerun writes the same object and sends the same url; another
        document for the same payload (``--from``) never overwrites it.
        """
        text = self.text.encode("utf-8")
        pid = self.payload_id.encode("utf-8")
        return (
            f"{RERUN_PREFIX}/{hashlib.sha256(pid).hexdigest()}/"
            f"{hashlib.sha256(text).hexdigest()}.json"
        )

    @property
    def body(self) -> str:
        """The process-queue body: the message, or ``{"url"}`` naming it in the bucket."""
        return self.text if self.url is None else reference_body(self.url)

    def to_json(self, *, with_body: bool) -> dict[str, Any]:
        """``--json`` view (the message too on a dry run)."""
        data: dict[str, Any] = {
            "payload_id": self.payload_id,
            "state": None if self.view is None else self.view.state.value,
            "attempt": None if self.view is None else self.view.attempt,
            "document_from": self.document_from,
            "url": self.url,
            "sent": self.sent,
        }
        if self.problem is not None:
            data["problem"] = self.problem
        if with_body and self.document is not None:
            data["message"] = self.message
        return data


def with_replace(document: dict[str, Any], expected: ReplaceIf | None) -> dict[str, Any]:
    """A copy of ``document`` whose first process step has ``replace: true`` and ``expected``.

    ``expected`` (``replace_if``) replaces any a previous rerun left in the document.
    """
    copied = copy.deepcopy(document)
    process = copied.get("process")
    steps = [process] if isinstance(process, dict) else process
    if isinstance(steps, list) and steps and isinstance(steps[0], dict):
        steps[0]["replace"] = True
        steps[0].pop("replace_if", None)
        if expected is not None:
            steps[0]["replace_if"] = expected.model_dump(mode="json", exclude_none=True)
        copied["process"] = steps
    return copied


@aws_command
def rerun(
    target: Target,
    *,
    payload_ids: Annotated[
        list[str] | None,
        typer.Argument(metavar="[PAYLOAD_ID]...", show_default=False),
    ] = None,
    state: Annotated[
        list[RerunState] | None,
        typer.Option(
            "--state",
            metavar="STATE",
            help="Select the payloads in this state (repeatable), with list's filters.",
            case_sensitive=False,
            rich_help_panel="Filters",
            show_default=False,
        ),
    ] = None,
    join: Annotated[
        str | None,
        typer.Option(
            "--join",
            metavar="JOIN_ID",
            help="Select the join's members whose latest outcome failed (FAILED, ABORTED "
            "or INVALID); while the join is undecided, what their reruns end in counts.",
            rich_help_panel="Filters",
            show_default=False,
        ),
    ] = None,
    workflow: Workflow = None,
    collection: Collection = None,
    older_than: OlderThan = None,
    newer_than: NewerThan = None,
    error: ErrorText = None,
    limit: Limit = 50,
    max_pages: MaxPages = 20,
    from_file: Annotated[
        str | None,
        typer.Option(
            "--from",
            metavar="FILE",
            help="Payload documents (one JSON value or an array; - for stdin) to send "
            "instead of the last execution's input; alone, it selects their ids.",
            show_default=False,
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print what would be sent; send nothing.")
    ] = False,
    skip_others: Annotated[
        bool,
        typer.Option(
            "--skip-others",
            help="Skip (with a note) payloads that are not FAILED, ABORTED or INVALID, "
            "instead of sending nothing and exiting 3.",
        ),
    ] = False,
    json_output: Json = False,
    cirrus_prefix: CirrusPrefix = None,
    cirrus_state_table: CirrusStateTableName = None,
) -> None:
    """Send failed, aborted or invalid payloads to the process queue again, with replace.

    Each document is the input of the payload's last execution (or from --from),
    sent with process[0].replace = true and replace_if (the state and attempt
    read), so the tracker starts one new attempt, and only while the payload is
    still in that state. A document too large for one message is written to the
    payload bucket (reruns/...) and sent as {"url": ...}. A payload in another
    state (or unknown) is refused: nothing is sent, exit 3 (with --skip-others:
    skipped, exit 0). The tracker's records of refused messages are never selected.

    With --join JOIN_ID the join's failed members are selected; while the join
    is undecided each one's rerun takes its failure back, and what the rerun
    ends in is counted instead.

    Examples:
      dependency-tracker rerun sentinel-2-l2a/workflow-cog/tile-1 --dry-run
      dependency-tracker rerun --state FAILED --workflow cog --older-than 1h
      dependency-tracker rerun --join 3f2a9c1d... --dry-run
      dependency-tracker rerun s2/workflow-cog/tile-1 --from fixed.json
    """
    target.use_cirrus(prefix=cirrus_prefix, state_table=cirrus_state_table)
    documents = _documents(from_file) if from_file is not None else {}
    filtered = any(v is not None for v in (workflow, collection, older_than, newer_than, error))
    if filtered and not state:
        raise typer.BadParameter("filters select payloads with --state", param_hint="'--state'")
    wanted = list(dict.fromkeys(payload_ids or ()))
    if state:
        selection = payload_filter(
            states=[PayloadState(value) for value in state],
            workflow=workflow,
            collection=collection,
            older_than=older_than,
            newer_than=newer_than,
            error=error,
            now=utcnow(),
            # The tracker's records of refused messages are not payloads to rerun.
            payloads_only=True,
        )
        page = PageRequest(limit=limit, max_pages=max_pages)
        wanted += [pid for pid in _selected(target, selection, page) if pid not in wanted]
    if join is not None:
        wanted += [pid for pid in failed_members(target, join, limit) if pid not in wanted]
    elif not wanted and not state:
        wanted = _named_by(documents)
    views = target.payloads.get_many(wanted)
    reruns = [Rerun(pid, views.get(pid)) for pid in wanted]
    _refuse_others(reruns, skip_others=skip_others)
    ready = [rerun for rerun in reruns if rerun.problem is None]
    for one in ready:
        _find_document(target, one, documents)
    missing = [one for one in ready if one.document is None]
    if missing:
        listed = "; ".join(f"{one.payload_id}: {one.problem}" for one in missing)
        raise NoDocumentError(
            f"no payload document for {listed} (pass the document with --from FILE)"
        )
    for one in ready:
        if goes_by_reference(one.text):
            one.url = target.payload_bucket.url(one.key)
    if not dry_run:
        _send(target, ready)
    _show(reruns, dry_run=dry_run, json_output=json_output)


def _named_by(documents: dict[str, dict[str, Any]]) -> list[str]:
    """``--from``'s payload ids, when nothing else selects payloads."""
    if not documents:
        raise typer.BadParameter(
            "name payloads, select them with --state or --join, "
            "or give their documents with --from",
            param_hint="'PAYLOAD_ID'",
        )
    return list(documents)


def _selected(target: Target, wanted: PayloadFilter, page: PageRequest) -> list[str]:
    """Ids of the payloads ``list`` would show for the same states and filters."""
    found: ScanResult[PayloadView] = scanned(lambda: target.payloads.scan(wanted, page))
    max_pages_note(found)
    if found.next_token is not None and not found.max_pages_reached:
        render.stderr().print(
            f"[yellow]note:[/] more payloads match than --limit {page.limit}: "
            "run again once these are rerun, or raise --limit",
            soft_wrap=True,
        )
    return [view.payload_id for view in found.rows]


def _documents(source: str) -> dict[str, dict[str, Any]]:
    """``--from``'s documents by payload id (each must be a valid payload)."""
    found: dict[str, dict[str, Any]] = {}
    for where, document in io.documents(source):
        if not isinstance(document, dict):
            raise InvalidMessageError(f"{where}: a payload document is a JSON object")
        try:
            payload = ProcessPayload.model_validate(document)
        except ValidationError as exc:
            raise InvalidMessageError(f"{where}: not a payload: {exc.errors()[0]['msg']}") from exc
        found[payload.id] = document
    return found


def _refuse_others(reruns: list[Rerun], *, skip_others: bool) -> None:
    """Mark payloads no rerun is for; without ``skip_others`` any of them ends the command."""
    for one in reruns:
        if one.view is None:
            one.problem = "not found"
        elif one.payload_id.startswith(INVALID_MESSAGE_PREFIX):
            one.problem = "a refused message's record, not a payload"
        elif one.view.state not in RERUNNABLE:
            one.problem = f"{one.view.state.value}, not FAILED, ABORTED or INVALID"
    refused = [one for one in reruns if one.problem is not None]
    if not refused:
        return
    listed = "; ".join(f"{one.payload_id}: {one.problem}" for one in refused)
    if not skip_others:
        fail(f"not rerun (nothing sent): {listed}", REFUSED_EXIT, hint="--skip-others skips them")
    render.stderr().print(f"[yellow]note:[/] skipped {render.escape_line(listed)}", soft_wrap=True)


def _find_document(target: Target, one: Rerun, documents: dict[str, dict[str, Any]]) -> None:
    """The document to send: ``--from``'s, else the last execution's input."""
    if one.payload_id in documents:
        one.document, one.document_from = documents[one.payload_id], "file"
        return
    execution = None if one.view is None else one.view.last_execution
    if not execution:
        one.problem = "no execution recorded"
        return
    try:
        described = target.client("stepfunctions").describe_execution(executionArn=execution)
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "?")
        one.problem = f"its last execution cannot be described ({code})"
        return
    text = described.get("input")
    source = "execution input"
    try:
        document = json.loads(text) if text else None
        if isinstance(document, dict) and set(document) == {"url"}:
            source = str(document["url"])
            document = json.loads(target.bucket.read_url(source))
    except (json.JSONDecodeError, InvalidMessageError) as exc:
        one.problem = f"its last execution's input cannot be read: {exc}"
        return
    if not isinstance(document, dict) or _payload_id(document) != one.payload_id:
        one.problem = "its last execution's input is not this payload"
        return
    one.document, one.document_from = document, source


def _payload_id(document: dict[str, Any]) -> str | None:
    try:
        return ProcessPayload.model_validate(document).id
    except ValidationError:
        return None


def _send(target: Target, ready: list[Rerun]) -> None:
    for one in ready:
        if one.url is not None:
            # Written before any message names it; the key is the message's own.
            target.payload_bucket.reference(one.key, one.text)
    sqs = target.client("sqs")
    queue_url = target.process_queue_url
    for start in range(0, len(ready), _BATCH):
        batch = ready[start : start + _BATCH]
        response = sqs.send_message_batch(
            QueueUrl=queue_url,
            Entries=[
                {"Id": str(index), "MessageBody": one.body} for index, one in enumerate(batch)
            ],
        )
        for sent in response.get("Successful", []):
            batch[int(sent["Id"])].sent = True
        for failure in response.get("Failed", []):
            one = batch[int(failure["Id"])]
            code, reason = failure.get("Code"), failure.get("Message")
            fail(f"SendMessageBatch: {one.payload_id}: {code}: {reason}")


def _show(reruns: list[Rerun], *, dry_run: bool, json_output: bool) -> None:
    if json_output:
        render.emit_json(
            {
                "dry_run": dry_run,
                "sent": sum(one.sent for one in reruns),
                "payloads": [one.to_json(with_body=dry_run) for one in reruns],
            }
        )
        return
    console = render.stdout()
    ready = [one for one in reruns if one.problem is None]
    if not ready:
        console.print("nothing to rerun")
        return
    verb = "would send" if dry_run else "sent"
    table = Table(title=f"{verb} {len(ready)} payload(s) with replace")
    for column in ("payload", "state", "attempt", "document from", "bytes", "sent as"):
        table.add_column(column)
    for one in ready:
        table.add_row(
            render.plain(one.payload_id),
            render.styled(None if one.view is None else one.view.state.value),
            render.plain(None if one.view is None else one.view.attempt),
            render.plain(one.document_from),
            str(len(one.text.encode("utf-8"))),
            render.plain(one.url or "inline"),
        )
    render.print_table(console, table, keys=(0,))
    if dry_run:
        # What the queue would get: the message, or the pointer to where it would be written.
        for one in ready:
            console.print(escape(one.body), soft_wrap=True)
