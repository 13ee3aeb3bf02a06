"""Process-queue messages: envelopes around payloads and who waits on them."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dependency_tracker.errors import InvalidMessageError
from dependency_tracker.models.payload import ProcessPayload


class Callback(BaseModel):
    """Who waits: the parent's task token and, where known, who the parent is."""

    model_config = ConfigDict(extra="ignore")

    task_token: str = Field(min_length=1, max_length=8192)
    waiter_payload_id: str | None = None
    parent_execution: str | None = None


PayloadLoader = Callable[[str], str]
"""Reads the text behind an ``s3://bucket/key`` url."""


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
        """Parse a queue body into a message.

        Accepted: a payload with an optional ``callback``; the same wrapped in
        an SNS notification; ``{"url": "s3://..."}`` pointing at the payload;
        or ``{"payload": <payload or url pointer>, "callback": {...}}``.

        Raises:
            InvalidMessageError: The body is not a usable process message; its
                ``task_token`` is set when a token could still be read.
        """
        document = _unwrap(_load_json(body, "message body"))
        if isinstance(document, dict) and isinstance(document.get("payload"), dict):
            # {"payload": {...}, "callback": {...}}: what a state machine's
            # sendMessage task can build around $$.Task.Token.
            document = {**document["payload"], **_envelope_fields(document)}
        if isinstance(document, dict) and "url" in document and "process" not in document:
            envelope = {key: value for key, value in document.items() if key != "url"}
            if load_url is None:
                raise InvalidMessageError(
                    "payload urls are not supported here", task_token=_token_of(document)
                )
            url = document["url"]
            if not isinstance(url, str) or not url.startswith("s3://"):
                raise InvalidMessageError(
                    f"url must be an s3:// url, got {url!r}", task_token=_token_of(document)
                )
            try:
                fetched = _unwrap(_load_json(load_url(url), f"object at {url}"))
            except InvalidMessageError as exc:
                # Keep the parent's token so it hears about the bad pointer.
                exc.task_token = exc.task_token or _token_of(document)
                raise
            if not isinstance(fetched, dict):
                raise InvalidMessageError(
                    f"object at {url} is not a JSON object", task_token=_token_of(document)
                )
            document = {**fetched, **envelope}
        if not isinstance(document, dict):
            raise InvalidMessageError(f"expected a JSON object, got {type(document).__name__}")
        token = _token_of(document)
        raw_callback = document.get("callback")
        payload_fields = {key: value for key, value in document.items() if key != "callback"}
        try:
            callback = None if raw_callback is None else Callback.model_validate(raw_callback)
        except ValidationError as exc:
            raise InvalidMessageError(
                _describe(exc, "callback"), task_token=token, payload_id=_id_of(document)
            ) from exc
        try:
            payload = ProcessPayload.model_validate(payload_fields)
        except ValidationError as exc:
            raise InvalidMessageError(
                _describe(exc, "payload"), task_token=token, payload_id=_id_of(document)
            ) from exc
        return cls(payload=payload, callback=callback, message_id=message_id)


def _envelope_fields(document: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in document.items() if key != "payload"}


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
