"""One read model of payload state, whichever system runs the payloads.

In normal mode the tracker runs every payload and its own state table holds the
truth. In cirrus mode (docs/cirrus.md) cirrus-geo runs them and only cirrus's
state table knows how a run went; the tracker's table keeps just the records of
messages it refused. Every command reads payload state through a
:class:`PayloadReader`, which gives both as a :class:`PayloadView`, so no
command reports a payload cirrus is running as "not found".
"""

# No ``from __future__ import annotations``: Typer reads the option types at runtime.

import base64
import binascii
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum, unique
from typing import Annotated, Any, Generic, Protocol, Self, TypeVar

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


# ---------------------------------------------------------------- listing: a paged Scan

_TRACKER_KEY = ("payload_id",)
_CIRRUS_KEY = ("collections_workflow", "itemids")
# ``workflow-{workflow}/`` in an id: the cirrus rule's, or an idempotency key's.
_WORKFLOW_IN_ID = re.compile(r"(?:^|/)workflow-(?P<workflow>[^/]+)/")


T = TypeVar("T")


class InvalidNextTokenError(ValueError):
    """A ``--next-token`` this command did not print."""


def encode_token(key: dict[str, Any]) -> str:
    """A ``LastEvaluatedKey`` (or an item's key) as a ``--next-token``: base64url JSON."""
    text = json.dumps(key, sort_keys=True, separators=(",", ":"))
    return base64.urlsafe_b64encode(text.encode("utf-8")).decode("ascii").rstrip("=")


def decode_token(token: str, key_names: tuple[str, ...]) -> dict[str, Any]:
    """The ``ExclusiveStartKey`` of a ``--next-token``.

    Raises:
        InvalidNextTokenError: Not a token of this table's listing.
    """
    try:
        padded = token + "=" * (-len(token) % 4)
        key = json.loads(base64.urlsafe_b64decode(padded.encode("ascii")))
    except (ValueError, binascii.Error, UnicodeError) as exc:
        msg = f"not a next token: {token!r}"
        raise InvalidNextTokenError(msg) from exc
    if not isinstance(key, dict) or sorted(key) != sorted(key_names):
        msg = f"not a next token of this listing: {token!r}"
        raise InvalidNextTokenError(msg)
    return key


@dataclass(frozen=True)
class PageRequest:
    """How much one listing reads: ``limit`` rows, at most ``max_pages`` Scan pages."""

    limit: int = 50
    next_token: str | None = None
    max_pages: int = 20


@dataclass
class ScanResult(Generic[T]):
    """One page of a listing, and where the next one starts (None: nothing remains)."""

    rows: list[T] = field(default_factory=list)
    next_token: str | None = None
    pages: int = 0
    max_pages_reached: bool = False


@dataclass(frozen=True)
class Expression:
    """A Scan ``FilterExpression`` with its names and values (``text`` None: no filter)."""

    text: str | None = None
    names: dict[str, str] = field(default_factory=dict)
    values: dict[str, Any] = field(default_factory=dict)

    def scan_arguments(self) -> dict[str, Any]:
        """``FilterExpression`` and what it names, as ``Scan`` takes them (nothing: no filter)."""
        if self.text is None:
            return {}
        arguments: dict[str, Any] = {"FilterExpression": self.text}
        if self.names:
            arguments["ExpressionAttributeNames"] = self.names
        if self.values:
            arguments["ExpressionAttributeValues"] = self.values
        return arguments

    @classmethod
    def all_of(cls, parts: list[tuple[str, dict[str, str], dict[str, Any]]]) -> Self:
        """Every part must hold."""
        if not parts:
            return cls()
        names: dict[str, str] = {}
        values: dict[str, Any] = {}
        for _, part_names, part_values in parts:
            names.update(part_names)
            values.update(part_values)
        return cls(" AND ".join(f"({text})" for text, _, _ in parts), names, values)


def scan_page(
    client: Any,
    table: str,
    key_names: tuple[str, ...],
    expression: Expression,
    *,
    parse: Callable[[dict[str, Any]], T | None],
    keep: Callable[[T], bool],
    page: PageRequest,
) -> ScanResult[T]:
    """Up to ``page.limit`` rows that ``expression`` and ``keep`` let through.

    A paginated ``Scan``: DynamoDB applies the filter expression after reading a
    page, so every page costs its whole size whatever the filter keeps. The next
    token is the key of the last row returned when the limit cut a page short
    (a Scan resumes after any key it returned), else DynamoDB's own
    ``LastEvaluatedKey``. Past ``page.max_pages`` pages the listing stops with
    ``max_pages_reached`` and a token to go on from.
    """
    request: dict[str, Any] = {"TableName": table, **expression.scan_arguments()}
    if page.next_token is not None:
        request["ExclusiveStartKey"] = decode_token(page.next_token, key_names)
    result: ScanResult[T] = ScanResult()
    while True:
        response = client.scan(**request)
        result.pages += 1
        items: list[dict[str, Any]] = response.get("Items", [])
        last = response.get("LastEvaluatedKey")
        for index, item in enumerate(items):
            row = parse(item)
            if row is None or not keep(row):
                continue
            result.rows.append(row)
            if len(result.rows) >= page.limit:
                if index + 1 < len(items) or last:
                    result.next_token = encode_token({name: item[name] for name in key_names})
                return result
        if not last:
            return result
        request["ExclusiveStartKey"] = last
        if result.pages >= page.max_pages:
            result.next_token = encode_token(last)
            result.max_pages_reached = True
            return result


@dataclass(frozen=True)
class PayloadFilter:
    """What ``list`` and ``rerun --state`` select; empty fields select everything.

    ``older_than``/``newer_than`` are instants compared with the payload's last
    change (``updated_at``; cirrus's ``updated``); ``error`` is a substring
    (case-sensitive, as DynamoDB's ``contains``) of the last error or its cause.
    """

    states: frozenset[PayloadState] = frozenset()
    workflow: str | None = None
    collection: str | None = None
    older_than: datetime | None = None
    newer_than: datetime | None = None
    error: str | None = None

    def matches(self, view: PayloadView) -> bool:
        """True when ``view`` passes every filter (the exact check, after the Scan's)."""
        if self.states and view.state not in self.states:
            return False
        if self.workflow is not None and view.workflow != self.workflow:
            return False
        if self.collection is not None and self.collection not in collections_of(view.collections):
            return False
        if not within(view.updated_at, self.older_than, self.newer_than):
            return False
        return self.error is None or any(
            self.error in text for text in (view.last_error, view.last_cause) if text
        )

    def tracker_expression(self) -> Expression:
        """The filters the tracker's state items hold as attributes (collection: client side)."""
        parts = time_filter_parts(self, updated="updated_at")
        if self.states:
            keys = [f":state{index}" for index in range(len(self.states))]
            values = dict(zip(keys, ({"S": s.value} for s in sorted(self.states)), strict=True))
            parts.append((f"#state IN ({', '.join(keys)})", {"#state": "state"}, values))
        if self.workflow is not None:
            parts.append(
                (
                    "#workflow = :workflow",
                    {"#workflow": "workflow"},
                    {":workflow": {"S": self.workflow}},
                )
            )
        if self.error is not None:
            parts.append(
                (
                    "contains(#error, :error) OR contains(#cause, :error)",
                    {"#error": "last_error", "#cause": "last_cause"},
                    {":error": {"S": self.error}},
                )
            )
        return Expression.all_of(parts)

    def cirrus_expression(self) -> Expression:
        """The filters cirrus's items hold: the state in ``state_updated``, the rest in its key.

        ``contains`` on ``collections_workflow`` is only a first cut (the
        collections are its head, the workflow its tail): :meth:`matches` decides.
        """
        parts = time_filter_parts(self, updated="updated")
        if self.states:
            keys = [f":state{index}" for index in range(len(self.states))]
            parts.append(
                (
                    " OR ".join(f"begins_with(#state_updated, {key})" for key in keys),
                    {"#state_updated": "state_updated"},
                    {
                        key: {"S": f"{state.value}_"}
                        for key, state in zip(keys, sorted(self.states), strict=True)
                    },
                )
            )
        if self.workflow is not None:
            parts.append(
                (
                    "contains(#key, :workflow)",
                    {"#key": "collections_workflow"},
                    {":workflow": {"S": f"_{self.workflow}"}},
                )
            )
        if self.collection is not None:
            parts.append(
                (
                    "contains(#key, :collection)",
                    {"#key": "collections_workflow"},
                    {":collection": {"S": self.collection}},
                )
            )
        if self.error is not None:
            parts.append(
                (
                    "contains(#error, :error)",
                    {"#error": "last_error"},
                    {":error": {"S": self.error}},
                )
            )
        return Expression.all_of(parts)


def time_filter_parts(
    wanted: PayloadFilter, *, updated: str
) -> list[tuple[str, dict[str, str], dict[str, Any]]]:
    """``wanted``'s time filters on attribute ``updated``, on whole seconds (text order).

    Stored timestamps differ in their fraction and zone suffix (``Z``,
    ``+00:00``), which text order does not follow within one second, so the Scan
    keeps a second more and :meth:`PayloadFilter.matches` compares instants.
    """
    parts: list[tuple[str, dict[str, str], dict[str, Any]]] = []
    if wanted.older_than is not None:
        bound = _second_text(wanted.older_than + timedelta(seconds=1))
        parts.append(("#updated < :older", {"#updated": updated}, {":older": {"S": bound}}))
    if wanted.newer_than is not None:
        bound = _second_text(wanted.newer_than)
        parts.append(("#updated >= :newer", {"#updated": updated}, {":newer": {"S": bound}}))
    return parts


def _second_text(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")


def within(
    moment: datetime | None, older_than: datetime | None, newer_than: datetime | None
) -> bool:
    """True when ``moment`` is before ``older_than`` and not before ``newer_than`` (if given)."""
    if older_than is None and newer_than is None:
        return True
    if moment is None:
        return False
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    if older_than is not None and moment >= older_than:
        return False
    return newer_than is None or moment >= newer_than


def collections_of(collections: str | None) -> list[str]:
    """The collections of an id's ``{collections}`` part (``/``-separated)."""
    return collections.split("/") if collections else []


def workflow_of(payload_id: str) -> str | None:
    """The workflow an id names (``.../workflow-{workflow}/...``), or None."""
    match = _WORKFLOW_IN_ID.search(payload_id)
    return None if match is None else match["workflow"]


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
