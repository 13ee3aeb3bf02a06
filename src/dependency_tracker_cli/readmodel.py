"""One read model of payload state, whichever system runs the payloads.

In normal mode the tracker runs every payload and its own state table holds the
truth. In cirrus mode (docs/cirrus.md) cirrus-geo runs them and only cirrus's
state table knows how a run went; the tracker's table keeps just the records of
messages it refused. Every command reads payload state through a
:class:`PayloadReader`, which gives both as a :class:`PayloadView`, so no
command reports a payload cirrus is running as "not found".
"""

# No ``from __future__ import annotations``: Typer reads the option types at runtime.

import json
from collections.abc import Iterable
from datetime import datetime
from enum import StrEnum, unique
from typing import Annotated, Any, Protocol, Self

import typer
from pydantic import BaseModel, ConfigDict, Field

from dependency_tracker.cirrus.models import (
    CIRRUS_PAYLOAD_ID,
    CirrusStateItem,
    cirrus_id_problem,
    cirrus_key,
)
from dependency_tracker.core import settings
from dependency_tracker.core.enums import PayloadState
from dependency_tracker.payloads.state_table import StateTable
from dependency_tracker.table.dynamodb import batch_get
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


class PayloadReader(Protocol):
    """Reads payload state in batches; ids it does not know are left out."""

    @property
    def source(self) -> PayloadSource:
        """The table a payload missing from :meth:`get_many` is missing from."""
        ...

    def get_many(self, payload_ids: Iterable[str]) -> dict[str, PayloadView]:
        """Views of the known payloads among ``payload_ids`` (strongly consistent)."""
        ...


class TrackerReader:
    """Normal mode: the tracker's own state table."""

    source = PayloadSource.TRACKER

    def __init__(self, states: StateTable) -> None:
        self.states = states

    def get_many(self, payload_ids: Iterable[str]) -> dict[str, PayloadView]:
        """Views of the known payloads among ``payload_ids``."""
        found = self.states.batch_get(payload_ids)
        table = self.states.table_name
        return {pid: PayloadView.from_tracker(item, table=table) for pid, item in found.items()}


class CirrusReader:
    """Cirrus mode: cirrus's state table, then the tracker's for what cirrus never saw.

    A payload the tracker refused (an invalid message) has a record only in the
    tracker's table; ids cirrus cannot key are read from there alone.
    """

    source = PayloadSource.CIRRUS

    def __init__(self, client: Any, table_name: str, tracker: TrackerReader) -> None:
        self._client = client
        self.table_name = table_name
        self.tracker = tracker

    def get_many(self, payload_ids: Iterable[str]) -> dict[str, PayloadView]:
        """Views of the known payloads among ``payload_ids``: cirrus's item wins."""
        wanted = list(dict.fromkeys(payload_ids))
        keyed = {_key_text(cirrus_key(pid)): pid for pid in wanted if _cirrus_can_key(pid)}
        keys = [
            {name: {"S": value} for name, value in cirrus_key(pid).items()}
            for pid in keyed.values()
        ]
        found: dict[str, PayloadView] = {}
        for raw in batch_get(self._client, self.table_name, keys):
            item = CirrusStateItem.from_item(raw)
            key = {"collections_workflow": item.collections_workflow, "itemids": item.itemids}
            pid = keyed.get(_key_text(key), item.payload_id)
            created = _timestamp(raw.get("created", {}).get("S"))
            found[pid] = PayloadView.from_cirrus(item, table=self.table_name, created=created)
        rest = [pid for pid in wanted if pid not in found]
        if rest:
            found.update(self.tracker.get_many(rest))
        return found


def _cirrus_can_key(payload_id: str) -> bool:
    match = CIRRUS_PAYLOAD_ID.fullmatch(payload_id)
    return match is not None and cirrus_id_problem(payload_id, match["workflow"]) is None


def _key_text(key: dict[str, str]) -> str:
    return json.dumps(key, sort_keys=True)


def _collections(payload_id: str) -> str | None:
    """The ``{collections}`` part of an id that follows cirrus's rule, or None."""
    match = CIRRUS_PAYLOAD_ID.fullmatch(payload_id)
    return None if match is None else match["collections"]


def _timestamp(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


def _parsed(text: str | None) -> Any:
    """A stored result (inline JSON or an ``s3://`` pointer), parsed; None when there is none."""
    if not text:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def as_view(item: PayloadView | PayloadStateItem | None) -> PayloadView | None:
    """A view of either kind of item (callers that read the tracker's table themselves)."""
    if item is None or isinstance(item, PayloadView):
        return item
    return PayloadView.from_tracker(item)


# ---------------------------------------------------------------- command-line options

CirrusPrefix = Annotated[
    str | None,
    typer.Option(
        "--cirrus-prefix",
        metavar="PREFIX",
        help="Cirrus mode: read payload state from cirrus-geo's state table {PREFIX}-state "
        "(default: the stack's CirrusStateTableName output, else "
        f"${settings.ENV_CIRRUS_STATE_TABLE}).",
        rich_help_panel="Where",
        show_default=False,
    ),
]
# The variable the deployed Lambdas read; hidden, as the table name rarely differs from
# {CirrusPrefix}-state (--cirrus-prefix says so for the command line).
CirrusStateTableName = Annotated[
    str | None,
    typer.Option(
        "--cirrus-state-table",
        envvar=settings.ENV_CIRRUS_STATE_TABLE,
        hidden=True,
        show_default=False,
    ),
]
