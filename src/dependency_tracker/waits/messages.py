"""Process-queue messages about payloads: a payload to run and who waits on it, or a wait alone.

Join messages are in :mod:`dependency_tracker.joins.messages`;
:func:`dependency_tracker.intake.parse.read_message` reads every kind.
"""

from __future__ import annotations

from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from dependency_tracker.core.envelopes import PayloadLoader, open_body
from dependency_tracker.core.errors import InvalidMessageError
from dependency_tracker.payloads.documents import (
    dereference,
    describe,
    id_of,
    lift_payload,
    payload_from,
    token_of,
)
from dependency_tracker.payloads.kinds import MessageKind, kind_of
from dependency_tracker.payloads.model import ProcessPayload, Utf8Str

__all__ = [
    "Callback",
    "PayloadLoader",
    "ProcessMessage",
    "WaitMessage",
]


class Callback(BaseModel):
    """Who waits: the parent's task token and, where known, who the parent is."""

    model_config = ConfigDict(extra="ignore")

    task_token: Utf8Str = Field(min_length=1, max_length=8192)
    waiter_payload_id: Utf8Str | None = None
    parent_execution: Utf8Str | None = None
    # Only "keep" (the default) for a single wait: stopping a gone parent's dependencies is a
    # join's (join.on_parent_gone); "cancel" here is refused rather than silently ignored.
    on_parent_gone: Any = None

    @field_validator("on_parent_gone")
    @classmethod
    def _keep_only(cls, value: Any) -> Any:
        if value is None or value == "keep":
            return value
        msg = (
            f"only 'keep' is accepted for a single wait, got {value!r}: to stop the "
            "dependencies nobody else waits on when the parent is gone, wait with a join "
            "(join.on_parent_gone 'cancel')"
        )
        raise ValueError(msg)


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
        """Parse a queue body that must hold a single payload (a ``wait_for`` or join is refused).

        Raises:
            InvalidMessageError: The body is not a usable process message.
        """
        document = open_body(body)
        kind = kind_of(document)
        if kind is not MessageKind.PAYLOAD:
            got = "wait" if kind is MessageKind.WAIT else "join"
            raise InvalidMessageError(f"expected a payload, got a {got}")
        return cls.from_document(document, message_id=message_id, load_url=load_url)

    @classmethod
    def from_document(
        cls, document: Any, *, message_id: str | None, load_url: PayloadLoader | None
    ) -> Self:
        """Build from an already decoded (and SNS-unwrapped) body."""
        # Twice, as the parser always read it: a payload envelope's payload may be one too.
        document = lift_payload(lift_payload(document))
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

    @classmethod
    def from_document(cls, document: dict[str, Any], *, message_id: str | None) -> Self:
        """Build from an already decoded (and SNS-unwrapped) body, in a ``payload`` or not.

        Raises:
            InvalidMessageError: The wait is not usable (``DependencyInvalid``).
        """
        document = lift_payload(document)
        try:
            return cls.model_validate({**document, "message_id": message_id})
        except ValidationError as exc:
            raise InvalidMessageError(
                describe(exc, "message"), task_token=token_of(document)
            ) from exc
