"""Cirrus process payloads and the payload id rule."""

from __future__ import annotations

import hashlib
import json
from typing import Annotated, Any, Self

import jmespath
import jmespath.exceptions
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from dependency_tracker.core.enums import TERMINAL_STATES, PayloadState
from dependency_tracker.core.errors import InvalidMessageError
from dependency_tracker.table.prefixes import RESERVED_ID_PREFIXES

WORKFLOW_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
# How deeply a payload may nest objects and arrays, the payload itself being level 1. AWS
# names no bound, but pydantic's serializer stops at 255 levels and Python's json parser near
# 1,000, and a parent's state and the queue message add a few levels around a payload: 100
# leaves room for all of them and for any STAC item (a GeoJSON geometry nests 5 levels).
MAX_PAYLOAD_DEPTH = 100


def utf8_problem(text: str) -> str | None:
    """Why ``text`` cannot be encoded as UTF-8 (a lone surrogate), or None if it can.

    A JSON escape of half a surrogate pair decodes to a lone surrogate, which SQS,
    DynamoDB and Step Functions all refuse; the description escapes the character
    so it can be stored.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"lone surrogate {text[exc.start]!a} at character {exc.start}"
    return None


def _utf8(value: str) -> str:
    problem = utf8_problem(value)
    if problem is not None:
        msg = f"not encodable as UTF-8 ({problem})"
        raise ValueError(msg)
    return value


Utf8Str = Annotated[str, AfterValidator(_utf8)]
"""A string AWS can store: UTF-8 encodable (no lone surrogates)."""


def printable(text: str) -> str:
    """``text`` with anything not encodable as UTF-8 escaped, safe to log and store."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def document_problem(document: Any, *, max_depth: int | None = None) -> str | None:
    """The first reason a decoded JSON document cannot travel, or None.

    A key or string not encodable as UTF-8 (named by its path), or, with
    ``max_depth``, objects and arrays nested deeper than that. Walked without
    recursion, so any depth the JSON parser returned is safe to check.
    """
    stack: list[tuple[str, Any, int]] = [("", document, 1)]
    while stack:
        path, value, depth = stack.pop()
        if isinstance(value, str):
            problem = utf8_problem(value)
            if problem is not None:
                return f"{path or 'value'} is not encodable as UTF-8 ({problem})"
            continue
        if not isinstance(value, dict | list):
            continue
        if max_depth is not None and depth > max_depth:
            top = path.split(".", 1)[0].split("[", 1)[0]
            return (
                f"{top or 'value'} nests objects and arrays deeper than the "
                f"{max_depth} levels a payload may have"
            )
        if isinstance(value, list):
            items = [(f"{path}[{index}]", item) for index, item in enumerate(value)]
        else:
            items = []
            for key, item in value.items():
                where = f"{path}.{printable(key)}" if path else printable(key)
                problem = utf8_problem(key) if isinstance(key, str) else None
                if problem is not None:
                    return f"key {where} is not encodable as UTF-8 ({problem})"
                items.append((where, item))
        # Reversed, so the first problem in document order is the one reported.
        stack.extend((where, item, depth + 1) for where, item in reversed(items))
    return None


class Feature(BaseModel):
    """A STAC item; only ``id`` and ``collection`` matter to the tracker."""

    model_config = ConfigDict(extra="allow")

    id: Utf8Str = Field(min_length=1)
    collection: Utf8Str | None = None


class ReplaceIf(BaseModel):
    """What a rerun expects to replace: the outcome its sender saw (``process[0].replace_if``).

    A message with ``replace: true`` and ``replace_if`` starts a new attempt only
    while the payload is still in ``state`` (and, when given, at ``attempt``);
    found otherwise, it was sent for an outcome another submission has already
    replaced, and it is treated as a duplicate: its waiter hears the stored
    outcome, or waits on the running attempt (docs/idempotency.md).

    Example:
        >>> ReplaceIf(state=PayloadState.FAILED, attempt=1).holds(PayloadState.SUCCEEDED, 2)
        False
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    state: PayloadState
    # None: any attempt (cirrus-geo counts no attempts). Strict: "1" or 1.0 are not an attempt.
    attempt: int | None = Field(default=None, ge=0, strict=True)

    @field_validator("state")
    @classmethod
    def _finished(cls, value: PayloadState) -> PayloadState:
        if value not in TERMINAL_STATES:
            names = ", ".join(sorted(TERMINAL_STATES))
            msg = f"a rerun replaces a finished payload: one of {names}, not {value}"
            raise ValueError(msg)
        return value

    def holds(self, state: PayloadState, attempt: int | None) -> bool:
        """True while the payload is what the rerun saw: same state, and same attempt if given."""
        return state is self.state and (self.attempt is None or attempt == self.attempt)


class ProcessDefinition(BaseModel):
    """One step of a payload's ``process`` list (cirrus-geo compatible)."""

    model_config = ConfigDict(extra="allow")

    workflow: str = Field(pattern=WORKFLOW_PATTERN)
    upload_options: dict[str, Any] | None = None
    tasks: dict[str, Any] | None = None
    # Strict: "yes" or 1 are not a yes; a lenient cast would rerun a payload nobody asked to.
    replace: bool = Field(default=False, strict=True)
    # A rerun's expectation: replace only the outcome it saw (needs ``replace: true``).
    replace_if: ReplaceIf | None = None
    collections: list[Utf8Str] | None = None
    idempotency_key: str | None = Field(default=None, min_length=1)
    chain_filter: str | None = Field(default=None, min_length=1)

    @field_validator("collections", mode="before")
    @classmethod
    def _one_collection(cls, value: object) -> object:
        return [value] if isinstance(value, str) else value

    @model_validator(mode="after")
    def _replace_if_replaces(self) -> Self:
        if self.replace_if is not None and not self.replace:
            msg = "replace_if applies to a rerun: it needs replace: true"
            raise ValueError(msg)
        return self


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

    id: Utf8Str = ""
    type: str = "FeatureCollection"
    features: list[Feature] = Field(default_factory=list)
    process: list[ProcessDefinition] = Field(min_length=1)

    @model_validator(mode="before")
    @classmethod
    def _storable(cls, data: Any) -> Any:
        # Checked before anything else reads the payload: a lone surrogate anywhere would
        # fail every AWS call that carries it, and a payload too deep to serialise could
        # never start; neither heals on a retry.
        if isinstance(data, dict):
            problem = document_problem(data, max_depth=MAX_PAYLOAD_DEPTH)
            if problem is not None:
                raise ValueError(problem)
        return data

    @field_validator("process", mode="before")
    @classmethod
    def _legacy_process_object(cls, value: object) -> object:
        return [value] if isinstance(value, dict) else value

    @model_validator(mode="after")
    def _compute_id(self) -> Self:
        if self.id:
            if self.id.startswith(RESERVED_ID_PREFIXES):
                msg = f"payload ids may not start with {' or '.join(RESERVED_ID_PREFIXES)}"
                raise ValueError(msg)
            return self
        key = self.process[0].idempotency_key
        if key is not None:
            self.id = keyed_payload_id(
                self.model_dump(mode="json", exclude={"id"}), key, self.workflow
            )
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

    @property
    def replace_if(self) -> ReplaceIf | None:
        """The outcome a rerun expects to replace (None: any, as plain ``replace``)."""
        return self.process[0].replace_if

    def execution_input(self) -> str:
        """Canonical JSON handed to the child workflow (sorted keys, so retries match).

        Raises:
            InvalidMessageError: The payload cannot be serialised (never for a
                validated one: its depth is bounded by MAX_PAYLOAD_DEPTH).
        """
        try:
            return json.dumps(self.model_dump(mode="json", exclude_none=True), sort_keys=True)
        except (ValueError, RecursionError) as exc:
            raise InvalidMessageError(
                f"payload {printable(self.id)} cannot be serialised: {exc}",
                payload_id=self.id if utf8_problem(self.id) is None else None,
            ) from exc


def keyed_payload_id(document: dict[str, Any], expression: str, workflow: str) -> str:
    """Payload id from a JMESPath ``idempotency_key``: ``workflow-{workflow}/key-{sha256}``.

    The digest is taken over the canonical (sorted-keys, compact) JSON of what
    the expression selects, so key order and whitespace never change the id.
    """
    try:
        selected = jmespath.search(expression, document)
    except jmespath.exceptions.JMESPathError as exc:
        msg = f"idempotency_key {expression!r} is not a valid JMESPath expression: {exc}"
        raise ValueError(msg) from exc
    if selected is None or selected in ([], {}, ""):
        msg = f"idempotency_key {expression!r} selects nothing in this payload"
        raise ValueError(msg)
    canonical = json.dumps(selected, sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(canonical.encode("utf-8")).hexdigest()
    return f"workflow-{workflow}/key-{digest}"


def payload_id_for(features: list[Feature], process: ProcessDefinition) -> str:
    """The cirrus payload id rule: ``{collections}/workflow-{workflow}/{items}``."""
    if process.collections:
        collections = "/".join(process.collections)
    else:
        found = sorted({f.collection for f in features if f.collection})
        collections = "/".join(found) if found else "none"
    items = "/".join(sorted(f.id for f in features))
    return f"{collections}/workflow-{process.workflow}/{items}"


# RESERVED_ID_PREFIXES is re-exported: it was defined here before table.prefixes.
__all__ = [
    "MAX_PAYLOAD_DEPTH",
    "RESERVED_ID_PREFIXES",
    "WORKFLOW_PATTERN",
    "Feature",
    "ProcessDefinition",
    "ProcessPayload",
    "ReplaceIf",
    "Utf8Str",
    "document_problem",
    "keyed_payload_id",
    "payload_id_for",
    "printable",
    "utf8_problem",
]
