"""View models of the ``ui`` page, built from the CLI's read model (nothing here renders HTML)."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC
from typing import TYPE_CHECKING, Generic, TypeVar

from dependency_tracker.core.enums import PayloadState, utcnow
from dependency_tracker.joins.rows import JoinItem
from dependency_tracker_cli.readmodel import PageRequest, PayloadFilter, PayloadView
from dependency_tracker_cli.ui import joins
from dependency_tracker_cli.ui.links import Execution, execution_link
from dependency_tracker_cli.waitgraph import (
    JOIN,
    Failure,
    StuckParent,
    WaitGraph,
    describe_parents,
    failure_of,
)

if TYPE_CHECKING:
    from collections.abc import Sequence
    from datetime import datetime, timedelta

    from dependency_tracker_cli.target import Target

T = TypeVar("T")
PAGE_SIZE = 25
# Rows of one Scan page while counting (the state table is read whole for the counts).
_SCAN_LIMIT = 1000


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of a section's rows, and how many rows the section has."""

    rows: list[T]
    number: int
    pages: int
    total: int

    @property
    def previous(self) -> int | None:
        """The previous page's number, or None on the first."""
        return self.number - 1 if self.number > 1 else None

    @property
    def next(self) -> int | None:
        """The next page's number, or None on the last."""
        return self.number + 1 if self.number < self.pages else None


def paged(rows: Sequence[T], number: int, size: int = PAGE_SIZE) -> Page[T]:
    """Page ``number`` (from 1, clamped to the pages there are) of ``rows``."""
    pages = max(1, math.ceil(len(rows) / size))
    number = min(max(1, number), pages)
    start = (number - 1) * size
    return Page(list(rows[start : start + size]), number, pages, len(rows))


@dataclass(frozen=True)
class StateCount:
    """Payloads of one workflow and collection in one state."""

    workflow: str
    collections: str
    state: str
    count: int


@dataclass(frozen=True)
class Waiting:
    """A parent and one thing it waits on."""

    parent: str
    execution: Execution | None
    waits_on: str
    kind: str
    state: str | None
    # The whole label (a join's full id), shown as the tooltip of a shortened one.
    full: str = ""


@dataclass(frozen=True)
class StuckRow:
    """A stuck parent, why it still waits (or ended), and the causes known."""

    parent: str
    execution: Execution | None
    waiting_seconds: int
    status: str
    reason: str | None
    failure: Failure | None
    holds: list[tuple[str, str | None, str, Failure | None]] = field(default_factory=list)


@dataclass
class Snapshot:
    """What one request reads: the live wait graph, the join rows listed and the payload views."""

    graph: WaitGraph
    payloads: list[PayloadView]
    joins: list[JoinItem] = field(default_factory=list)
    read_at: datetime = field(default_factory=utcnow)
    # Each listed join's counts (succeeded, failed), read with its row in the same request.
    counts: dict[str, tuple[int, int]] = field(default_factory=dict)


def read_snapshot(target: Target, decided_window: timedelta = joins.DECIDED_WINDOW) -> Snapshot:
    """The live graph (payload states set), the joins listed and every payload's view.

    One ``Scan`` of the dependency table: the rows not answered yet, and the join
    rows decided within ``decided_window`` (the graph keeps only the former). Each
    join found is then read again with its counts, and that row is the one listed,
    so the summary and the Joins section agree on which joins still run.
    """
    now = utcnow()
    pages = target.dependencies.scan_pages(
        unnotified_only=True, joins_decided_since=now - decided_window
    )
    rows = [row for page in pages for row in page]
    graph = WaitGraph.from_rows(rows)
    reader = target.payloads
    graph.set_states(reader.get_many(graph.payload_ids()), source=reader.source)
    fresh, counts = joins.read_joins(target, [row for row in rows if isinstance(row, JoinItem)])
    listed = joins.listed(fresh, now, decided_window)
    return Snapshot(graph, all_payloads(target), listed, now, counts)


def all_payloads(target: Target) -> list[PayloadView]:
    """Every payload's view (a paged Scan of the state table), sorted by payload id."""
    views: list[PayloadView] = []
    token: str | None = None
    while True:
        result = target.payloads.scan(
            PayloadFilter(), PageRequest(limit=_SCAN_LIMIT, next_token=token)
        )
        views.extend(result.rows)
        token = result.next_token
        if token is None:
            return sorted(views, key=lambda view: view.payload_id)


def state_counts(payloads: Sequence[PayloadView]) -> list[StateCount]:
    """Payload counts by workflow, collection and state."""
    counts = Counter(
        (view.workflow or "?", view.collections or "?", view.state.value) for view in payloads
    )
    return [StateCount(*key, count) for key, count in sorted(counts.items())]


def waiting(target: Target, graph: WaitGraph) -> list[Waiting]:
    """Each parent and what it waits on (a payload, or a join), parents in name order."""
    rows: list[Waiting] = []
    for edge in graph.edges:
        source = graph.nodes[edge.source]
        if source.kind == JOIN:
            continue
        dependency = graph.nodes[edge.target]
        arn = source.parent_arn
        label = dependency.label
        if dependency.kind == JOIN:  # "join 3f2a9c1d: 2 of 3 needed", the whole id in the tooltip
            join_id = str(dependency.detail["join_id"])
            label = label.replace(join_id, joins.short_id(join_id), 1)
        rows.append(
            Waiting(
                parent=source.label,
                execution=None if arn is None else execution_link(target, arn),
                waits_on=label,
                kind=dependency.kind,
                state=dependency.state,
                full=dependency.label,
            )
        )
    return sorted(rows, key=lambda row: (row.parent, row.waits_on))


def stuck_parents(target: Target, graph: WaitGraph, older_than: timedelta) -> list[StuckRow]:
    """Parents waiting longer than ``older_than``: their runs described, reasons and causes."""
    now = utcnow()
    parents = graph.stuck(now - older_than)
    arns = [arn for parent in parents if (arn := parent.parent.parent_arn)]
    runs = describe_parents(target.client("stepfunctions"), arns)
    for parent in parents:
        arn = parent.parent.parent_arn
        parent.parent.run = runs.get(arn) if arn else None
    return [_stuck_row(target, parent, now) for parent in parents]


def _stuck_row(target: Target, parent: StuckParent, now: datetime) -> StuckRow:
    arn = parent.parent.parent_arn
    holds = [
        (
            hold.dependency.label,
            hold.dependency.state,
            hold.reason,
            hold.failure,
        )
        for hold in parent.holds
    ]
    return StuckRow(
        parent=parent.parent.label,
        execution=None if arn is None else execution_link(target, arn),
        waiting_seconds=int((now - parent.since).total_seconds()),
        status=parent.run.status,
        reason=parent.reason,
        failure=failure_of(parent.run, None, None),
        holds=holds,
    )


# The states a payload "failed" in, for the summary line.
FAILED_STATES = frozenset({PayloadState.FAILED, PayloadState.INVALID, PayloadState.ABORTED})


@dataclass(frozen=True)
class Summary:
    """The line at the top of the page: what a person reads at a glance."""

    parents_waiting: int
    joins_running: int
    stuck_parents: int
    failed: int
    failed_since: datetime


def summary(snapshot: Snapshot, stuck_parents: int, window: timedelta) -> Summary:
    """Distinct parents waiting, joins running, stuck parents, payloads failed within ``window``.

    A payload counts as failed when its state is FAILED, INVALID or ABORTED and it
    finished (or, without a finish time, last changed) within ``window`` of the read.
    """
    graph = snapshot.graph
    parents = {edge.source for edge in graph.edges if graph.nodes[edge.source].kind != JOIN}
    since = snapshot.read_at - window
    failed = 0
    for view in snapshot.payloads:
        at = view.finished_at or view.updated_at
        if at is not None and at.tzinfo is None:  # a naive time is UTC (cirrus may write one)
            at = at.replace(tzinfo=UTC)
        if view.state in FAILED_STATES and at is not None and at >= since:
            failed += 1
    running = sum(1 for row in snapshot.joins if joins.is_running(row))
    return Summary(len(parents), running, stuck_parents, failed, since)
