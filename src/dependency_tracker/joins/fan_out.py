"""Fanning a join's chunks out: every later chunk's message, sent by the first chunk.

When a join has more members than one chunk, the invocation that registers its
first chunk finds where every later chunk starts (one streamed read of the
member list) and sends each chunk's ``join_chunk`` message itself, ten to a
``SendMessageBatch``. No chunk sends another: however long the list, a join is
three hops of the same function (the join message handed from the process queue
to the join queue, registered there, then its chunks), far below the chain
Lambda's recursive-loop detection stops (16 invocations), and chunks run side
by side.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from aws_lambda_powertools.metrics import MetricUnit

from dependency_tracker.core.errors import InvalidMessageError
from dependency_tracker.core.limits import SQS_MAX_BATCH_ENTRIES
from dependency_tracker.core.observability import logger, metrics
from dependency_tracker.joins.member_list import Position
from dependency_tracker.joins.messages import JoinChunk

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_sqs.type_defs import MessageAttributeValueTypeDef

    from dependency_tracker.joins.manifest import ManifestReader
    from dependency_tracker.joins.rows import JoinItem


# A join message handed from the process queue to the join queue keeps the id SQS gave
# it first: its members' claims name that message, so a second copy of the hand-off
# (a redelivered join message) is known for the same submission, not a new one.
ORIGIN_MESSAGE_ID = "DeptrackOriginMessageId"


class ChunkFanOut:
    """Finds every later chunk's start and sends its message to the join queue."""

    def __init__(
        self,
        *,
        manifests: ManifestReader,
        chunk_size: int,
        sqs: SQSClient | None,
        queue_url: str | None,
    ) -> None:
        self._manifests = manifests
        self.chunk_size = chunk_size
        self._sqs = sqs
        self._queue_url = queue_url

    @property
    def available(self) -> bool:
        """Whether there is a queue to send chunks (and hand joins off) through."""
        return self._sqs is not None and self._queue_url is not None

    def chunk_starts(self, join: JoinItem, rest: Position) -> list[Position]:
        """Where each chunk after the first starts: one pass over the rest of the list."""
        try:
            offsets = self._manifests.chunk_starts(
                rest.url, offset=rest.offset, limit=self.chunk_size, version=rest.version
            )
        except InvalidMessageError as exc:
            exc.task_token = exc.task_token or join.task_token
            raise
        return [Position(rest.url, offset, rest.version) for offset in offsets]

    def send_chunks(
        self, join: JoinItem, first: int, starts: list[Position], *, chunks: int | None
    ) -> None:
        """Send the ``join_chunk`` messages of chunks ``first``, ``first + 1``, ... (10 a call).

        A redelivered join message sends them again: each chunk is idempotent.
        """
        if self._sqs is None or self._queue_url is None:
            msg = "a join can only continue through the process queue"
            raise RuntimeError(msg)
        bodies = [
            json.dumps(
                {
                    "join_chunk": JoinChunk(
                        join_id=join.join_id,
                        index=first + number,
                        offset=start.offset,
                        payloads_url=start.url,
                        etag=start.version.etag if start.version else None,
                        version_id=start.version.version_id if start.version else None,
                        chunks=chunks,
                    ).model_dump(exclude_none=True)
                }
            )
            for number, start in enumerate(starts)
        ]
        for batch_start in range(0, len(bodies), SQS_MAX_BATCH_ENTRIES):
            batch = bodies[batch_start : batch_start + SQS_MAX_BATCH_ENTRIES]
            entries = {str(batch_start + number): body for number, body in enumerate(batch)}
            send_batch(self._sqs, self._queue_url, entries, what="join_chunk")
        logger.info(
            "join chunks sent",
            extra={"first_chunk": first, "sent": len(bodies), "chunks": chunks},
        )
        metrics.add_metric(name="JoinChunksSent", unit=MetricUnit.Count, value=len(bodies))

    def hand_off(self, body: str, message_id: str | None) -> None:
        """Send a join message, as it came, to the join queue, where it registers alone.

        A join message registers its first chunk and fans out the rest (seconds, more
        for a long list): on the join queue (one message per invocation) it has the
        whole invocation to itself, never a batch of other messages behind it.
        """
        if self._sqs is None or self._queue_url is None:
            msg = "a join can only be handed off through the join queue"
            raise RuntimeError(msg)
        attributes: dict[str, MessageAttributeValueTypeDef] = {}
        if message_id is not None:
            attributes[ORIGIN_MESSAGE_ID] = {"DataType": "String", "StringValue": message_id}
        self._sqs.send_message(
            QueueUrl=self._queue_url, MessageBody=body, MessageAttributes=attributes
        )
        logger.info("join message handed to the join queue")
        metrics.add_metric(name="JoinsHandedOff", unit=MetricUnit.Count, value=1)

    def send_chunk_again(
        self, join: JoinItem, index: int, start: Position, chunks: int | None
    ) -> None:
        """Send chunk ``index``'s message again: its deadline came before its starts were done.

        The next delivery finds what this one wrote (membership rows, started members)
        and carries on; nothing is failed and no receive is spent.
        """
        self.send_chunks(join, index, [start], chunks=chunks)
        metrics.add_metric(name="JoinChunksRequeued", unit=MetricUnit.Count, value=1)


def send_batch(sqs: SQSClient, queue_url: str, entries: dict[str, str], *, what: str) -> None:
    """One ``SendMessageBatch``; entries SQS failed are sent again once, then it raises.

    ``what`` names the messages in the error. Whoever sends them is retried whole
    (its message, or its record) when this raises: every message sent twice is idempotent.
    """
    pending = entries
    for attempt in range(2):
        response = sqs.send_message_batch(
            QueueUrl=queue_url,
            Entries=[{"Id": key, "MessageBody": body} for key, body in pending.items()],
        )
        failed = response.get("Failed", [])
        if not failed:
            return
        pending = {item["Id"]: entries[item["Id"]] for item in failed}
        if attempt == 1 or any(item.get("SenderFault") for item in failed):
            reasons = sorted({str(item.get("Code")) for item in failed})
            msg = f"{len(failed)} {what} message(s) not sent: {', '.join(reasons)}"
            raise RuntimeError(msg)
