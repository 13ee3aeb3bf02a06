"""Join messages: a join (one token waiting on k of n payloads) and its chunks."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dependency_tracker.core.enums import DependencyError, utcnow
from dependency_tracker.core.envelopes import S3_SCHEME, is_s3_url
from dependency_tracker.core.errors import InvalidMessageError
from dependency_tracker.core.tokens import token_hash
from dependency_tracker.joins.deadlines import deadline_problem
from dependency_tracker.joins.rows import ParentGone
from dependency_tracker.payloads.documents import (
    PayloadLoader,
    dereference,
    describe,
    is_reference,
    join_token_of,
    payload_from,
)
from dependency_tracker.payloads.model import ProcessPayload, Utf8Str

if TYPE_CHECKING:
    from collections.abc import Callable

JOIN_ID_PATTERN = r"^[A-Za-z0-9_.:/-]{1,200}$"
# What ``$$.Execution.Id`` of a Standard workflow is (Express ones cannot wait for a token).
PARENT_EXECUTION_PATTERN = re.compile(
    r"arn:aws[a-z-]*:states:[a-z0-9-]+:\d{12}:execution:[A-Za-z0-9_-]{1,80}:[^:\s]{1,80}",
    re.ASCII,
)


def parent_gone_problem(value: Any, parent_execution: str | None) -> str | None:
    """Why ``join.on_parent_gone`` is refused; None when it may be used."""
    if value is None:
        return None
    choices = ", ".join(repr(choice.value) for choice in ParentGone)
    if not isinstance(value, str) or value not in set(ParentGone):
        return f"join.on_parent_gone must be one of {choices}, got {value!r}"
    if value == ParentGone.CANCEL:
        if parent_execution is None:
            return (
                "join.on_parent_gone 'cancel' needs join.parent_execution (the parent's "
                "$$.Execution.Id): the tracker learns the parent is gone from its execution"
            )
        if not PARENT_EXECUTION_PATTERN.fullmatch(parent_execution):
            return (
                "join.parent_execution must be a Standard workflow's execution ARN with "
                f"on_parent_gone 'cancel', got {parent_execution[:200]!r}"
            )
    return None


class JoinSpec(BaseModel):
    """The ``join`` object: one token waiting on k of the message's payloads."""

    model_config = ConfigDict(extra="ignore")

    task_token: Utf8Str = Field(min_length=1, max_length=8192)
    # Strict: true, "2" and 2.0 are refused rather than read as a k nobody wrote.
    quorum: int | None = Field(default=None, strict=True)
    join_id: str | None = Field(default=None, pattern=JOIN_ID_PATTERN)
    waiter_payload_id: Utf8Str | None = None
    parent_execution: Utf8Str | None = None
    # An RFC 3339 time or whole seconds after registration, and the successes it needs:
    # any JSON value here, checked by joins/deadlines.py so each refusal names its field.
    deadline: Any = None
    min_succeeded: Any = None
    # "keep" (the default) or "cancel": checked by parent_gone_problem, naming the field.
    on_parent_gone: Any = None


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
        if self.payloads_url is not None or any(is_reference(e) for e in self.entries):
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
        token = join_token_of(document)

        def invalid(reason: str) -> InvalidMessageError:
            return InvalidMessageError(
                reason, task_token=token, error_name=DependencyError.INVALID_JOIN
            )

        try:
            spec = JoinSpec.model_validate(document.get("join"))
        except ValidationError as exc:
            raise invalid(describe(exc, "join")) from exc
        if spec.quorum is not None and spec.quorum < 1:
            raise invalid(f"quorum must be at least 1, got {spec.quorum}")
        raw_payloads, url = document.get("payloads"), document.get("payloads_url")
        problem = deadline_problem(
            spec.deadline, spec.min_succeeded, quorum=spec.quorum, now=utcnow()
        ) or parent_gone_problem(spec.on_parent_gone, spec.parent_execution)
        if problem is not None:
            raise invalid(problem)
        if url is not None:
            if raw_payloads is not None:
                raise invalid("a join takes 'payloads' or 'payloads_url', not both")
            if not is_s3_url(url):
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
        problem = _count_problem(spec, message.total, len(raw_payloads))
        if problem is not None:
            raise invalid(problem)
        return message


class JoinChunk(BaseModel):
    """Where a join's registration goes on: chunk ``index`` starts at byte ``offset``."""

    model_config = ConfigDict(extra="ignore")

    join_id: str = Field(min_length=1)
    index: int = Field(ge=1)
    offset: int = Field(ge=0)
    payloads_url: str = Field(pattern=f"^{re.escape(S3_SCHEME)}")
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


class JoinCancel(BaseModel):
    """Stop a join's members nobody else waits on: every chunk's, or chunk ``chunk``'s."""

    model_config = ConfigDict(extra="ignore")

    join_id: str = Field(pattern=JOIN_ID_PATTERN)
    cause: str = Field(min_length=1, max_length=2048)
    chunk: int | None = Field(default=None, ge=0)


class JoinCancelMessage(BaseModel):
    """``{"join_cancel": {...}}``: the tracker's own message once a join's parent is gone.

    Without ``chunk`` it sends one message per registered chunk; with it, that
    chunk's members are stopped (joins/cancellation.py).
    """

    join_cancel: JoinCancel
    message_id: str | None = None

    @property
    def join_id(self) -> str:
        """The join being cancelled."""
        return self.join_cancel.join_id


def _count_problem(spec: JoinSpec, total: int | None, listed: int) -> str | None:
    """Why the quorum or ``min_succeeded`` asks for more than the payloads listed; None if not."""
    if total is not None and spec.quorum is not None and spec.quorum > total:
        return f"quorum must be between 1 and the {total} distinct payloads, got {spec.quorum}"
    if spec.quorum is not None and spec.quorum > listed:
        return f"quorum {spec.quorum} is more than the {listed} payloads listed"
    least = spec.min_succeeded
    if total is not None and isinstance(least, int) and least > total:
        return f"join.min_succeeded {least} is more than the {total} distinct payloads"
    return None


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
            payloads.append(payload_from(dereference(raw, load_url, task_token), label, task_token))
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
        if is_reference(raw):
            continue
        try:
            payload = payload_from(raw, where, token)
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
