"""The last receive: a message about to go to the DLQ has its parent answered first.

The message still goes to the DLQ (the handler raises): this only makes sure its
parent is not left to its callback timeout (docs/reliability.md, "The last receive").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_lambda_powertools.metrics import MetricUnit

from dependency_tracker.core.enums import DependencyError, PayloadState
from dependency_tracker.core.errors import InvalidMessageError
from dependency_tracker.core.observability import logger, metrics
from dependency_tracker.intake.invalid import redact_tokens, token_to_answer
from dependency_tracker.joins.messages import JoinCancelMessage, JoinChunkMessage, JoinMessage
from dependency_tracker.waits.messages import ProcessMessage, WaitMessage

if TYPE_CHECKING:
    from dependency_tracker.intake.invalid import InvalidMessages
    from dependency_tracker.intake.parse import Message
    from dependency_tracker.joins.store import JoinStore


class LastReceive:
    """Answers the parent of a message failing its last receive."""

    def __init__(self, *, invalid: InvalidMessages, joins: JoinStore) -> None:
        self.invalid = invalid
        self.joins = joins

    def answer(
        self,
        *,
        body: str,
        message_id: str | None,
        message: Message | None,
        reason: str,
        receive_count: int,
        task_token: str | None = None,
    ) -> bool:
        """Tell the parent of a message failing its last receive why; False if none can be told.

        A join is decided ``FAILED``/``InvalidJoin`` (a ``join_chunk`` carries no token:
        the join row does); a payload or wait is answered ``DependencyInvalid`` through an
        invalid-message record, as :meth:`InvalidMessages.record` does. ``message`` is
        None when the body could not be parsed; the token is then read from the body if
        it can be (or given, ``task_token``).
        """
        cause = (
            f"{reason} (failed on receive {receive_count}, the last the process queue "
            "allows: the message is kept in its dead-letter queue)"
        )
        if isinstance(message, JoinChunkMessage):
            return self._fail_join(message.join_id, cause, token=None)
        if isinstance(message, JoinCancelMessage):
            # The join was decided when its parent went: nobody waits for an answer. The
            # members it did not stop run on; the DLQ keeps the message for a redrive.
            logger.error("join cancellation failed on its last receive", extra={"reason": reason})
            return False
        token: str | None
        if isinstance(message, JoinMessage):
            token, error = message.join.task_token, DependencyError.INVALID_JOIN
            if self._fail_join(message.join_id, cause, token=token):
                return True
        elif message is not None and message.callback is not None:
            token, error = message.callback.task_token, DependencyError.INVALID
        else:
            found, error = token_to_answer(body)
            token = task_token or found
        if token is None:
            logger.error("last receive failed: no parent to answer", extra={"reason": reason})
            return False
        # The reason may quote the body (an AWS error's message): no token is kept as text.
        cause = redact_tokens(cause, token)
        payload_id = (
            message.payload_id if isinstance(message, ProcessMessage | WaitMessage) else None
        )
        self.invalid.record(
            InvalidMessageError(cause, task_token=token, payload_id=payload_id, error_name=error),
            body=body,
            message_id=message_id,
        )
        metrics.add_metric(name="LastReceiveAnswers", unit=MetricUnit.Count, value=1)
        return True

    def _fail_join(self, join_id: str, cause: str, *, token: str | None) -> bool:
        """Decide a registering join ``InvalidJoin``; False if it is not there or not ``token``'s.

        An already decided join was answered before: True, nothing more to do.
        """
        join = self.joins.get(join_id)
        if join is None or (token is not None and not join.holds(token)):
            return False
        cause = redact_tokens(cause, join.task_token)
        if self.joins.decide_join(
            join_id, PayloadState.FAILED, error=DependencyError.INVALID_JOIN, cause=cause
        ):
            logger.error("join failed on its last receive", extra={"reason": cause})
            metrics.add_metric(name="LastReceiveAnswers", unit=MetricUnit.Count, value=1)
        return True
