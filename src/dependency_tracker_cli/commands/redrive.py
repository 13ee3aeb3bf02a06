"""``dependency-tracker redrive``: move process-DLQ messages back to the process queue."""

# No ``from __future__ import annotations``: Typer reads these annotations at runtime.

from dataclasses import dataclass
from typing import Annotated, Any

import typer
from rich.table import Table

from dependency_tracker.core.errors import InvalidMessageError
from dependency_tracker.intake.parse import read_message
from dependency_tracker.joins.messages import JoinCancelMessage, JoinChunkMessage, JoinMessage
from dependency_tracker.table.prefixes import INVALID_MESSAGE_PREFIX
from dependency_tracker.waits.messages import ProcessMessage
from dependency_tracker_cli import render
from dependency_tracker_cli.options import Json, aws_command, fail
from dependency_tracker_cli.target import Target
from dependency_tracker_cli.views import unknown_workflow

_BATCH = 10
# How long a received DLQ message stays hidden while it is moved (or listed).
_VISIBILITY_SECONDS = 60


@dataclass
class DeadLetter:
    """A message found in the DLQ."""

    message: dict[str, Any]
    moved: bool = False
    # Why it is in the DLQ, when that can be told (see :func:`_reasons`).
    reason: str | None = None

    @property
    def message_id(self) -> str:
        """SQS message id."""
        return str(self.message["MessageId"])

    def workflows(self) -> list[str]:
        """The workflows the message would start (none for a wait, a chunk, or a bad body)."""
        try:
            parsed = read_message(self.message["Body"])
        except InvalidMessageError:
            return []
        if isinstance(parsed, JoinMessage):
            return list(dict.fromkeys(payload.workflow for payload in parsed.payloads))
        if isinstance(parsed, ProcessMessage):
            return [parsed.payload.workflow]
        return []

    def summary(self) -> dict[str, Any]:
        """What the message is about (payload ids or join), without its body."""
        attributes = self.message.get("Attributes", {})
        data: dict[str, Any] = {
            "message_id": self.message_id,
            "receive_count": int(attributes.get("ApproximateReceiveCount", 0)),
            "sent_timestamp": attributes.get("SentTimestamp"),
            "moved": self.moved,
            "payload_ids": [],
            "join_id": None,
            "note": None,
            "reason": self.reason,
        }
        try:
            parsed = read_message(self.message["Body"])
        except InvalidMessageError as exc:
            data["note"] = exc.reason
            data["reason"] = self.reason or exc.reason
            return data
        if isinstance(parsed, JoinMessage):
            data["payload_ids"] = [payload.id for payload in parsed.payloads]
            data["join_id"] = parsed.join_id
            if parsed.payloads_url is not None:
                data["payloads_url"] = parsed.payloads_url
        elif isinstance(parsed, JoinChunkMessage):
            data["payload_ids"] = []
            data["join_id"] = parsed.join_id
            data["payloads_url"] = parsed.join_chunk.payloads_url
        elif isinstance(parsed, JoinCancelMessage):
            data["join_id"] = parsed.join_id
        else:
            data["payload_ids"] = [parsed.payload_id]
        return data


@aws_command
def redrive(
    target: Target,
    *,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="List what would move; leave the DLQ as it is.")
    ] = False,
    limit: Annotated[
        int | None, typer.Option("--max", min=1, help="Move at most this many messages.")
    ] = None,
    json_output: Json = False,
) -> None:
    """Move messages from the process DLQ back to the process queue (after a fix).

    Each message is listed with why it is there, when that can be told: the
    tracker's invalid-message record of it (the reason its parent was told), an
    unknown workflow (no state machine for it), or a body that cannot be read.

    Examples:
      dependency-tracker redrive --dry-run
      dependency-tracker redrive --max 10 --stack-name deptrack
    """
    sqs = target.client("sqs")
    dlq_url = target.process_dlq_url
    queue_url = None if dry_run else target.process_queue_url
    attributes = sqs.get_queue_attributes(
        QueueUrl=dlq_url, AttributeNames=["ApproximateNumberOfMessages"]
    )["Attributes"]
    approximate = int(attributes.get("ApproximateNumberOfMessages", 0))
    found: dict[str, DeadLetter] = {}
    held: list[DeadLetter] = []
    with render.progress() as bar:
        task = bar.add_task("listing" if dry_run else "moving", total=limit or approximate)
        while limit is None or len(found) < limit:
            wanted = _BATCH if limit is None else min(_BATCH, limit - len(found))
            batch = [
                DeadLetter(message)
                for message in _receive(sqs, dlq_url, wanted)
                if message["MessageId"] not in found
            ]
            if not batch:
                break
            found.update((letter.message_id, letter) for letter in batch)
            if queue_url is None:
                held.extend(batch)
            else:
                _move(sqs, dlq_url, queue_url, batch)
            bar.advance(task, len(batch))
    if held:  # a dry run hid what it listed: show it again at once
        _release(sqs, dlq_url, held)
    _reasons(target, list(found.values()))
    _show(list(found.values()), dry_run=dry_run, json_output=json_output)


def _reasons(target: Target, letters: list[DeadLetter]) -> None:
    """Find why each message is in the DLQ: its invalid-message record, else its workflow."""
    if not letters:
        return
    records = target.states.batch_get(
        f"{INVALID_MESSAGE_PREFIX}{letter.message_id}" for letter in letters
    )
    machines: set[str] | None = None
    for letter in letters:
        record = records.get(f"{INVALID_MESSAGE_PREFIX}{letter.message_id}")
        if record is not None and record.last_error:
            letter.reason = record.last_error
            continue
        for workflow in letter.workflows():
            if machines is None:  # one ListStateMachines, only when a message starts one
                machines = target.state_machine_names()
            letter.reason = unknown_workflow(workflow, prefix=target.prefix, machines=machines)
            if letter.reason:
                break


def _receive(sqs: Any, queue_url: str, count: int) -> list[dict[str, Any]]:
    response = sqs.receive_message(
        QueueUrl=queue_url,
        MaxNumberOfMessages=count,
        VisibilityTimeout=_VISIBILITY_SECONDS,
        WaitTimeSeconds=1,  # long polling: a short poll may miss messages on AWS
        AttributeNames=["All"],
        MessageAttributeNames=["All"],
    )
    messages: list[dict[str, Any]] = response.get("Messages", [])
    return messages


def _move(sqs: Any, dlq_url: str, queue_url: str, batch: list[DeadLetter]) -> None:
    """Send copies to the process queue, then delete what was sent from the DLQ."""
    entries = []
    for index, letter in enumerate(batch):
        entry: dict[str, Any] = {"Id": str(index), "MessageBody": letter.message["Body"]}
        attributes = _sendable(letter.message.get("MessageAttributes"))
        if attributes:
            entry["MessageAttributes"] = attributes
        entries.append(entry)
    response = sqs.send_message_batch(QueueUrl=queue_url, Entries=entries)
    sent = [batch[int(item["Id"])] for item in response.get("Successful", [])]
    if sent:
        sqs.delete_message_batch(
            QueueUrl=dlq_url,
            Entries=[
                {"Id": str(index), "ReceiptHandle": letter.message["ReceiptHandle"]}
                for index, letter in enumerate(sent)
            ],
        )
    for letter in sent:
        letter.moved = True
    for failure in response.get("Failed", []):
        letter = batch[int(failure["Id"])]
        code, reason = failure.get("Code"), failure.get("Message")
        fail(f"SendMessageBatch: {letter.message_id}: {code}: {reason}")


def _sendable(attributes: dict[str, Any] | None) -> dict[str, Any]:
    """Message attributes as SendMessage takes them (no empty list values)."""
    return {
        name: {key: value for key, value in attribute.items() if value not in ([], None)}
        for name, attribute in (attributes or {}).items()
    }


def _release(sqs: Any, queue_url: str, letters: list[DeadLetter]) -> None:
    for start in range(0, len(letters), _BATCH):
        sqs.change_message_visibility_batch(
            QueueUrl=queue_url,
            Entries=[
                {
                    "Id": str(index),
                    "ReceiptHandle": letter.message["ReceiptHandle"],
                    "VisibilityTimeout": 0,
                }
                for index, letter in enumerate(letters[start : start + _BATCH])
            ],
        )


def _show(letters: list[DeadLetter], *, dry_run: bool, json_output: bool) -> None:
    summaries = [letter.summary() for letter in letters]
    moved = sum(letter.moved for letter in letters)
    if json_output:
        render.emit_json({"dry_run": dry_run, "moved": moved, "messages": summaries})
        return
    console = render.stdout()
    if not letters:
        console.print("the process DLQ is empty")
        return
    verb = "would move" if dry_run else "moved"
    table = Table(
        title=f"{verb} {len(letters) if dry_run else moved} message(s) to the process queue"
    )
    for column in ("message", "payloads", "receives", "reason"):
        table.add_column(column)
    for summary in summaries:
        payloads = ", ".join(summary["payload_ids"])
        if summary["join_id"]:
            payloads = f"join {summary['join_id']}: {payloads}"
        table.add_row(
            render.plain(summary["message_id"]),
            render.plain(payloads),
            str(summary["receive_count"]),
            render.clipped(summary["reason"]),
        )
    render.print_table(console, table, keys=(0, 1))
