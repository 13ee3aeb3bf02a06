"""Pydantic models at every boundary: payloads, queue messages, table items, events.

Field and error names here are part of the public contract (``../docs/architecture.md``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from enum import StrEnum, unique
from typing import Any, Literal, Self

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from dependency_tracker.errors import InvalidMessageError
from dependency_tracker.tokens import token_hash

# --------------------------------------------------------------------------- enums


@unique
class PayloadState(StrEnum):
    """Life cycle of a payload (the cirrus v2 names)."""

    CLAIMED = "CLAIMED"
    PROCESSING = "PROCESSING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    INVALID = "INVALID"
    ABORTED = "ABORTED"

    @property
    def is_terminal(self) -> bool:
        """True once no execution of this attempt is live."""
        return self in TERMINAL_STATES

    @property
    def is_success(self) -> bool:
        """True for ``SUCCEEDED``."""
        return self is PayloadState.SUCCEEDED

    @property
    def reruns(self) -> bool:
        """True when the next submission starts a new attempt on its own."""
        return self in {PayloadState.FAILED, PayloadState.ABORTED}


TERMINAL_STATES = frozenset(
    {PayloadState.SUCCEEDED, PayloadState.FAILED, PayloadState.INVALID, PayloadState.ABORTED}
)


@unique
class DependencyError(StrEnum):
    """Error names a parent state machine can ``Catch`` (never ``States.*``)."""

    FAILED = "DependencyFailed"
    INVALID = "DependencyInvalid"
    ABORTED = "DependencyAborted"
    TIMED_OUT = "DependencyTimedOut"
    QUORUM_UNREACHABLE = "QuorumUnreachable"
    INVALID_JOIN = "InvalidJoin"
    CYCLE = "DependencyCycle"

    @classmethod
    def for_state(cls, state: PayloadState) -> DependencyError:
        """Error a waiter receives when its dependency ends in ``state``."""
        try:
            return _ERROR_FOR_STATE[state]
        except KeyError:
            msg = f"{state} is not a failure state"
            raise ValueError(msg) from None


_ERROR_FOR_STATE = {
    PayloadState.FAILED: DependencyError.FAILED,
    PayloadState.INVALID: DependencyError.INVALID,
    PayloadState.ABORTED: DependencyError.ABORTED,
}


@unique
class ExecutionStatus(StrEnum):
    """Step Functions execution statuses as EventBridge reports them."""

    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    TIMED_OUT = "TIMED_OUT"
    ABORTED = "ABORTED"
    PENDING_REDRIVE = "PENDING_REDRIVE"


# Error names a workflow raises when its input, not the run, is at fault.
INVALID_INPUT_ERRORS = frozenset(
    {
        "InvalidInput",
        "InvalidInputError",
        "cirrus.lib.errors.InvalidInput",
        "stactask.exceptions.InvalidInput",
    }
)


def utcnow() -> datetime:
    """Timezone-aware now; one place to read the clock."""
    return datetime.now(UTC)


# --------------------------------------------------------------------------- payload

WORKFLOW_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"


class Feature(BaseModel):
    """A STAC item; only ``id`` and ``collection`` matter to the tracker."""

    model_config = ConfigDict(extra="allow")

    id: str = Field(min_length=1)
    collection: str | None = None


class ProcessDefinition(BaseModel):
    """One step of a payload's ``process`` list (cirrus-geo compatible)."""

    model_config = ConfigDict(extra="allow")

    workflow: str = Field(pattern=WORKFLOW_PATTERN)
    upload_options: dict[str, Any] | None = None
    tasks: dict[str, Any] | None = None
    replace: bool = False
    collections: list[str] | None = None

    @field_validator("collections", mode="before")
    @classmethod
    def _one_collection(cls, value: object) -> object:
        return [value] if isinstance(value, str) else value


class ProcessPayload(BaseModel):
    """A cirrus-style process payload: STAC features plus what to run on them.

    ``id`` is computed with the cirrus rule when the payload does not carry one:
    ``{collections}/workflow-{workflow}/{items}``.

    Example:
        >>> ProcessPayload.model_validate(
        ...     {"features": [{"id": "a", "collection": "c"}], "process": {"workflow": "w"}}
        ... ).id
        'c/workflow-w/a'
    """

    model_config = ConfigDict(extra="allow")

    id: str = ""
    type: str = "FeatureCollection"
    features: list[Feature] = Field(default_factory=list)
    process: list[ProcessDefinition] = Field(min_length=1)

    @field_validator("process", mode="before")
    @classmethod
    def _legacy_process_object(cls, value: object) -> object:
        return [value] if isinstance(value, dict) else value

    @model_validator(mode="after")
    def _compute_id(self) -> Self:
        if self.id:
            return self
        if not self.features:
            msg = "a payload needs an 'id' or at least one feature to derive it from"
            raise ValueError(msg)
        self.id = payload_id_for(self.features, self.process[0])
        return self

    @property
    def workflow(self) -> str:
        """Workflow of the current (first) process step."""
        return self.process[0].workflow

    @property
    def replace(self) -> bool:
        """True when a finished payload should run again."""
        return self.process[0].replace

    def execution_input(self) -> str:
        """Canonical JSON handed to the child workflow (sorted keys, so retries match)."""
        return json.dumps(self.model_dump(mode="json", exclude_none=True), sort_keys=True)


def payload_id_for(features: list[Feature], process: ProcessDefinition) -> str:
    """The cirrus payload id rule: ``{collections}/workflow-{workflow}/{items}``."""
    if process.collections:
        collections = "/".join(process.collections)
    else:
        found = sorted({f.collection for f in features if f.collection})
        collections = "/".join(found) if found else "none"
    items = "/".join(sorted(f.id for f in features))
    return f"{collections}/workflow-{process.workflow}/{items}"


# --------------------------------------------------------------------------- messages


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


# --------------------------------------------------------------------------- table items

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


# --------------------------------------------------------------------------- events


class InputDetails(BaseModel):
    """Whether EventBridge carried the execution input inline."""

    included: bool = True


class StatusChange(BaseModel):
    """``detail`` of a "Step Functions Execution Status Change" event."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    execution_arn: str = Field(alias="executionArn")
    state_machine_arn: str = Field(alias="stateMachineArn")
    name: str
    status: ExecutionStatus
    start_date: int | None = Field(default=None, alias="startDate")
    stop_date: int | None = Field(default=None, alias="stopDate")
    input: str | None = None
    input_details: InputDetails = Field(default_factory=InputDetails, alias="inputDetails")
    output: str | None = None
    error: str | None = None
    cause: str | None = None

    @property
    def state_machine_name(self) -> str:
        """Name part of the state machine ARN."""
        return self.state_machine_arn.rsplit(":", 1)[-1]

    @property
    def final_state(self) -> PayloadState | None:
        """Payload state this status ends in, or None while the execution lives."""
        match self.status:
            case ExecutionStatus.SUCCEEDED:
                return PayloadState.SUCCEEDED
            case ExecutionStatus.FAILED if self.error in INVALID_INPUT_ERRORS:
                return PayloadState.INVALID
            case ExecutionStatus.FAILED | ExecutionStatus.TIMED_OUT:
                return PayloadState.FAILED
            case ExecutionStatus.ABORTED:
                return PayloadState.ABORTED
            case _:
                return None

    @property
    def failure_error(self) -> str | None:
        """Error to record for a failed run (Step Functions names timeouts itself)."""
        if self.status is ExecutionStatus.TIMED_OUT:
            return self.error or "States.Timeout"
        if self.status is ExecutionStatus.ABORTED:
            return self.error or "Aborted"
        return self.error


# --------------------------------------------------------------------------- callback outputs


class CallbackSuccess(BaseModel):
    """Output sent with ``SendTaskSuccess`` for a single wait."""

    payload_id: str
    state: Literal[PayloadState.SUCCEEDED] = PayloadState.SUCCEEDED
    execution_arn: str | None
    replayed: bool
    result: dict[str, Any] | None = None


class CallbackFailure(BaseModel):
    """``SendTaskFailure`` error name and the JSON cause a parent can read."""

    error: DependencyError
    payload_id: str
    state: PayloadState
    execution_arn: str | None
    payload_error: str | None = None
    payload_cause: str | None = None

    def cause_json(self) -> str:
        """The cause: payload id, final state and its last error, as JSON."""
        return json.dumps(
            {
                "payload_id": self.payload_id,
                "state": self.state,
                "execution_arn": self.execution_arn,
                "error": self.payload_error,
                "cause": self.payload_cause,
            }
        )
