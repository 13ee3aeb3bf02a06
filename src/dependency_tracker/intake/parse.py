"""One parser for every process-queue body: out of its envelopes, classified, built once.

:func:`read_message` opens the body (:mod:`dependency_tracker.core.envelopes`), asks which
kind it is (:func:`dependency_tracker.payloads.kinds.kind_of`) and builds that kind's model,
from the feature that owns it. Every error is an :class:`InvalidMessageError` whose text
the contract promises (docs/contract.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import ValidationError

from dependency_tracker.core.envelopes import open_body
from dependency_tracker.core.errors import InvalidMessageError
from dependency_tracker.joins.messages import JoinCancelMessage, JoinChunkMessage, JoinMessage
from dependency_tracker.payloads.documents import describe
from dependency_tracker.payloads.kinds import MessageKind, kind_of
from dependency_tracker.waits.messages import ProcessMessage, WaitMessage

if TYPE_CHECKING:
    from dependency_tracker.core.envelopes import PayloadLoader

__all__ = ["JoinMessages", "Message", "WaitMessages", "read_message"]

WaitMessages = ProcessMessage | WaitMessage
"""The kinds the waits' flow handles (waits/process.py)."""

JoinMessages = JoinMessage | JoinChunkMessage | JoinCancelMessage
"""The kinds the joins handle (joins/registration.py, joins/cancellation.py)."""

Message = WaitMessages | JoinMessages
"""Every process-queue message, one model per :class:`MessageKind`."""

_Own = TypeVar("_Own", JoinChunkMessage, JoinCancelMessage)


def read_message(
    body: str, *, message_id: str | None = None, load_url: PayloadLoader | None = None
) -> Message:
    """Parse a process-queue body.

    Accepted: a payload with an optional ``callback``; ``{"url": "s3://..."}``
    pointing at one; ``{"payload": <payload or url>, "callback": {...}}``; a
    join ``{"join": {...}, "payloads": [...]}``; a wait-only reference
    ``{"wait_for": "<payload id>", "callback": {...}}``; any of them SNS-wrapped.

    Raises:
        InvalidMessageError: The body is not usable; ``task_token`` is set when
            a token could still be read, ``error_name`` says what the parent hears.
    """
    document = open_body(body)
    kind = kind_of(document)
    if kind is MessageKind.JOIN_CHUNK:
        return _own(JoinChunkMessage, document, message_id)
    if kind is MessageKind.JOIN_CANCEL:
        return _own(JoinCancelMessage, document, message_id)
    if kind is MessageKind.JOIN:
        return JoinMessage.from_document(document, message_id=message_id, load_url=load_url)
    if kind is MessageKind.WAIT:
        return WaitMessage.from_document(document, message_id=message_id)
    return ProcessMessage.from_document(document, message_id=message_id, load_url=load_url)


def _own(model: type[_Own], document: dict[str, Any], message_id: str | None) -> _Own:
    """One of the tracker's own messages; it carries no token, so nobody is told of a bad one."""
    try:
        return model.model_validate({**document, "message_id": message_id})
    except ValidationError as exc:
        raise InvalidMessageError(describe(exc, "message")) from exc
