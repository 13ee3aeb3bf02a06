"""Cirrus process payloads and the payload id rule."""

from __future__ import annotations

import hashlib
import json
from typing import Any, Self

import jmespath
import jmespath.exceptions
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

WORKFLOW_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
# Keys the tracker uses for its own rows; a payload id cannot take them.
RESERVED_ID_PREFIXES = ("join#", "waits#", "invalid-message/")


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
    idempotency_key: str | None = Field(default=None, min_length=1)
    chain_filter: str | None = Field(default=None, min_length=1)

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

    def execution_input(self) -> str:
        """Canonical JSON handed to the child workflow (sorted keys, so retries match)."""
        return json.dumps(self.model_dump(mode="json", exclude_none=True), sort_keys=True)


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
