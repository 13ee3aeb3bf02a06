"""``dependency-tracker publish``: validate messages and send them to the process queue.

With ``--manifest`` it sends nothing: it builds a join manifest, uploads it to
the payload bucket and prints its ``s3://`` url.
"""

# No ``from __future__ import annotations``: Typer reads these annotations at runtime.

import hashlib
import json
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlparse

import typer
from pydantic import ValidationError

from dependency_tracker.core import settings
from dependency_tracker.core.errors import InvalidMessageError
from dependency_tracker.intake.parse import read_message
from dependency_tracker.joins.manifest import manifest_text
from dependency_tracker.joins.messages import JoinMessage
from dependency_tracker.payloads.bucket import MAX_PAYLOAD_BYTES
from dependency_tracker.payloads.documents import PayloadLoader
from dependency_tracker.payloads.model import ProcessPayload
from dependency_tracker.waits.messages import ProcessMessage, WaitMessage
from dependency_tracker_cli import io, render
from dependency_tracker_cli.options import Json, aws_command, fail
from dependency_tracker_cli.readmodel import CirrusPrefix, CirrusStateTableName, PayloadView
from dependency_tracker_cli.target import Target
from dependency_tracker_cli.views import PAYLOAD_TABLE_KEYS, payload_json, payload_table

# SQS limits: a message, and a SendMessageBatch request (10 entries).
MAX_MESSAGE_BYTES = 256 * 1024
_BATCH_ENTRIES = 10
# Manifests go to the payload bucket under a name made of their content.
MANIFEST_PREFIX = "manifests/"
_MANIFEST_CONTENT_TYPE = "application/x-ndjson"
# How many duplicate ids the human output names.
_SHOWN_DUPLICATES = 10


@dataclass
class Publication:
    """One message to send: where it came from and what it carries."""

    source: str
    body: str
    kind: str
    payloads: list[ProcessPayload] = field(default_factory=list)  # what it submits
    waits_for: list[str] = field(default_factory=list)  # ``wait_for`` references
    join_id: str | None = None
    message_id: str | None = None
    unread: list[str] = field(default_factory=list)  # references --dry-run does not read

    @property
    def payload_ids(self) -> list[str]:
        """Ids of the payloads the message is about."""
        return [payload.id for payload in self.payloads] + self.waits_for

    def reruns(self, payload_id: str) -> bool:
        """True when this message makes a finished ``payload_id`` run again."""
        return any(payload.replace for payload in self.payloads if payload.id == payload_id)

    def to_json(self) -> dict[str, Any]:
        """JSON view."""
        return {
            "source": self.source,
            "kind": self.kind,
            "payload_ids": self.payload_ids,
            "join_id": self.join_id,
            "message_id": self.message_id,
        }


@aws_command
def publish(
    target: Target,
    *,
    sources: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="FILE|-...",
            help="JSON files (- for stdin): a payload, {payload, callback}, {url}, a join, "
            "or a JSON array of those.",
            show_default=False,
        ),
    ] = None,
    manifest: Annotated[
        Path | None,
        typer.Option(
            "--manifest",
            exists=True,
            readable=True,
            help="Instead of sending messages: upload a join manifest built from PATH (a "
            "directory of *.json payloads or {url} files, or a JSON Lines file) to the "
            "payload bucket and print its s3:// url.",
            metavar="PATH",
            show_default=False,
        ),
    ] = None,
    bucket: Annotated[
        str | None,
        typer.Option(
            "--bucket",
            envvar=settings.ENV_PAYLOAD_BUCKET,
            help="With --manifest: the bucket to upload to (default: the stack's payload bucket).",
            show_default=False,
        ),
    ] = None,
    wait: Annotated[
        bool, typer.Option("--wait", help="Show progress until every payload is terminal.")
    ] = False,
    timeout: Annotated[
        float, typer.Option(min=0, help="With --wait: give up after this many seconds.")
    ] = 900,
    poll: Annotated[float, typer.Option(min=0.05, hidden=True)] = 0.5,
    check_workflows: Annotated[
        bool,
        typer.Option(help="Refuse payloads whose workflow has no {prefix}-{workflow} machine."),
    ] = True,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Validate and print each message's payload ids; send nothing and call no "
            "AWS API (workflows are not checked, {url} references not read).",
        ),
    ] = False,
    json_output: Json = False,
    cirrus_prefix: CirrusPrefix = None,
    cirrus_state_table: CirrusStateTableName = None,
) -> None:
    """Validate messages and send them to the process queue.

    Everything is validated before anything is sent; a FILE that does not exist
    exits 2, an invalid message exits 3 with the reason. With --wait, exits 1
    unless every payload succeeded; in cirrus mode (--cirrus-prefix, or a stack
    with cirrus outputs) it follows cirrus-geo's state table, where cirrus runs them.
    With --manifest PATH, nothing is sent: the manifest is uploaded and its url
    printed, for a join's payloads_url or wait-for-join's dependencies_url.
    With --dry-run, nothing is sent and no AWS API is called: each message is
    validated and the ids of its payloads printed.

    Examples:
      dependency-tracker publish payload.json --wait
      dependency-tracker publish a.json b.json --endpoint-url http://127.0.0.1:4600
      cat payloads.json | dependency-tracker publish - --json
      dependency-tracker publish --manifest members/
      dependency-tracker publish a.json b.json --dry-run
    """
    if dry_run and (manifest is not None or wait):
        fail("--dry-run takes no --manifest and no --wait", 2)
    if manifest is not None:
        if sources or wait:
            fail("--manifest takes no FILE arguments and no --wait", 2)
        _publish_manifest(
            target,
            manifest,
            bucket=bucket,
            check_workflows=check_workflows,
            json_output=json_output,
        )
        return
    if not sources:
        fail("nothing to publish: give FILE|- ... or --manifest PATH", 2)
    load_url = _unread if dry_run else target.bucket.read_url
    publications = [
        _validate(where, document, load_url)
        for source in sources
        for where, document in io.documents(source)
    ]
    if dry_run:
        _show_dry_run(publications, json_output=json_output)
        return
    # Before the check: in cirrus mode the workflows are cirrus's state machines.
    target.use_cirrus(prefix=cirrus_prefix, state_table=cirrus_state_table)
    if check_workflows:
        _check_workflows(target, publications)
    # With --wait: what the payloads were before, to tell a new end from an old one.
    before = target.payloads.get_many(_ids(publications)) if wait else {}
    _send(target, publications)
    rows: list[tuple[str, PayloadView | None]] = []
    running: list[str] = []
    if wait:
        rows, running = _wait(target, publications, before, timeout=timeout, poll=poll)
    _show(publications, rows, wait=wait, json_output=json_output)
    if running:
        fail(f"timed out after {timeout:g} s; not finished: {', '.join(running)}")
    failed = [f"{pid} ({item.state})" for pid, item in rows if item and not item.state.is_success]
    if failed:
        fail(f"{len(failed)} of {len(rows)} payload(s) did not succeed: {', '.join(failed)}")


class _NotReadError(Exception):
    """A ``{"url": ...}`` reference that --dry-run leaves unread (reading it calls S3)."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.url = url


def _unread(url: str) -> str:
    raise _NotReadError(url)


def _validate(where: str, document: Any, load_url: PayloadLoader) -> Publication:
    body = json.dumps(document, separators=(",", ":"))
    unread: list[str] = []
    try:
        message = read_message(body, load_url=load_url)
    except InvalidMessageError as exc:
        raise InvalidMessageError(f"{where}: {exc.reason}") from exc
    except _NotReadError as exc:
        # The rest is checked as the tracker checks it once the object is read.
        unread.append(exc.url)
        message = None
    size = len(body.encode("utf-8"))
    if size > MAX_MESSAGE_BYTES:
        reason = (
            f"{where}: {size} bytes, SQS takes at most {MAX_MESSAGE_BYTES}: "
            'store the payload in S3 and publish {"url": "s3://..."}'
        )
        raise InvalidMessageError(reason)
    if message is None:
        return Publication(where, body, "payload", unread=unread)
    if isinstance(message, JoinMessage):
        return Publication(where, body, "join", message.payloads, join_id=message.join_id)
    if isinstance(message, ProcessMessage):
        return Publication(where, body, "payload", [message.payload])
    if isinstance(message, WaitMessage):
        return Publication(where, body, "wait", waits_for=[message.payload_id])
    # The tracker's own messages (a join's registration chunks) are not published by hand.
    raise InvalidMessageError(f"{where}: the tracker's own message, not one to publish")


def _check_workflows(target: Target, publications: list[Publication]) -> None:
    target.require_workflows(
        payload.workflow for publication in publications for payload in publication.payloads
    )


def _send(target: Target, publications: list[Publication]) -> None:
    sqs = target.client("sqs")
    queue_url = target.process_queue_url
    with render.progress() as bar:
        task = bar.add_task("sending", total=len(publications))
        for batch in _batches(publications):
            response = sqs.send_message_batch(
                QueueUrl=queue_url,
                Entries=[{"Id": str(i), "MessageBody": p.body} for i, p in enumerate(batch)],
            )
            for sent in response.get("Successful", []):
                batch[int(sent["Id"])].message_id = sent["MessageId"]
            for failure in response.get("Failed", []):
                where = batch[int(failure["Id"])].source
                fail(f"SendMessageBatch: {where}: {failure.get('Code')}: {failure.get('Message')}")
            bar.advance(task, len(batch))


def _batches(publications: list[Publication]) -> list[list[Publication]]:
    """Groups of at most 10 messages and 256 KiB, as SendMessageBatch requires."""
    batches: list[list[Publication]] = []
    size = 0
    for publication in publications:
        length = len(publication.body.encode("utf-8"))
        if not batches or len(batches[-1]) == _BATCH_ENTRIES or size + length > MAX_MESSAGE_BYTES:
            batches.append([])
            size = 0
        batches[-1].append(publication)
        size += length
    return batches


def _ids(publications: list[Publication]) -> list[str]:
    """Every payload id the messages name, once each, in order."""
    return list(dict.fromkeys(pid for p in publications for pid in p.payload_ids))


def _wait(
    target: Target,
    publications: list[Publication],
    before: dict[str, PayloadView],
    *,
    timeout: float,
    poll: float,
) -> tuple[list[tuple[str, PayloadView | None]], list[str]]:
    """Poll the payloads' state until every one ended; returns rows and the unfinished ids.

    The state is the read model's: cirrus's state table in cirrus mode (cirrus runs
    the payloads there), the tracker's otherwise.
    """
    expected = {
        pid: (before.get(pid), any(p.reruns(pid) for p in publications))
        for pid in _ids(publications)
    }
    deadline = time.monotonic() + timeout
    with render.progress() as bar:
        task = bar.add_task("waiting", total=len(expected))
        while True:
            items = target.payloads.get_many(expected)
            running = [
                pid
                for pid, (old, replace) in expected.items()
                if not _new_end(items.get(pid), old, replace)
            ]
            done = len(expected) - len(running)
            bar.update(task, completed=done, description=f"waiting ({len(running)} running)")
            if not running or time.monotonic() >= deadline:
                return [(pid, items.get(pid)) for pid in expected], running
            time.sleep(poll)


def _new_end(item: PayloadView | None, old: PayloadView | None, replace: bool) -> bool:
    """True once ``item`` is the end of this submission, not a state from before it.

    ``updated_at`` is the item's last write in either table (cirrus's: the time in
    its ``state_updated``), so a changed one is a new end.
    """
    if item is None or not item.state.is_terminal:
        return False
    if old is None:
        return True
    if item.updated_at != old.updated_at:
        return True
    # Unchanged and terminal: a replay, unless this submission runs it again.
    return not (old.state.reruns or replace)


def _show(
    publications: list[Publication],
    rows: list[tuple[str, PayloadView | None]],
    *,
    wait: bool,
    json_output: bool,
) -> None:
    if json_output:
        data: dict[str, Any] = {"published": [p.to_json() for p in publications]}
        if wait:
            data["payloads"] = [payload_json(pid, item) for pid, item in rows]
        render.emit_json(data)
        return
    console = render.stdout()
    for publication in publications:
        what = _named(publication, publication.payload_ids)
        console.print(
            f"[green]sent[/] {render.escape_line(publication.source)} → "
            f"{render.escape_line(what)} (message {publication.message_id})",
            soft_wrap=True,
        )
    if wait:
        render.print_table(console, payload_table(rows, title="results"), keys=PAYLOAD_TABLE_KEYS)


def _named(publication: Publication, ids: list[str]) -> str:
    """``ids`` as one line, a join's prefixed with ``join <id>:``."""
    what = ", ".join(ids)
    return what if publication.join_id is None else f"join {publication.join_id}: {what}"


def _show_dry_run(publications: list[Publication], *, json_output: bool) -> None:
    """What would be sent: each message and the ids it names (references' urls, unread)."""
    if json_output:
        render.emit_json(
            {
                "dry_run": True,
                "messages": [
                    {
                        "source": p.source,
                        "kind": p.kind,
                        "payload_ids": p.payload_ids,
                        "join_id": p.join_id,
                        "unread_urls": p.unread,
                    }
                    for p in publications
                ],
            }
        )
        return
    console = render.stdout()
    for publication in publications:
        what = _named(publication, [*publication.payload_ids, *publication.unread])
        console.print(
            f"[green]valid[/] {render.escape_line(publication.source)} → "
            f"{render.escape_line(what)}",
            soft_wrap=True,
        )
    note = f"dry run: {len(publications)} message(s) valid, nothing sent"
    if any(publication.unread for publication in publications):
        note += "; {url} references not read"
    render.stderr().print(f"{render.escape_line(note)} (workflows not checked)", soft_wrap=True)


# ---------------------------------------------------------------------------- --manifest


@dataclass
class Manifest:
    """A join manifest's entries, as given, and the id (or url) each stands for."""

    entries: list[dict[str, Any]] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)  # payload id, or the url of a reference
    payloads: list[ProcessPayload] = field(default_factory=list)

    @property
    def duplicates(self) -> list[str]:
        """Ids (or urls) given more than once, each once, in order."""
        return [key for key, count in Counter(self.keys).items() if count > 1]

    @property
    def distinct(self) -> int:
        """How many different ids (or urls) the entries name."""
        return len(set(self.keys))


def _publish_manifest(
    target: Target, path: Path, *, bucket: str | None, check_workflows: bool, json_output: bool
) -> None:
    manifest = Manifest()
    for where, document in io.manifest_documents(path):
        _add_entry(manifest, where, document)
    if not manifest.entries:
        raise InvalidMessageError(f"{path}: no entry: a manifest needs at least one")
    if check_workflows:
        _check_workflows(target, [Publication(str(path), "", "manifest", manifest.payloads)])
    data = manifest_text(manifest.entries).encode("utf-8")
    name = bucket or target.payload_bucket_name
    key = f"{MANIFEST_PREFIX}{hashlib.sha256(data).hexdigest()}.jsonl"
    target.client("s3").put_object(
        Bucket=name, Key=key, Body=data, ContentType=_MANIFEST_CONTENT_TYPE
    )
    url = f"s3://{name}/{key}"
    duplicates = manifest.duplicates
    if json_output:
        render.emit_json(
            {
                "url": url,
                "entries": len(manifest.entries),
                "distinct": manifest.distinct,
                "bytes": len(data),
                "duplicates": duplicates,
            }
        )
        return
    note = render.stderr()
    note.print(
        f"manifest: {len(manifest.entries)} entries, {manifest.distinct} distinct, "
        f"{len(data)} bytes",
        soft_wrap=True,
    )
    if duplicates:
        shown = ", ".join(duplicates[:_SHOWN_DUPLICATES])
        more = len(duplicates) - _SHOWN_DUPLICATES
        if more > 0:
            shown += f" and {more} more"
        note.print(
            f"[yellow]note:[/] {len(duplicates)} id(s) given more than once (a join counts "
            f"each once): {render.escape_line(shown)}",
            soft_wrap=True,
        )
    typer.echo(url)


def _add_entry(manifest: Manifest, where: str, document: Any) -> None:
    """Check one entry: a ``{"url": "s3://..."}`` reference as is, or a process payload."""
    if not isinstance(document, dict):
        raise InvalidMessageError(
            f'{where}: expected a JSON object (a payload or {{"url": "s3://bucket/key"}})'
        )
    size = len(json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))
    if size > MAX_PAYLOAD_BYTES:
        raise InvalidMessageError(
            f"{where}: {size} bytes, a payload takes at most {MAX_PAYLOAD_BYTES}"
        )
    if "url" in document and "process" not in document:  # the rule read_message applies
        url = document["url"]
        parsed = urlparse(url) if isinstance(url, str) else None
        if parsed is None or parsed.scheme != "s3" or not parsed.netloc or not parsed.path[1:]:
            raise InvalidMessageError(f"{where}: url must be an s3://bucket/key url, got {url!r}")
        manifest.entries.append(document)
        manifest.keys.append(url)
        return
    try:
        payload = ProcessPayload.model_validate(document)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False)
        reason = "; ".join(
            ".".join(["payload", *(str(part) for part in error["loc"])]) + f": {error['msg']}"
            for error in errors
        )
        raise InvalidMessageError(f"{where}: {reason}") from exc
    manifest.entries.append(document)
    manifest.keys.append(payload.id)
    manifest.payloads.append(payload)
