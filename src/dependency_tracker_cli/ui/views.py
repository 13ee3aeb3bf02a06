"""View models of the ``ui`` page, built from the CLI's read model (nothing here renders HTML)."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, TypeVar
from urllib.parse import quote

from dependency_tracker.core.enums import utcnow
from dependency_tracker_cli.readmodel import PageRequest, PayloadFilter, PayloadView
from dependency_tracker_cli.waitgraph import (
    JOIN,
    Failure,
    StuckParent,
    WaitGraph,
    describe_parents,
    execution_label,
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
class Execution:
    """A parent execution as a link: the console on AWS, the page's JSON view on ``serve``."""

    arn: str
    href: str

    @property
    def label(self) -> str:
        """``state-machine:name``."""
        return execution_label(self.arn)


def execution_link(target: Target, arn: str) -> Execution:
    """Where ``arn`` is shown: the AWS console for a deployed stack, else ``/execution?arn=``."""
    if target.options.endpoint_url:
        return Execution(arn, f"/execution?arn={quote(arn, safe='')}")
    region = arn.split(":")[3] if arn.count(":") >= 4 else target.session.region_name
    return Execution(
        arn,
        f"https://{region}.console.aws.amazon.com/states/home?region={region}"
        f"#/v2/executions/details/{quote(arn, safe=':')}",
    )


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


@dataclass(frozen=True)
class JoinProgress:
    """A join's counted members against its total and quorum."""

    join_id: str
    state: str | None
    succeeded: int
    failed: int
    total: int | None
    needed: int | None
    registered: int
    execution: Execution | None

    @property
    def counted(self) -> int:
        """Members whose outcome is counted."""
        return self.succeeded + self.failed

    @property
    def percent(self) -> int:
        """Counted members in percent of the total (of those registered while it is unknown)."""
        whole = self.total if self.total is not None else self.registered
        return 0 if not whole else min(100, round(100 * self.counted / whole))


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
    """What one request reads: the live wait graph and the payload views."""

    graph: WaitGraph
    payloads: list[PayloadView]


def read_snapshot(target: Target) -> Snapshot:
    """The live graph (payload states set) and every payload's view, sorted by id."""
    rows = [row for page in target.dependencies.scan_pages(unnotified_only=True) for row in page]
    graph = WaitGraph.from_rows(rows)
    reader = target.payloads
    graph.set_states(reader.get_many(graph.payload_ids()), source=reader.source)
    return Snapshot(graph, all_payloads(target))


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
        rows.append(
            Waiting(
                parent=source.label,
                execution=None if arn is None else execution_link(target, arn),
                waits_on=dependency.label,
                kind=dependency.kind,
                state=dependency.state,
            )
        )
    return sorted(rows, key=lambda row: (row.parent, row.waits_on))


def join_ids(graph: WaitGraph) -> list[str]:
    """Ids of the joins in the graph, sorted."""
    return sorted(str(n.detail["join_id"]) for n in graph.nodes.values() if n.kind == JOIN)


def join_progress(target: Target, ids: Sequence[str]) -> list[JoinProgress]:
    """Progress of the joins ``ids`` (one consistent read of each join's row and counts)."""
    store = target.joins
    found: list[JoinProgress] = []
    for join_id in ids:
        row, succeeded, failed = store.read(join_id)
        arn = None if row is None else row.parent_execution
        found.append(
            JoinProgress(
                join_id=join_id,
                state=None if row is None else row.workflow_state.value,
                succeeded=succeeded,
                failed=failed,
                total=None if row is None else row.known_total,
                needed=None if row is None else row.needed,
                registered=0 if row is None else row.registered,
                execution=None if arn is None else execution_link(target, arn),
            )
        )
    return found


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
