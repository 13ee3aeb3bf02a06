"""Table items of the state table and the dependency table."""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any, Literal, Self

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from dependency_tracker.core.enums import DependencyError, PayloadState
from dependency_tracker.core.tokens import token_hash
from dependency_tracker.table.keys import FULL_ATTRIBUTES, partition_key, sort_key
from dependency_tracker.table.prefixes import (
    EDGE_PARTITION_PREFIX,
    INVALID_MESSAGE_WORKFLOW,
    JOIN_PARTITION_PREFIX,
    JOIN_ROW_KEY,
    MEMBERSHIP_KEY_PREFIX,
    WAITER_KEY_PREFIX,
)

_SERIALIZER = TypeSerializer()
_DESERIALIZER = TypeDeserializer()


def key_attributes(**keys: str) -> dict[str, Any]:
    """``Key`` of a ``GetItem``/``UpdateItem`` (or a ``BatchGetItem`` entry) from whole key texts.

    ``payload_id`` is the partition key and ``waiter_id`` the sort key of both
    tables; each is derived with :mod:`dependency_tracker.table.keys`, so a text of
    any length finds the row :meth:`TableItem.to_item` wrote for it.
    """
    return {name: {"S": _derive(name, text)} for name, text in keys.items()}


def restore_keys(plain: dict[str, Any]) -> dict[str, Any]:
    """A deserialized item with its whole key texts in place of derived keys."""
    if not any(full in plain for full in FULL_ATTRIBUTES.values()):
        return plain
    restored = dict(plain)
    for name, full in FULL_ATTRIBUTES.items():
        if full in restored:
            restored[name] = restored.pop(full)
    return restored


def _derive(name: str, text: str) -> str:
    if name == "payload_id":
        return partition_key(text)
    if name == "waiter_id":
        return sort_key(text)
    msg = f"{name!r} is not a key attribute of the tracker's tables"
    raise ValueError(msg)


class TableItem(BaseModel):
    """Base for DynamoDB items: (de)serialization with the low-level type codecs.

    Models hold whole ids. The key attributes (``payload_id``, ``waiter_id``)
    are derived on the way out when an id is too long for a DynamoDB key, with
    the whole id beside them (:data:`dependency_tracker.table.keys.FULL_ATTRIBUTES`),
    and put back on the way in, so no flow ever sees a derived key.
    """

    model_config = ConfigDict(extra="ignore")

    def to_item(self) -> dict[str, Any]:
        """Attribute-value map for ``PutItem``, without empty attributes."""
        plain = self.model_dump(mode="json", exclude_none=True)
        item = {key: _SERIALIZER.serialize(value) for key, value in plain.items()}
        for name, full in FULL_ATTRIBUTES.items():
            text = plain.get(name)
            if isinstance(text, str) and (key := _derive(name, text)) != text:
                item[name] = {"S": key}
                item[full] = {"S": text}
        return item

    @classmethod
    def from_item(cls, item: dict[str, Any]) -> Self:
        """Model from an attribute-value map (``GetItem``/``Query``/stream image)."""
        return cls.from_plain(
            {key: _DESERIALIZER.deserialize(value) for key, value in item.items()}
        )

    @classmethod
    def from_plain(cls, plain: dict[str, Any]) -> Self:
        """Model from an already deserialized image (Powertools stream records)."""
        return cls.model_validate(restore_keys(plain))


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
    # Set when AWS refused the StartExecution of this CLAIMED attempt (an error answer:
    # nothing started), so the attempt may be started again under its name at once.
    start_refused_at: datetime | None = None
    result_json: str | None = None
    # StatusChange.run_rank of the recorded final state: a report of the same
    # execution with a lower rank (a late event from before a redrive) is refused.
    run_rank: int | None = None

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
    workflow: str = INVALID_MESSAGE_WORKFLOW
    attempt: int = 0
    created_at: datetime
    updated_at: datetime
    finished_at: datetime
    last_error: str | None
    message_id: str | None = None
    claimed_payload_id: str | None = None
    body_excerpt: str
    expiration_time: int


def waiter_id_for(task_token: str) -> str:
    """Sort key of a waiter: a hash, since a token may exceed the 1 KiB key limit."""
    return f"{WAITER_KEY_PREFIX}{token_hash(task_token)}"


class ReleaseMark(BaseModel):
    """What an operator's ``release`` writes on the rows it answered."""

    reason: str
    cause: str  # the SendTaskFailure cause the parent got
    released_by: str | None = None
    at: datetime


class Resolution(BaseModel):
    """What a waiter learns when its dependency ends."""

    state: PayloadState
    execution_arn: str | None = None
    error: str | None = None
    cause: str | None = None
    replayed: bool = False
    result_json: str | None = None  # the stored result (small JSON or an S3 pointer)

    @model_validator(mode="after")
    def _terminal(self) -> Self:
        if not self.state.is_terminal:
            msg = f"a resolution needs a terminal state, not {self.state}"
            raise ValueError(msg)
        return self

    @classmethod
    def of(cls, item: PayloadStateItem, *, replayed: bool) -> Self:
        """Resolution carried by a terminal state item."""
        failed = not item.state.is_success
        return cls(
            state=item.state,
            execution_arn=item.execution_arn,
            error=item.last_error if failed else None,
            cause=item.last_cause if failed else None,
            replayed=replayed,
            result_json=None if failed else item.result_json,
        )


class DependencyRow(TableItem):
    """Fields every dependency-table row shares: a key and a one-way resolution.

    ``waiter_id`` tells the kinds apart: ``token#<hash>`` is a parent's task
    token (:class:`WaiterItem`), ``join#<id>`` a join's membership in a payload
    (:class:`MembershipItem`), and ``join`` the join itself (:class:`JoinItem`).
    """

    payload_id: str
    waiter_id: str
    workflow_state: PayloadState = PayloadState.PROCESSING
    created_at: datetime
    updated_at: datetime
    execution_arn: str | None = None
    error: str | None = None
    cause: str | None = None
    replayed: bool = False
    result_json: str | None = None
    resolved_at: datetime | None = None
    notified_at: datetime | None = None
    notify_outcome: str | None = None
    # Set once when Step Functions refused to take the answer (the code, e.g.
    # AccessDeniedException: the parent's state machine is not one the stack may answer).
    notify_refused: str | None = None
    notify_refused_at: datetime | None = None
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
            result_json=self.result_json,
        )


class WaiterItem(DependencyRow):
    """A parent waiting on a payload with its own task token."""

    task_token: str
    parent_execution: str | None = None
    waiter_payload_id: str | None = None
    # Public error to send instead of the state's own (InvalidJoin for a bad join).
    error_name: DependencyError | None = None


def membership_id_for(join_id: str) -> str:
    """Sort key of a join's membership row under a member payload."""
    return f"{MEMBERSHIP_KEY_PREFIX}{join_id}"


def join_partition_for(join_id: str) -> str:
    """Partition key of a join's own row."""
    return f"{JOIN_PARTITION_PREFIX}{join_id}"


class MembershipItem(DependencyRow):
    """A join waiting on one of its member payloads (resolved like any waiter).

    ``chunk`` is the registration chunk that wrote it: a later chunk naming the
    same member finds the row and knows the member is a duplicate, while a
    redelivery of the same chunk knows the row is its own.
    """

    join_id: str
    chunk: int | None = None


def edge_partition_for(waiter_payload_id: str) -> str:
    """Partition of the wait edges going out of a waiting payload."""
    return f"{EDGE_PARTITION_PREFIX}{waiter_payload_id}"


def edge_id_for(via: str, depends_on: str) -> str:
    """Sort key of one edge: the waiting row's id and a hash of the payload waited on.

    Hashed because a payload id may be longer than the 1 KiB sort key limit
    allows next to a waiter id; the id itself is kept in ``depends_on``.
    """
    digest = hashlib.sha256(depends_on.encode("utf-8")).hexdigest()[:32]
    return f"{via}>{digest}"


class EdgeItem(TableItem):
    """``waiter_payload_id`` waits on ``depends_on`` through the row ``via``.

    Edges live under their own partition (``waits#{waiter}``) so the cycle check
    can follow them forward with strongly consistent ``Query`` calls. They are
    not waiter rows: they never turn terminal, so the stream filter drops them.
    """

    payload_id: str  # edge_partition_for(waiter_payload_id)
    waiter_id: str  # edge_id_for(via, depends_on)
    waiter_payload_id: str
    depends_on: str
    via: str
    # The waiter's attempt when it started waiting: a later attempt of the same
    # payload does not inherit the waits of an earlier one.
    waiter_attempt: int | None = None
    created_at: datetime
    expiration_time: int


def is_edge_item(item: dict[str, Any]) -> bool:
    """True for an attribute-value map (or plain image) of an :class:`EdgeItem`."""
    key = item.get("payload_id")
    text = key.get("S") if isinstance(key, dict) else key
    return isinstance(text, str) and text.startswith(EDGE_PARTITION_PREFIX)


# The key prefixes are re-exported: they were defined here before table.prefixes.
__all__ = [
    "EDGE_PARTITION_PREFIX",
    "JOIN_PARTITION_PREFIX",
    "JOIN_ROW_KEY",
    "MEMBERSHIP_KEY_PREFIX",
    "WAITER_KEY_PREFIX",
    "DependencyRow",
    "EdgeItem",
    "InvalidMessageItem",
    "MembershipItem",
    "PayloadStateItem",
    "Resolution",
    "TableItem",
    "WaiterItem",
    "edge_id_for",
    "edge_partition_for",
    "is_edge_item",
    "join_partition_for",
    "key_attributes",
    "membership_id_for",
    "restore_keys",
    "waiter_id_for",
]
