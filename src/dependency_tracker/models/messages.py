"""Process-queue messages: envelopes around payloads and who waits on them."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dependency_tracker.errors import InvalidMessageError
from dependency_tracker.models.enums import DependencyError
from dependency_tracker.models.payload import ProcessPayload
from dependency_tracker.tokens import token_hash

PayloadLoader = Callable[[str], str]
"""Reads the text behind an ``s3://bucket/key`` url."""

JOIN_ID_PATTERN = r"^[A-Za-z0-9_.:/-]{1,200}$"


class Callback(BaseModel):
    """Who waits: the parent's task token and, where known, who the parent is."""

    model_config = ConfigDict(extra="ignore")

    task_token: str = Field(min_length=1, max_length=8192)
    waiter_payload_id: str | None = None
    parent_execution: str | None = None


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
        token = _token_of(document)
        document = _dereference(document, load_url, token)
        raw_callback = document.get("callback")
        payload_fields = {key: value for key, value in document.items() if key != "callback"}
        try:
            callback = None if raw_callback is None else Callback.model_validate(raw_callback)
        except ValidationError as exc:
            raise InvalidMessageError(
                _describe(exc, "callback"), task_token=token, payload_id=_id_of(document)
            ) from exc
        payload = _payload(payload_fields, "payload", token)
        return cls(payload=payload, callback=callback, message_id=message_id)


class WaitMessage(BaseModel):
    """``{"wait_for": "<payload id>", "callback": {...}}``: wait without starting anything.

    For payloads someone else starts, such as later steps of a chain: the
    waiter is registered and resolved when the payload ends (at once if it
    already has), but the tracker never starts it on this message's behalf.
    """

    wait_for: str = Field(min_length=1)
    callback: Callback
    message_id: str | None = None

    @property
    def payload_id(self) -> str:
        """Id of the payload waited on."""
        return self.wait_for


class JoinSpec(BaseModel):
    """The ``join`` object: one token waiting on k of the message's payloads."""

    model_config = ConfigDict(extra="ignore")

    task_token: str = Field(min_length=1, max_length=8192)
    quorum: int | None = None
    join_id: str | None = Field(default=None, pattern=JOIN_ID_PATTERN)
    waiter_payload_id: str | None = None
    parent_execution: str | None = None


class JoinMessage(BaseModel):
    """A join: ``{"join": {...}, "payloads": [payload or {"url": ...}, ...]}``."""

    join: JoinSpec
    payloads: list[ProcessPayload] = Field(min_length=1)
    duplicates: list[str] = Field(default_factory=list)
    message_id: str | None = None

    @property
    def join_id(self) -> str:
        """The join's id: given, or the hash of its task token."""
        return self.join.join_id or token_hash(self.join.task_token)

    @property
    def total(self) -> int:
        """n: distinct member payloads."""
        return len(self.payloads)

    @property
    def quorum(self) -> int:
        """k: members that must succeed (all when not given)."""
        return self.total if self.join.quorum is None else self.join.quorum

    @classmethod
    def from_document(
        cls, document: dict[str, Any], *, message_id: str | None, load_url: PayloadLoader | None
    ) -> Self:
        """Build and check a join; every problem is an ``InvalidJoin``."""
        raw_join = document.get("join")
        token = raw_join.get("task_token") if isinstance(raw_join, dict) else None
        token = token if isinstance(token, str) and token else None

        def invalid(reason: str) -> InvalidMessageError:
            return InvalidMessageError(
                reason, task_token=token, error_name=DependencyError.INVALID_JOIN
            )

        try:
            spec = JoinSpec.model_validate(raw_join)
        except ValidationError as exc:
            raise invalid(_describe(exc, "join")) from exc
        raw_payloads = document.get("payloads")
        if not isinstance(raw_payloads, list) or not raw_payloads:
            raise invalid("a join needs a non-empty 'payloads' list")
        payloads: list[ProcessPayload] = []
        duplicates: list[str] = []
        seen: set[str] = set()
        for index, raw in enumerate(raw_payloads):
            where = f"payloads[{index}]"
            if not isinstance(raw, dict):
                raise invalid(f"{where}: expected a JSON object")
            try:
                fields = _dereference(raw, load_url, token)
                payload = _payload(fields, where, token)
            except InvalidMessageError as exc:
                if exc.retryable:
                    raise
                raise invalid(exc.reason) from exc
            if payload.id in seen:
                duplicates.append(payload.id)
                continue
            seen.add(payload.id)
            payloads.append(payload)
        message = cls(join=spec, payloads=payloads, duplicates=duplicates, message_id=message_id)
        if not 1 <= message.quorum <= message.total:
            raise invalid(
                f"quorum must be between 1 and the {message.total} distinct payloads, "
                f"got {message.quorum}"
            )
        return message


def read_message(
    body: str, *, message_id: str | None = None, load_url: PayloadLoader | None = None
) -> ProcessMessage | JoinMessage | WaitMessage:
    """Parse a process-queue body.

    Accepted: a payload with an optional ``callback``; ``{"url": "s3://..."}``
    pointing at one; ``{"payload": <payload or url>, "callback": {...}}``; a
    join ``{"join": {...}, "payloads": [...]}``; a wait-only reference
    ``{"wait_for": "<payload id>", "callback": {...}}``; any of them SNS-wrapped.

    Raises:
        InvalidMessageError: The body is not usable; ``task_token`` is set when
            a token could still be read, ``error_name`` says what the parent hears.
    """
    document = _unwrap(_load_json(body, "message body"))
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
                _describe(exc, "message"), task_token=_token_of(document)
            ) from exc
    return ProcessMessage.from_document(document, message_id=message_id, load_url=load_url)


def _dereference(
    document: dict[str, Any], load_url: PayloadLoader | None, token: str | None
) -> dict[str, Any]:
    """Replace a ``{"url": "s3://..."}`` pointer with the object it points at."""
    if "url" not in document or "process" in document:
        return document
    envelope = {key: value for key, value in document.items() if key != "url"}
    url = document["url"]
    if load_url is None:
        raise InvalidMessageError("payload urls are not supported here", task_token=token)
    if not isinstance(url, str) or not url.startswith("s3://"):
        raise InvalidMessageError(f"url must be an s3:// url, got {url!r}", task_token=token)
    try:
        fetched = _unwrap(_load_json(load_url(url), f"object at {url}"))
    except InvalidMessageError as exc:
        # Keep the parent's token so it hears about the bad pointer.
        exc.task_token = exc.task_token or token
        raise
    if not isinstance(fetched, dict):
        raise InvalidMessageError(f"object at {url} is not a JSON object", task_token=token)
    return {**fetched, **envelope}


def _payload(fields: dict[str, Any], where: str, token: str | None) -> ProcessPayload:
    try:
        return ProcessPayload.model_validate(fields)
    except ValidationError as exc:
        raise InvalidMessageError(
            _describe(exc, where), task_token=token, payload_id=_id_of(fields)
        ) from exc


def _load_json(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except (json.JSONDecodeError, TypeError) as exc:
        raise InvalidMessageError(f"{what} is not valid JSON: {exc}") from exc


def _unwrap(document: Any) -> Any:
    """Strip an SNS notification envelope (raw delivery off) if there is one."""
    if (
        isinstance(document, dict)
        and document.get("Type") == "Notification"
        and isinstance(document.get("Message"), str)
    ):
        return _load_json(document["Message"], "SNS Message")
    return document


def _token_of(document: dict[str, Any]) -> str | None:
    callback = document.get("callback")
    if isinstance(callback, dict):
        token = callback.get("task_token")
        if isinstance(token, str) and token:
            return token
    return None


def _id_of(document: dict[str, Any]) -> str | None:
    value = document.get("id")
    return value if isinstance(value, str) and value else None


def _describe(exc: ValidationError, root: str) -> str:
    parts = []
    for error in exc.errors(include_url=False, include_input=False):
        where = ".".join([root, *(str(part) for part in error["loc"])])
        parts.append(f"{where}: {error['msg']}")
    return "; ".join(parts)
