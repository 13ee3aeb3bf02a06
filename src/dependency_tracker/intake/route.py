"""The router: each process-queue message parsed once, then handed to the flow that owns its kind.

Payloads and waits go to the waits' flow (waits/process.py), joins and their chunks to
the join registration (joins/registration.py); neither knows the other's kinds exist.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dependency_tracker.intake.parse import Message, read_message
from dependency_tracker.joins.messages import JoinCancelMessage, JoinChunkMessage, JoinMessage
from dependency_tracker.payloads.actions import ProcessAction, count
from dependency_tracker.table.items import join_partition_for

if TYPE_CHECKING:
    from dependency_tracker.intake.invalid import InvalidMessages
    from dependency_tracker.intake.last_receive import LastReceive
    from dependency_tracker.joins.cancellation import JoinCancellation
    from dependency_tracker.joins.registration import JoinRegistration
    from dependency_tracker.payloads.bucket import PayloadBucket
    from dependency_tracker.waits.process import ProcessFlow


class Intake:
    """The process function's flow: parse, route, and keep what cannot be handled."""

    def __init__(
        self,
        *,
        waits: ProcessFlow,
        joins: JoinRegistration,
        bucket: PayloadBucket,
        invalid: InvalidMessages,
        last_receive: LastReceive,
        cancellation: JoinCancellation | None = None,
    ) -> None:
        self.waits = waits
        self.joins = joins
        self.cancellation = cancellation
        self._bucket = bucket
        self.invalid = invalid
        self.last_receive = last_receive

    def parse(self, body: str, *, message_id: str | None = None) -> Message:
        """Turn a queue body into a message, reading S3 pointers.

        Raises:
            InvalidMessageError: See :func:`dependency_tracker.intake.parse.read_message`.
        """
        return read_message(body, message_id=message_id, load_url=self._bucket.read_url)

    def handle(self, message: Message) -> ProcessAction:
        """Hand the message to the flow that owns its kind.

        Raises:
            InvalidMessageError: A join reuses a ``join_id`` of another token, or a
                payload is too large to start and there is no bucket to pass it by.
            UnknownWorkflowError: No state machine for the workflow (retryable).
            TransitionConflictError: The item kept changing under us (retryable).
        """
        if isinstance(message, JoinCancelMessage):
            return self._cancel(message)
        if isinstance(message, JoinMessage | JoinChunkMessage):
            return self._join(message)
        return self.waits.handle(message)

    def hand_off(self, body: str, message_id: str | None) -> None:
        """Send a join message to the join queue, to register there alone (joins/fan_out.py)."""
        self.joins.hand_off(body, message_id)

    def _cancel(self, message: JoinCancelMessage) -> ProcessAction:
        """Fan a gone parent's join cancellation out, or stop a chunk's members."""
        if self.cancellation is None:
            msg = "join_cancel needs the joins' cancellation (the composition root builds it)"
            raise RuntimeError(msg)
        done = self.cancellation.handle(message)
        return count(
            ProcessAction.CANCELLED,
            join_partition_for(message.join_id),
            chunk=message.join_cancel.chunk,
            done=done,
        )

    def _join(self, message: JoinMessage | JoinChunkMessage) -> ProcessAction:
        """Create a join or carry on registering it (joins/registration.py)."""
        if isinstance(message, JoinMessage):
            registered = self.joins.start(message)
        else:
            registered = self.joins.resume(message)
        action = ProcessAction.JOINED if registered else ProcessAction.REFUSED
        count(action, join_partition_for(message.join_id))
        return action
