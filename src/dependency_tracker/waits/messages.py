"""Process-queue messages: envelopes around payloads and who waits on them.

Join messages are in :mod:`dependency_tracker.joins.messages`; :func:`read_message`
reads every kind.
"""

from __future__ import annotations

from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dependency_tracker.core.enums import DependencyError
from dependency_tracker.core.errors import InvalidMessageError
from dependency_tracker.joins.messages import JoinChunkMessage, JoinMessage
from dependency_tracker.payloads.documents import (
    PayloadLoader,
    dereference,
    describe,
    id_of,
    join_token_of,
    load_json,
    payload_from,
    token_of,
    unwrap,
)
from dependency_tracker.payloads.model import ProcessPayload, Utf8Str, document_problem

__all__ = [
    "MESSAGE_KINDS",
    "Callback",
    "JoinChunkMessage",
    "JoinMessage",
    "PayloadLoader",
    "ProcessMessage",
    "WaitMessage",
    "read_message",
]

# What a message is about; it must be about exactly one of them. A bare payload (or its
# {"url"}) counts as "payload".
MESSAGE_KINDS = ("payload", "join", "wait_for", "join_chunk")


class Callback(BaseModel):
    """Who waits: the parent's task token and, where known, who the parent is."""

    model_config = ConfigDict(extra="ignore")

    task_token: Utf8Str = Field(min_length=1, max_length=8192)
    waiter_payload_id: Utf8Str | None = None
    parent_execution: Utf8Str | None = None


class ProcessMessage(BaseModel):
    """One process-queue message: the payload and, optionally, its waiter."""

    payload: ProcessPayload
    callback: Callback | None = None
    message_id: str | None = None

    @property
    def payload_id(self) -> str:
        """Id of the payload this message is about."""
        return self.payload.id

    @classmethod
    def from_body(
        cls, body: str, *, message_id: str | None = None, load_url: PayloadLoader | None = None
    ) -> Self:
        """Parse a queue body that must hold a single payload (see :func:`read_message`).

        Raises:
            InvalidMessageError: The body is not a usable process message.
        """
        message = read_message(body, message_id=message_id, load_url=load_url)
        if not isinstance(message, cls):
            raise InvalidMessageError("expected a payload, got a join")
        return message

    @classmethod
    def from_document(
        cls, document: Any, *, message_id: str | None, load_url: PayloadLoader | None
    ) -> Self:
        """Build from an already decoded (and SNS-unwrapped) body."""
        if isinstance(document, dict) and isinstance(document.get("payload"), dict):
            # {"payload": {...}, "callback": {...}}: what a state machine's
            # sendMessage task can build around $$.Task.Token.
            envelope = {key: value for key, value in document.items() if key != "payload"}
            document = {**document["payload"], **envelope}
        if not isinstance(document, dict):
            raise InvalidMessageError(f"expected a JSON object, got {type(document).__name__}")
        token = token_of(document)
        document = dereference(document, load_url, token)
        raw_callback = document.get("callback")
        payload_fields = {key: value for key, value in document.items() if key != "callback"}
        try:
            callback = None if raw_callback is None else Callback.model_validate(raw_callback)
        except ValidationError as exc:
            raise InvalidMessageError(
                describe(exc, "callback"), task_token=token, payload_id=id_of(document)
            ) from exc
        payload = payload_from(payload_fields, "payload", token)
        return cls(payload=payload, callback=callback, message_id=message_id)


class WaitMessage(BaseModel):
    """``{"wait_for": "<payload id>", "callback": {...}}``: wait without starting anything.

    For payloads someone else starts, such as later steps of a chain: the
    waiter is registered and resolved when the payload ends (at once if it
    already has), but the tracker never starts it on this message's behalf.
    """

    wait_for: Utf8Str = Field(min_length=1)
    callback: Callback
    message_id: str | None = None

    @property
    def payload_id(self) -> str:
        """Id of the payload waited on."""
        return self.wait_for


def read_message(
    body: str, *, message_id: str | None = None, load_url: PayloadLoader | None = None
) -> ProcessMessage | JoinMessage | JoinChunkMessage | WaitMessage:
    """Parse a process-queue body.

    Accepted: a payload with an optional ``callback``; ``{"url": "s3://..."}``
    pointing at one; ``{"payload": <payload or url>, "callback": {...}}``; a
    join ``{"join": {...}, "payloads": [...]}``; a wait-only reference
    ``{"wait_for": "<payload id>", "callback": {...}}``; any of them SNS-wrapped.

    Raises:
        InvalidMessageError: The body is not usable; ``task_token`` is set when
            a token could still be read, ``error_name`` says what the parent hears.
    """
    document = unwrap(load_json(body, "message body"))
    if isinstance(document, dict):
        _check_message(document)
    if isinstance(document, dict) and "join_chunk" in document:
        try:
            return JoinChunkMessage.model_validate({**document, "message_id": message_id})
        except ValidationError as exc:
            raise InvalidMessageError(describe(exc, "message")) from exc
    if isinstance(document, dict) and "join" in document:
        return JoinMessage.from_document(document, message_id=message_id, load_url=load_url)
    if isinstance(document, dict) and isinstance(document.get("payload"), dict):
        # {"payload": {...}, "callback": {...}}: what a state machine's
        # sendMessage task can build around $$.Task.Token.
        envelope = {key: value for key, value in document.items() if key != "payload"}
        document = {**document["payload"], **envelope}
    if isinstance(document, dict) and "wait_for" in document:
        try:
            return WaitMessage.model_validate({**document, "message_id": message_id})
        except ValidationError as exc:
            raise InvalidMessageError(
                describe(exc, "message"), task_token=token_of(document)
            ) from exc
    return ProcessMessage.from_document(document, message_id=message_id, load_url=load_url)


def _check_message(document: dict[str, Any]) -> None:
    """Refuse, naming the field, a message about more than one thing or that AWS cannot carry.

    Each kind used to take precedence over the others, silently dropping the
    rest (a payload sent beside a ``wait_for`` never ran). The parent hears
    why: ``InvalidJoin`` when a join is involved, ``DependencyInvalid`` otherwise.
    """
    kinds = _kinds_of(document)
    payload = document.get("payload")
    if isinstance(payload, dict):
        # {"payload": {"wait_for": ...}} is how a parent's Map sends a wait: what the
        # envelope holds counts, not the envelope itself.
        kinds = [kind for kind in kinds if kind != "payload"] + _kinds_of(payload)
    problem = None
    if len(set(kinds)) > 1:
        names = " and ".join(f"'{kind}'" for kind in dict.fromkeys(kinds))
        problem = f"a message carries one of {', '.join(MESSAGE_KINDS)}; this one has {names}"
    if problem is None:
        problem = document_problem(document)
    if problem is None:
        return
    join = "join" in kinds
    raise InvalidMessageError(
        problem,
        task_token=(join_token_of(document) if join else None) or token_of(document),
        payload_id=id_of(payload) if isinstance(payload, dict) else id_of(document),
        error_name=DependencyError.INVALID_JOIN if join else DependencyError.INVALID,
    )


def _kinds_of(document: dict[str, Any]) -> list[str]:
    """Which of MESSAGE_KINDS a document holds, by its keys as read_message dispatches."""
    kinds = [kind for kind in MESSAGE_KINDS if kind in document]
    if "payload" not in kinds and ("process" in document or "url" in document):
        kinds.append("payload")
    return kinds
