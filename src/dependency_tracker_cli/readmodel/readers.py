"""The two readers of payload state: the tracker's state table, and cirrus's before it.

Also the command-line options that point a command at cirrus's table.
"""

# No ``from __future__ import annotations``: Typer reads the option types at runtime.

import json
from collections.abc import Iterable
from datetime import datetime
from typing import Annotated, Any, Protocol

import typer

from dependency_tracker.cirrus.models import (
    CIRRUS_PAYLOAD_ID,
    CirrusStateItem,
    cirrus_id_problem,
    cirrus_key,
)
from dependency_tracker.core import settings
from dependency_tracker.payloads.state_table import StateTable
from dependency_tracker.table.dynamodb import batch_get
from dependency_tracker.table.items import PayloadStateItem
from dependency_tracker_cli.readmodel.filters import PayloadFilter
from dependency_tracker_cli.readmodel.paging import PageRequest, ScanResult, scan_page
from dependency_tracker_cli.readmodel.view import PayloadSource, PayloadView

_TRACKER_KEY = ("payload_id",)
_CIRRUS_KEY = ("collections_workflow", "itemids")


class PayloadReader(Protocol):
    """Reads payload state in batches; ids it does not know are left out."""

    @property
    def source(self) -> PayloadSource:
        """The table a payload missing from :meth:`get_many` is missing from."""
        ...

    def get_many(self, payload_ids: Iterable[str]) -> dict[str, PayloadView]:
        """Views of the known payloads among ``payload_ids`` (strongly consistent)."""
        ...

    def scan(self, wanted: PayloadFilter, page: PageRequest) -> ScanResult[PayloadView]:
        """One page of the payloads ``wanted`` selects (a paged ``Scan`` of the table)."""
        ...


class TrackerReader:
    """Normal mode: the tracker's own state table."""

    source = PayloadSource.TRACKER

    def __init__(self, states: StateTable, client: Any = None) -> None:
        self.states = states
        # StateTable keeps its client to itself; a listing scans the same table with it.
        self._client = client if client is not None else states._client

    def get_many(self, payload_ids: Iterable[str]) -> dict[str, PayloadView]:
        """Views of the known payloads among ``payload_ids``."""
        found = self.states.batch_get(payload_ids)
        table = self.states.table_name
        return {pid: PayloadView.from_tracker(item, table=table) for pid, item in found.items()}

    def scan(self, wanted: PayloadFilter, page: PageRequest) -> ScanResult[PayloadView]:
        """One page of the tracker's payloads ``wanted`` selects."""
        table = self.states.table_name

        def view(item: dict[str, Any]) -> PayloadView | None:
            try:
                return PayloadView.from_tracker(PayloadStateItem.from_item(item), table=table)
            except ValueError:  # not a payload's item: nothing to list
                return None

        return scan_page(
            self._client,
            table,
            _TRACKER_KEY,
            wanted.tracker_expression(),
            parse=view,
            keep=wanted.matches,
            page=page,
        )


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

    def scan(self, wanted: PayloadFilter, page: PageRequest) -> ScanResult[PayloadView]:
        """One page of cirrus's payloads ``wanted`` selects (cirrus's table only)."""

        def view(item: dict[str, Any]) -> PayloadView | None:
            try:
                parsed = CirrusStateItem.from_item(item)
                created = _timestamp(item.get("created", {}).get("S"))
                return PayloadView.from_cirrus(parsed, table=self.table_name, created=created)
            except ValueError:
                return None

        return scan_page(
            self._client,
            self.table_name,
            _CIRRUS_KEY,
            wanted.cirrus_expression(),
            parse=view,
            keep=wanted.matches,
            page=page,
        )


def _cirrus_can_key(payload_id: str) -> bool:
    match = CIRRUS_PAYLOAD_ID.fullmatch(payload_id)
    return match is not None and cirrus_id_problem(payload_id, match["workflow"]) is None


def _key_text(key: dict[str, str]) -> str:
    return json.dumps(key, sort_keys=True)


def _timestamp(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


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
