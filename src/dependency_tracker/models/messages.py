"""Process-queue messages: envelopes around payloads and who waits on them."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dependency_tracker.errors import InvalidMessageError
from dependency_tracker.models.enums import DependencyError
from dependency_tracker.models.payload import (
    ProcessPayload,
    Utf8Str,
    document_problem,
    printable,
    utf8_problem,
)
from dependency_tracker.tokens import token_hash

PayloadLoader = Callable[[str], str]
"""Reads the text behind an ``s3://bucket/key`` url."""

JOIN_ID_PATTERN = r"^[A-Za-z0-9_.:/-]{1,200}$"
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

    wait_for: Utf8Str = Field(min_length=1)
    callback: Callback
    message_id: str | None = None

    @property
    def payload_id(self) -> str:
        """Id of the payload waited on."""
        return self.wait_for


class JoinSpec(BaseModel):
    """The ``join`` object: one token waiting on k of the message's payloads."""

    model_config = ConfigDict(extra="ignore")

    task_token: Utf8Str = Field(min_length=1, max_length=8192)
    # Strict: true, "2" and 2.0 are refused rather than read as a k nobody wrote.
    quorum: int | None = Field(default=None, strict=True)
    join_id: str | None = Field(default=None, pattern=JOIN_ID_PATTERN)
    waiter_payload_id: Utf8Str | None = None
    parent_execution: Utf8Str | None = None


class JoinMessage(BaseModel):
    """A join: ``{"join": {...}, "payloads": [...]}`` or ``{"join": {...}, "payloads_url": ...}``.

    Members are kept as sent (``entries``: payloads or ``{"url": ...}``
    references) and read chunk by chunk when the join is registered, so a
    message never makes one invocation read every referenced payload. Payloads
    given inline are checked here; references and manifests when they are read.
    """

    join: JoinSpec
    entries: list[dict[str, Any]] = Field(default_factory=list)
    payloads_url: str | None = None
    payloads: list[ProcessPayload] = Field(default_factory=list)  # inline ones, distinct
    duplicates: list[str] = Field(default_factory=list)
    message_id: str | None = None

    @property
    def join_id(self) -> str:
        """The join's id: given, or the hash of its task token."""
        return self.join.join_id or token_hash(self.join.task_token)

    @property
    def total(self) -> int | None:
        """n, when this message alone tells it: inline payloads and no reference."""
        if self.payloads_url is not None or any(_is_reference(e) for e in self.entries):
            return None
        return len(self.payloads)

    @property
    def quorum(self) -> int | None:
        """K as given; None means every member."""
        return self.join.quorum

    @classmethod
    def from_document(
        cls, document: dict[str, Any], *, message_id: str | None, load_url: PayloadLoader | None
    ) -> Self:
        """Build and check a join; every problem is an ``InvalidJoin``."""
        token = _join_token_of(document)

        def invalid(reason: str) -> InvalidMessageError:
            return InvalidMessageError(
                reason, task_token=token, error_name=DependencyError.INVALID_JOIN
            )

        try:
            spec = JoinSpec.model_validate(document.get("join"))
        except ValidationError as exc:
            raise invalid(_describe(exc, "join")) from exc
        if spec.quorum is not None and spec.quorum < 1:
            raise invalid(f"quorum must be at least 1, got {spec.quorum}")
        raw_payloads, url = document.get("payloads"), document.get("payloads_url")
        if url is not None:
            if raw_payloads is not None:
                raise invalid("a join takes 'payloads' or 'payloads_url', not both")
            if not isinstance(url, str) or not url.startswith("s3://"):
                raise invalid(f"payloads_url must be an s3:// url, got {url!r}")
            return cls(join=spec, payloads_url=url, message_id=message_id)
        if not isinstance(raw_payloads, list) or not raw_payloads:
            raise invalid("a join needs a non-empty 'payloads' list or a 'payloads_url'")
        payloads, duplicates = _inline_payloads(raw_payloads, token, invalid)
        message = cls(
            join=spec,
            entries=raw_payloads,
            payloads=payloads,
            duplicates=duplicates,
            message_id=message_id,
        )
        total = message.total
        if total is not None and spec.quorum is not None and spec.quorum > total:
            raise invalid(
                f"quorum must be between 1 and the {total} distinct payloads, got {spec.quorum}"
            )
        if spec.quorum is not None and spec.quorum > len(raw_payloads):
            raise invalid(
                f"quorum {spec.quorum} is more than the {len(raw_payloads)} payloads listed"
            )
        return message


class JoinChunk(BaseModel):
    """Where a join's registration goes on: chunk ``index`` starts at byte ``offset``."""

    model_config = ConfigDict(extra="ignore")

    join_id: str = Field(min_length=1)
    index: int = Field(ge=1)
    offset: int = Field(ge=0)
    payloads_url: str = Field(pattern=r"^s3://")
    # The member list's version read first: later chunks read only that version.
    etag: str | None = None
    version_id: str | None = None
    # How many chunks the member list has, set when the join's first invocation sent every
    # chunk's message itself. Absent on a message of the older chained registration, where
    # each chunk sent the next: such a chunk still does, so a join in flight finishes.
    chunks: int | None = Field(default=None, ge=2)


class JoinChunkMessage(BaseModel):
    """``{"join_chunk": {...}}``: the tracker's own message carrying on a join's registration.

    The join's first invocation sends one for every chunk after the first when its
    members do not fit one invocation; each names the member list and where its
    chunk starts.
    """

    join_chunk: JoinChunk
    message_id: str | None = None

    @property
    def join_id(self) -> str:
        """The join this chunk belongs to."""
        return self.join_chunk.join_id


def read_members(
    entries: list[dict[str, Any]],
    *,
    first_index: int,
    where: str,
    load_url: PayloadLoader | None,
    task_token: str | None,
) -> list[ProcessPayload]:
    """Turn a join's entries (payloads or ``{"url": ...}`` references) into payloads.

    ``first_index`` numbers the entries in the error message (their position in
    the whole member list), ``where`` names the list (``payloads``, a manifest url).

    Raises:
        InvalidMessageError: ``InvalidJoin`` naming the entry; retryable when a
            referenced object cannot be read yet.
    """
    payloads = []
    for position, raw in enumerate(entries, start=first_index):
        label = f"{where}[{position}]"
        if not isinstance(raw, dict):
            raise InvalidMessageError(
                f"{label}: expected a JSON object",
                task_token=task_token,
                error_name=DependencyError.INVALID_JOIN,
            )
        try:
            payloads.append(_payload(_dereference(raw, load_url, task_token), label, task_token))
        except InvalidMessageError as exc:
            if exc.retryable:
                raise
            raise InvalidMessageError(
                f"{label}: {exc.reason}",
                task_token=task_token,
                payload_id=exc.payload_id,
                error_name=DependencyError.INVALID_JOIN,
            ) from exc
    return payloads


def _inline_payloads(
    entries: list[Any], token: str | None, invalid: Callable[[str], InvalidMessageError]
) -> tuple[list[ProcessPayload], list[str]]:
    """The distinct payloads given inline (references are read later) and repeated ids."""
    payloads: list[ProcessPayload] = []
    duplicates: list[str] = []
    seen: set[str] = set()
    for index, raw in enumerate(entries):
        where = f"payloads[{index}]"
        if not isinstance(raw, dict):
            raise invalid(f"{where}: expected a JSON object")
        if _is_reference(raw):
            continue
        try:
            payload = _payload(raw, where, token)
        except InvalidMessageError as exc:
            raise InvalidMessageError(
                exc.reason,
                task_token=token,
                payload_id=exc.payload_id,
                error_name=DependencyError.INVALID_JOIN,
            ) from exc
        if payload.id in seen:
            duplicates.append(payload.id)
            continue
        seen.add(payload.id)
        payloads.append(payload)
    return payloads, duplicates


def _is_reference(entry: Any) -> bool:
    return isinstance(entry, dict) and "url" in entry and "process" not in entry


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
    document = _unwrap(_load_json(body, "message body"))
    if isinstance(document, dict):
        _check_message(document)
    if isinstance(document, dict) and "join_chunk" in document:
        try:
            return JoinChunkMessage.model_validate({**document, "message_id": message_id})
        except ValidationError as exc:
            raise InvalidMessageError(_describe(exc, "message")) from exc
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
        task_token=(_join_token_of(document) if join else None) or _token_of(document),
        payload_id=_id_of(payload) if isinstance(payload, dict) else _id_of(document),
        error_name=DependencyError.INVALID_JOIN if join else DependencyError.INVALID,
    )


def _kinds_of(document: dict[str, Any]) -> list[str]:
    """Which of MESSAGE_KINDS a document holds, by its keys as read_message dispatches."""
    kinds = [kind for kind in MESSAGE_KINDS if kind in document]
    if "payload" not in kinds and ("process" in document or "url" in document):
        kinds.append("payload")
    return kinds


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
    except RecursionError as exc:
        # Nested deeper than the parser goes (about 1,000 levels): never readable.
        raise InvalidMessageError(f"{what} nests too deeply to be read as JSON") from exc


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
    return _usable(document.get("callback"), "task_token")


def _join_token_of(document: dict[str, Any]) -> str | None:
    return _usable(document.get("join"), "task_token")


def _id_of(document: dict[str, Any]) -> str | None:
    return _usable(document, "id")


def _usable(holder: Any, key: str) -> str | None:
    """``holder[key]`` if it is a non-empty string AWS can carry (no lone surrogate)."""
    value = holder.get(key) if isinstance(holder, dict) else None
    if isinstance(value, str) and value and utf8_problem(value) is None:
        return value
    return None


# Strict type errors say what was sent instead (its JSON type, never its value).
_STRICT_TYPE_ERRORS = frozenset({"int_type", "bool_type"})


def _describe(exc: ValidationError, root: str) -> str:
    parts = []
    for error in exc.errors(include_url=False):
        where = ".".join([root, *(printable(str(part)) for part in error["loc"])])
        message = error["msg"]
        if error["type"] in _STRICT_TYPE_ERRORS:
            message = f"{message}, got {_json_type(error['input'])}"
        parts.append(f"{where}: {printable(message)}")
    return "; ".join(parts)


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    names = {str: "a string", int: "an integer", float: "a number", list: "an array"}
    return "null" if value is None else names.get(type(value), "an object")
