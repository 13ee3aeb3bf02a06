"""Table items of the state table and the dependency table."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal, Self

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from dependency_tracker.models.enums import PayloadState
from dependency_tracker.tokens import token_hash

_SERIALIZER = TypeSerializer()
_DESERIALIZER = TypeDeserializer()


class TableItem(BaseModel):
    """Base for DynamoDB items: (de)serialization with the low-level type codecs."""

    model_config = ConfigDict(extra="ignore")

    def to_item(self) -> dict[str, Any]:
        """Attribute-value map for ``PutItem``, without empty attributes."""
        plain = self.model_dump(mode="json", exclude_none=True)
        return {key: _SERIALIZER.serialize(value) for key, value in plain.items()}

    @classmethod
    def from_item(cls, item: dict[str, Any]) -> Self:
        """Model from an attribute-value map (``GetItem``/``Query``/stream image)."""
        return cls.from_plain(
            {key: _DESERIALIZER.deserialize(value) for key, value in item.items()}
        )

    @classmethod
    def from_plain(cls, plain: dict[str, Any]) -> Self:
        """Model from an already deserialized image (Powertools stream records)."""
        return cls.model_validate(plain)


class PayloadStateItem(TableItem):
    """A payload's row in the state table."""

    payload_id: str
    state: PayloadState
    workflow: str
    attempt: int = 0
    execution_arn: str | None = None
    executions: list[str] = Field(default_factory=list)

    @field_validator("executions", mode="before")
    @classmethod
    def _sorted_executions(cls, value: object) -> object:
        # A DynamoDB string set arrives as a Python set: give it a stable order.
        return sorted(value) if isinstance(value, set | frozenset) else value

    created_at: datetime
    updated_at: datetime
    claimed_at: datetime | None = None
    finished_at: datetime | None = None
    last_error: str | None = None
    last_cause: str | None = None
    claim_message_id: str | None = None

    def to_item(self) -> dict[str, Any]:
        """Attribute-value map; ``executions`` is a string set (``ADD``-able)."""
        item = super().to_item()
        item.pop("executions", None)
        if self.executions:
            item["executions"] = {"SS": sorted(self.executions)}
        return item


class InvalidMessageItem(TableItem):
    """A process message that could not be used, kept in the state table for audit."""

    payload_id: str
    state: Literal[PayloadState.INVALID] = PayloadState.INVALID
    workflow: str = "invalid-message"
    attempt: int = 0
    created_at: datetime
    updated_at: datetime
    finished_at: datetime
    last_error: str | None
    message_id: str | None = None
    claimed_payload_id: str | None = None
    body_excerpt: str
    expiration_time: int


WAITER_KEY_PREFIX = "token#"


def waiter_id_for(task_token: str) -> str:
    """Sort key of a waiter: a hash, since a token may exceed the 1 KiB key limit."""
    return f"{WAITER_KEY_PREFIX}{token_hash(task_token)}"


class Resolution(BaseModel):
    """What a waiter learns when its dependency ends."""

    state: PayloadState
    execution_arn: str | None = None
    error: str | None = None
    cause: str | None = None
    replayed: bool = False

    @model_validator(mode="after")
    def _terminal(self) -> Self:
        if not self.state.is_terminal:
            msg = f"a resolution needs a terminal state, not {self.state}"
            raise ValueError(msg)
        return self

    @classmethod
    def of(cls, item: PayloadStateItem, *, replayed: bool) -> Self:
        """Resolution carried by a terminal state item."""
        return cls(
            state=item.state,
            execution_arn=item.execution_arn,
            error=item.last_error,
            cause=item.last_cause,
            replayed=replayed,
        )


class WaiterItem(TableItem):
    """A parent waiting on a payload: one row in the dependency table."""

    payload_id: str
    waiter_id: str
    task_token: str
    workflow_state: PayloadState = PayloadState.PROCESSING
    created_at: datetime
    updated_at: datetime
    parent_execution: str | None = None
    waiter_payload_id: str | None = None
    execution_arn: str | None = None
    error: str | None = None
    cause: str | None = None
    replayed: bool = False
    resolved_at: datetime | None = None
    notified_at: datetime | None = None
    notify_outcome: str | None = None
    expiration_time: int | None = None

    @property
    def resolution(self) -> Resolution | None:
        """The resolution written on the row, once it is terminal."""
        if not self.workflow_state.is_terminal:
            return None
        return Resolution(
            state=self.workflow_state,
            execution_arn=self.execution_arn,
            error=self.error,
            cause=self.cause,
            replayed=self.replayed,
        )
