"""The payload view: what an operator sees of one payload, from either state table.

Also what a payload id names (its collections and workflow), read with the
runtime's own id rule.
"""

import json
from datetime import datetime
from enum import StrEnum, unique
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field

from dependency_tracker.cirrus.models import CIRRUS_PAYLOAD_ID, CirrusStateItem
from dependency_tracker.core.enums import PayloadState
from dependency_tracker.table.items import PayloadStateItem


@unique
class PayloadSource(StrEnum):
    """Which state table a view was read from."""

    TRACKER = "tracker"
    CIRRUS = "cirrus"


# PayloadStateItem fields a view carries under its own names (the rest go to ``extra``).
_TRACKER_MAPPED = frozenset(
    {
        "payload_id",
        "state",
        "workflow",
        "attempt",
        "execution_arn",
        "executions",
        "last_error",
        "last_cause",
        "result_json",
        "created_at",
        "claimed_at",
        "updated_at",
        "finished_at",
    }
)


class PayloadView(BaseModel):
    """What an operator sees of one payload, from either state table.

    ``attempt`` is None for cirrus, which counts no attempts; ``last_cause`` is
    None for cirrus, whose ``last_error`` is its whole error text. ``extra``
    holds the source item's other fields (shown by ``--json`` only).
    """

    model_config = ConfigDict(frozen=True)

    payload_id: str
    source: PayloadSource
    table: str | None = None
    state: PayloadState
    workflow: str | None = None
    collections: str | None = None
    attempt: int | None = None
    executions: list[str] = Field(default_factory=list)
    last_execution: str | None = None
    last_error: str | None = None
    last_cause: str | None = None
    result: Any = None
    created_at: datetime | None = None
    claimed_at: datetime | None = None
    updated_at: datetime | None = None
    finished_at: datetime | None = None
    extra: dict[str, Any] = Field(default_factory=dict)

    @property
    def running(self) -> bool:
        """True while a run is claimed or in progress."""
        return self.state in (PayloadState.CLAIMED, PayloadState.PROCESSING)

    @classmethod
    def from_tracker(cls, item: PayloadStateItem, *, table: str | None = None) -> Self:
        """The view of a tracker state item."""
        dumped = item.model_dump(mode="json")
        return cls(
            payload_id=item.payload_id,
            source=PayloadSource.TRACKER,
            table=table,
            state=item.state,
            workflow=item.workflow,
            collections=_collections(item.payload_id),
            attempt=item.attempt,
            executions=item.executions,
            last_execution=item.execution_arn,
            last_error=item.last_error,
            last_cause=item.last_cause,
            result=_parsed(item.result_json),
            created_at=item.created_at,
            claimed_at=item.claimed_at,
            updated_at=item.updated_at,
            finished_at=item.finished_at,
            extra={key: value for key, value in dumped.items() if key not in _TRACKER_MAPPED},
        )

    @classmethod
    def from_cirrus(
        cls, item: CirrusStateItem, *, table: str, created: datetime | None = None
    ) -> Self:
        """The view of cirrus's item (cirrus keeps one run: its state is the last run's)."""
        collections, _, workflow = item.collections_workflow.rpartition("_")
        updated = item.updated
        return cls(
            payload_id=item.payload_id,
            source=PayloadSource.CIRRUS,
            table=table,
            state=item.state,
            workflow=workflow,
            collections=collections,
            executions=item.executions,
            last_execution=item.last_execution,
            last_error=item.last_error,
            created_at=created,
            updated_at=updated,
            finished_at=updated if item.state.is_terminal else None,
            extra={"state_updated": item.state_updated, "outputs": item.outputs},
        )

    def to_json(self) -> dict[str, Any]:
        """``--json`` view: every field, the last execution as ``execution_arn``, ``found``."""
        data = self.model_dump(mode="json", exclude={"extra", "last_execution"})
        if self.table is None:
            del data["table"]
        data["execution_arn"] = self.last_execution
        return data | self.extra | {"found": True}


def as_view(item: PayloadView | PayloadStateItem | None) -> PayloadView | None:
    """A view of either kind of item (callers that read the tracker's table themselves)."""
    if item is None or isinstance(item, PayloadView):
        return item
    return PayloadView.from_tracker(item)


# ---------------------------------------------------------------- what an id names

# An idempotency-key id (``keyed_payload_id``: ``workflow-{workflow}/key-{sha256}``) names
# its workflow but has no ``{collections}``, so cirrus's rule does not match it. It is
# the one id without collections the tracker makes, hence this prefix and ``/key-``
# are all :func:`workflow_of` accepts besides cirrus's rule.
_KEYED_ID_HEAD = "workflow-"
_KEYED_ID_DIGEST = "key-"


def collections_of(collections: str | None) -> list[str]:
    """The collections of an id's ``{collections}`` part (``/``-separated)."""
    return collections.split("/") if collections else []


def workflow_of(payload_id: str) -> str | None:
    """The workflow an id names, or None when it follows neither id rule.

    ``{collections}/workflow-{workflow}/{itemids}`` is cirrus's rule, spelled
    once in the runtime (``CIRRUS_PAYLOAD_ID``); ``workflow-{workflow}/key-...``
    is an idempotency-key id.
    """
    match = CIRRUS_PAYLOAD_ID.fullmatch(payload_id)
    if match is not None:
        return match["workflow"]
    workflow, slash, rest = payload_id.removeprefix(_KEYED_ID_HEAD).partition("/")
    keyed = payload_id.startswith(_KEYED_ID_HEAD) and slash and rest.startswith(_KEYED_ID_DIGEST)
    return workflow if keyed and workflow else None


def _collections(payload_id: str) -> str | None:
    """The ``{collections}`` part of an id that follows cirrus's rule, or None."""
    match = CIRRUS_PAYLOAD_ID.fullmatch(payload_id)
    return None if match is None else match["collections"]


def _parsed(text: str | None) -> Any:
    """A stored result (inline JSON or an ``s3://`` pointer), parsed; None when there is none."""
    if not text:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text
