"""The wait-for graph: who waits on which payload, read from the dependency table.

Edges point from a waiter (a parent payload, a parent execution, an anonymous
task token, or a join) to what it waits on (a payload, or a join's members).
A parent is keyed by its payload id when the callback named one, so chains
and cycles between payloads show up as paths in the graph.
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from dependency_tracker.core.enums import PayloadState
from dependency_tracker.core.tokens import PARENT_GRANT_PARAMETER, redact_token
from dependency_tracker.joins.rows import JoinItem, typed_row
from dependency_tracker.table.items import MembershipItem, WaiterItem
from dependency_tracker_cli import render
from dependency_tracker_cli.readmodel import PayloadSource, PayloadView, as_view

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from datetime import datetime

    from dependency_tracker.joins.rows import Row
    from dependency_tracker.table.items import DependencyRow, PayloadStateItem

PAYLOAD, EXECUTION, JOIN, WAITER = "payload", "execution", "join", "waiter"

# DescribeExecution's codes for an execution that is not there (any more, or never was).
_NO_EXECUTION = frozenset({"ExecutionDoesNotExist", "InvalidArn"})
# A parent's status when DescribeExecution finds no execution, or the row names none.
GONE, UNKNOWN = "GONE", "UNKNOWN"
# Characters of an error kept in a mermaid or dot label.
_LABEL_ERROR_CHARS = 48


def is_failure(state: str | None) -> bool:
    """True for a state a run ended in without success (``FAILED``, ``INVALID``, ``ABORTED``)."""
    return state in {s.value for s in PayloadState if s.is_terminal and not s.is_success}


@dataclass(frozen=True)
class ParentRun:
    """How a parent execution stands (``DescribeExecution``), and why it failed."""

    status: str
    error: str | None = None
    cause: str | None = None

    @property
    def running(self) -> bool:
        """True while the execution runs."""
        return self.status == "RUNNING"

    @property
    def failed(self) -> bool:
        """True when it ended without success (failed, timed out, aborted)."""
        return self.status in ("FAILED", "TIMED_OUT", "ABORTED")


def describe_parents(sfn: Any, arns: Iterable[str]) -> dict[str, ParentRun]:
    """``DescribeExecution`` once per distinct parent ARN (:data:`GONE` when there is none)."""
    runs: dict[str, ParentRun] = {}
    for arn in dict.fromkeys(arns):
        try:
            described = sfn.describe_execution(executionArn=arn)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") not in _NO_EXECUTION:
                raise
            runs[arn] = ParentRun(GONE)
            continue
        runs[arn] = ParentRun(
            str(described["status"]), described.get("error"), described.get("cause")
        )
    return runs


@dataclass(frozen=True)
class Failure:
    """An error and its cause, and whose they are.

    ``parent``: the parent execution's own (``DescribeExecution``); ``row``: what the
    tracker stored on the waiting row (what it sent, or sends, the parent);
    ``payload``: the dependency's last error, from its state table.
    """

    error: str | None
    cause: str | None
    source: str

    def text(self) -> str:
        """``error: cause`` (either may be missing)."""
        return ": ".join(part for part in (self.error, self.cause) if part)

    def to_json(self) -> dict[str, Any]:
        """JSON view (the cause whole)."""
        return {"source": self.source, "error": self.error, "cause": self.cause}


def failure_of(run: ParentRun | None, error: str | None, cause: str | None) -> Failure | None:
    """The parent's failure when it failed and says why, else the row's (None: neither)."""
    if run is not None and run.failed and (run.error or run.cause):
        return Failure(run.error, run.cause, "parent")
    if error or cause:
        return Failure(error, cause, "row")
    return None


# Fill colours by state (mermaid and dot); parents without a payload id are grey.
FILL = {
    "SUCCEEDED": "#b2f2bb",
    "FAILED": "#ffc9c9",
    "ABORTED": "#ffc9c9",
    "INVALID": "#eebefa",
    "PROCESSING": "#ffec99",
    "CLAIMED": "#ffec99",
    "UNKNOWN": "#f1f3f5",
    "PARENT": "#d0ebff",
}


@dataclass(eq=False)
class Node:
    """A payload, a parent execution, a join or an anonymous waiter."""

    id: str
    kind: str
    label: str
    state: str | None = None
    payload: PayloadView | None = None
    # The state table a payload node was looked up in (set with its state).
    source: PayloadSource | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    # The parent execution's run, when it was described.
    run: ParentRun | None = None

    @property
    def parent_arn(self) -> str | None:
        """The execution ARN of the parent this node stands for, if it is one."""
        if "parent_execution" in self.detail:
            return str(self.detail["parent_execution"])
        if self.kind == EXECUTION:
            return self.id.removeprefix(f"{EXECUTION}:")
        return None

    @property
    def is_parent_only(self) -> bool:
        """A payload id known only as a waiting parent's (no state item)."""
        return self.kind == PAYLOAD and self.state is None and "parent_execution" in self.detail

    @property
    def colour_key(self) -> str:
        """Key into :data:`FILL`."""
        if self.kind in (PAYLOAD, JOIN) and not self.is_parent_only:
            return self.state or "UNKNOWN"
        return "PARENT"

    def to_json(self) -> dict[str, Any]:
        """JSON view (no task token, ever)."""
        data: dict[str, Any] = {
            "id": self.id,
            "kind": self.kind,
            "label": self.label,
            "state": self.state,
        }
        if self.kind == PAYLOAD:
            data["payload_id"] = self.label
        if self.payload is not None:
            data["source"] = self.payload.source.value
            data["attempt"] = self.payload.attempt
            data["execution_arn"] = self.payload.last_execution
            data["last_error"] = self.payload.last_error
            data["last_cause"] = self.payload.last_cause
        if self.run is not None:
            data["parent_status"] = self.run.status
            data["parent_error"] = self.run.error
            data["parent_cause"] = self.run.cause
        return data | self.detail


@dataclass(eq=False)
class Edge:
    """``source`` waits on ``target`` through one dependency-table row."""

    source: str
    target: str
    state: str
    since: datetime
    notified: bool
    via: str
    # What the row stored for a failed dependency: sent (or to send) to the parent.
    error: str | None = None
    cause: str | None = None
    # Step Functions refused the parent's answer (the row's notify_refused, e.g.
    # AccessDeniedException: the stack may not answer the parent's state machine).
    refused: str | None = None

    def to_json(self) -> dict[str, Any]:
        """JSON view."""
        return {
            "from": self.source,
            "to": self.target,
            "state": self.state,
            "since": self.since.isoformat(),
            "notified": self.notified,
            "via": self.via,
            "error": self.error,
            "cause": self.cause,
            "notify_refused": self.refused,
        }


@dataclass
class Hold:
    """One dependency holding a stuck parent."""

    dependency: Node
    edge: Edge
    join: Node | None = None
    # The state table the dependency's state was read from (cirrus's gives cirrus's reasons).
    source: PayloadSource = PayloadSource.TRACKER

    def to_json(self) -> dict[str, Any]:
        """JSON view."""
        data = self.dependency.to_json()
        data["row_state"] = self.edge.state
        data["reason"] = self.reason
        data["waiting_since"] = self.edge.since.isoformat()
        data["join_id"] = None if self.join is None else self.join.detail.get("join_id")
        failure = self.failure
        data["error"] = None if failure is None else failure.error
        data["cause"] = None if failure is None else failure.cause
        data["notify_refused"] = self.edge.refused
        return data

    @property
    def failure(self) -> Failure | None:
        """The dependency's last error and cause, else what its row stored."""
        view = self.dependency.payload
        if view is not None and (view.last_error or view.last_cause):
            return Failure(view.last_error, view.last_cause, "payload")
        return failure_of(None, self.edge.error, self.edge.cause)

    @property
    def reason(self) -> str:
        """Why this dependency still holds the parent."""
        if self.edge.state != PayloadState.PROCESSING:
            if self.edge.refused is not None:
                return (
                    f"resolved {self.edge.state}; the tracker may not answer this parent "
                    f"({self.edge.refused}): its state machine is not in "
                    f"{PARENT_GRANT_PARAMETER}"
                )
            return f"resolved {self.edge.state}, parent not notified yet"
        dependency = self.dependency
        if self.source is PayloadSource.CIRRUS:
            return _cirrus_reason(dependency)
        if dependency.state is None:
            return "not started (no state item)"
        if dependency.state in (PayloadState.CLAIMED, PayloadState.PROCESSING):
            return "running"
        return f"{dependency.state}, waiter not resolved"


def _cirrus_reason(dependency: Node) -> str:
    """Why a payload that cirrus runs still holds its parent (cirrus's state table says)."""
    view = dependency.payload
    if view is None:
        # The tracker forwards a payload when a waiter arrives; cirrus writes its item on claim.
        return "no item in cirrus's state table: not taken by cirrus yet (its process queue or DLQ)"
    if view.source is PayloadSource.TRACKER:  # a message the tracker refused
        return f"{view.state} (tracker), waiter not resolved"
    if view.running:
        run = execution_label(view.last_execution) if view.last_execution else "no execution yet"
        return f"running in cirrus ({view.state}, {run})"
    return f"{view.state} in cirrus, waiter not resolved"


@dataclass
class StuckParent:
    """A parent waiting longer than the threshold, and what holds it."""

    parent: Node
    since: datetime
    holds: list[Hold]

    @property
    def run(self) -> ParentRun:
        """The parent execution's run (:data:`UNKNOWN` until described, or without an ARN)."""
        return self.parent.run or ParentRun(UNKNOWN)

    @property
    def reason(self) -> str | None:
        """Why a parent no longer waits (None while its execution runs)."""
        return None if self.run.running else f"parent ended: {self.run.status}"

    def to_json(self, now: datetime) -> dict[str, Any]:
        """JSON view."""
        return {
            "parent": self.parent.to_json(),
            "parent_status": self.run.status,
            "reason": self.reason,
            "error": self.run.error,
            "cause": self.run.cause,
            "waiting_since": self.since.isoformat(),
            "waiting_seconds": int((now - self.since).total_seconds()),
            "dependencies": [hold.to_json() for hold in self.holds],
        }


class WaitGraph:
    """Nodes and wait-for edges, with cycle detection and renderers."""

    def __init__(self) -> None:
        self.nodes: dict[str, Node] = {}
        self.edges: list[Edge] = []

    # ------------------------------------------------------------------ building

    @classmethod
    def from_rows(cls, rows: Iterable[DependencyRow], *, include_done: bool = False) -> WaitGraph:
        """The graph of dependency-table rows.

        By default only rows that still hold a parent: waiters whose parent was
        not told yet, joins with a token not answered yet (a released join has
        none), and memberships still ``PROCESSING`` in such a join. ``include_done``
        keeps every row.
        """
        graph = cls()
        kinds = [typed_row(row) for row in rows]
        joins = {row.join_id: row for row in kinds if isinstance(row, JoinItem)}
        for row in kinds:
            if isinstance(row, JoinItem):
                if include_done or row.unanswered():
                    graph._add_join(row)
            elif isinstance(row, MembershipItem):
                join = joins.get(row.join_id)
                active = (
                    row.workflow_state is PayloadState.PROCESSING
                    and join is not None
                    and bool(join.unanswered())
                )
                if include_done or active:
                    graph._add_membership(row, join)
            elif include_done or row.notified_at is None:
                graph._add_waiter(row)
        return graph

    def set_states(
        self,
        items: Mapping[str, PayloadView] | Mapping[str, PayloadStateItem],
        *,
        source: PayloadSource = PayloadSource.TRACKER,
    ) -> None:
        """Colour payload nodes with their state (``source``: where a missing one is missing)."""
        for node in self.nodes.values():
            if node.kind == PAYLOAD:
                node.payload = as_view(items.get(node.label))
                node.source = source
                node.state = None if node.payload is None else node.payload.state.value

    def payload_ids(self) -> set[str]:
        """Ids of every payload node."""
        return {node.label for node in self.nodes.values() if node.kind == PAYLOAD}

    def failed_parents(self) -> set[str]:
        """ARNs of the parents shown failed: told (or to be told) a failure, or failed payloads."""
        arns: set[str] = set()
        for edge in self.edges:
            node = self.nodes[edge.source]
            arn = node.parent_arn
            if arn and (is_failure(edge.state) or is_failure(node.state)):
                arns.add(arn)
        return arns

    def set_parent_runs(self, runs: Mapping[str, ParentRun]) -> None:
        """Give each parent node its execution's run (those described)."""
        for node in self.nodes.values():
            arn = node.parent_arn
            if arn is not None and arn in runs:
                node.run = runs[arn]

    def _add_waiter(self, row: WaiterItem) -> None:
        self._token_wait(row, self._payload(row.payload_id))

    def _add_join(self, row: JoinItem) -> None:
        join = self._join(row.join_id)
        join.state = row.workflow_state.value
        # The row holds no member lists (counts live in its shards): k of n is what it says.
        needed = "all" if row.quorum is None else row.quorum
        members = row.known_total if row.known_total is not None else f"{row.registered}+"
        join.label = f"join {row.join_id}: {needed} of {members} needed"
        join.detail.update(quorum=row.quorum, total=row.known_total, registered=row.registered)
        self._token_wait(row, join)

    def _add_membership(self, row: MembershipItem, join_row: JoinItem | None) -> None:
        join = self._join(row.join_id)
        if join_row is None:
            join.detail.setdefault("missing", True)
        target = self._payload(row.payload_id)
        self._edge(join, target, row, done_at=row.resolved_at, via=f"join:{row.join_id}")

    def _token_wait(self, row: WaiterItem | JoinItem, target: Node) -> None:
        """The edge of a row holding a parent's task token: the parent waits on ``target``."""
        token = redact_token(row.task_token) or "?"
        source = self._parent(row.waiter_payload_id, row.parent_execution, token)
        self._edge(source, target, row, done_at=row.notified_at, via=token)

    def _parent(self, payload_id: str | None, execution: str | None, token: str) -> Node:
        if payload_id:
            node = self._payload(payload_id)
            if execution:
                node.detail.setdefault("parent_execution", execution)
            return node
        if execution:
            return self._node(f"{EXECUTION}:{execution}", EXECUTION, execution_label(execution))
        return self._node(f"{WAITER}:{token}", WAITER, f"waiter {token}")

    def _payload(self, payload_id: str) -> Node:
        return self._node(f"{PAYLOAD}:{payload_id}", PAYLOAD, payload_id)

    def _join(self, join_id: str) -> Node:
        node = self._node(f"{JOIN}:{join_id}", JOIN, f"join {join_id}")
        node.detail.setdefault("join_id", join_id)
        return node

    def _node(self, node_id: str, kind: str, label: str) -> Node:
        if node_id not in self.nodes:
            self.nodes[node_id] = Node(id=node_id, kind=kind, label=label)
        return self.nodes[node_id]

    def _edge(
        self, source: Node, target: Node, row: Row, *, done_at: datetime | None, via: str
    ) -> None:
        failed = is_failure(row.workflow_state.value)
        self.edges.append(
            Edge(
                source=source.id,
                target=target.id,
                state=row.workflow_state.value,
                since=row.created_at,
                notified=done_at is not None,
                via=via,
                error=row.error if failed else None,
                cause=row.cause if failed else None,
                refused=None if done_at is not None else row.notify_refused,
            )
        )

    # ------------------------------------------------------------------ queries

    def find(self, name: str) -> Node | None:
        """The node for a payload id, join id, execution ARN or execution name."""
        for node_id in (f"{PAYLOAD}:{name}", f"{JOIN}:{name}", f"{EXECUTION}:{name}"):
            if node_id in self.nodes:
                return self.nodes[node_id]
        for node in self.nodes.values():
            if name in _execution_names(node):
                return node
        return None

    def around(self, root: Node) -> WaitGraph:
        """The part of the graph through ``root``: what it waits on and who waits on it."""
        keep = self._reachable(root.id, forward=True) | self._reachable(root.id, forward=False)
        sub = WaitGraph()
        sub.nodes = {node_id: node for node_id, node in self.nodes.items() if node_id in keep}
        sub.edges = [e for e in self.edges if e.source in keep and e.target in keep]
        return sub

    def _reachable(self, start: str, *, forward: bool) -> set[str]:
        adjacency: dict[str, list[str]] = {}
        for edge in self.edges:
            a, b = (edge.source, edge.target) if forward else (edge.target, edge.source)
            adjacency.setdefault(a, []).append(b)
        seen, queue = {start}, deque([start])
        while queue:
            for nxt in adjacency.get(queue.popleft(), []):
                if nxt not in seen:
                    seen.add(nxt)
                    queue.append(nxt)
        return seen

    def cycles(self) -> list[list[str]]:
        """Groups of nodes that wait on each other (strongly connected, or a self-loop)."""
        adjacency: dict[str, list[str]] = {node_id: [] for node_id in self.nodes}
        for edge in self.edges:
            adjacency[edge.source].append(edge.target)
        return sorted(
            sorted(group)
            for group in strongly_connected(adjacency)
            if len(group) > 1 or group[0] in adjacency[group[0]]
        )

    def stuck(self, cutoff: datetime) -> list[StuckParent]:
        """Parents waiting since before ``cutoff``, oldest first, with what holds them."""
        outgoing: dict[str, list[Edge]] = {}
        for edge in self.edges:
            outgoing.setdefault(edge.source, []).append(edge)
        parents: list[StuckParent] = []
        for source, edges in outgoing.items():
            node = self.nodes[source]
            if node.kind == JOIN:
                continue
            since = min(edge.since for edge in edges)
            if since > cutoff:
                continue
            holds: list[Hold] = []
            for edge in edges:
                target = self.nodes[edge.target]
                if target.kind != JOIN:
                    holds.append(Hold(dependency=target, edge=edge, source=_source(target)))
                    continue
                members = outgoing.get(target.id, [])
                holds.extend(
                    Hold(
                        dependency=self.nodes[m.target],
                        edge=m,
                        join=target,
                        source=_source(self.nodes[m.target]),
                    )
                    for m in members
                )
                # Decided, but the parent was not told yet (or may not be: refused).
                if not members or edge.refused is not None:
                    holds.append(Hold(dependency=target, edge=edge, source=_source(target)))
            parents.append(StuckParent(parent=node, since=since, holds=holds))
        return sorted(parents, key=lambda parent: (parent.since, parent.parent.id))

    # ------------------------------------------------------------------ renderers

    def to_json(self) -> dict[str, Any]:
        """``{"nodes": [...], "edges": [...], "cycles": [[node ids]]}``."""
        return {
            "nodes": [node.to_json() for node in self.nodes.values()],
            "edges": [edge.to_json() for edge in self.edges],
            "cycles": self.cycles(),
        }

    def to_json_text(self) -> str:
        """:meth:`to_json` as indented text."""
        return json.dumps(self.to_json(), indent=2)

    def to_mermaid(self) -> str:
        """A mermaid flowchart, parents on the left, nodes filled by state."""
        ids = {node_id: f"n{number}" for number, node_id in enumerate(self.nodes)}
        in_cycle = {node_id for group in self.cycles() for node_id in group}
        lines = ["flowchart LR"]
        for node_id, node in self.nodes.items():
            text = _mermaid_text(_label_lines(node))
            lines.append(f'    {ids[node_id]}["{text}"]:::{_class(node.colour_key)}')
        for edge in self.edges:
            arrow = "-.->" if edge.notified else "-->"
            label = _edge_label(edge)
            middle = f'{arrow}|"{_mermaid_text([label])}"|' if label else arrow
            lines.append(f"    {ids[edge.source]} {middle} {ids[edge.target]}")
        used = {node.colour_key for node in self.nodes.values()}
        for key, colour in FILL.items():
            if key in used:
                lines.append(
                    f"    classDef {_class(key)} fill:{colour},stroke:#495057,color:#212529"
                )
        if in_cycle:
            lines.append("    classDef cycle stroke:#e03131,stroke-width:3px")
            lines.append(f"    class {','.join(ids[n] for n in sorted(in_cycle))} cycle")
        return "\n".join(lines)

    def to_dot(self) -> str:
        """A Graphviz digraph, nodes filled by state, cycle members outlined in red."""
        in_cycle = {node_id for group in self.cycles() for node_id in group}
        lines = [
            "digraph waitfor {",
            "  rankdir=LR;",
            '  node [shape=box, style="rounded,filled", fontname="Helvetica"];',
        ]
        for node_id, node in self.nodes.items():
            attributes = [
                f"label={_dot_quote(chr(10).join(_label_lines(node)))}",
                f'fillcolor="{FILL[node.colour_key]}"',
            ]
            if node_id in in_cycle:
                attributes.append('color="#e03131", penwidth=3')
            lines.append(f"  {_dot_quote(node_id)} [{', '.join(attributes)}];")
        for edge in self.edges:
            attributes = []
            label = _edge_label(edge)
            if label:
                attributes.append(f"label={_dot_quote(label)}")
            if edge.notified:
                attributes.append("style=dashed")
            suffix = f" [{', '.join(attributes)}]" if attributes else ""
            lines.append(f"  {_dot_quote(edge.source)} -> {_dot_quote(edge.target)}{suffix};")
        lines.append("}")
        return "\n".join(lines)


def _source(node: Node) -> PayloadSource:
    return node.source or PayloadSource.TRACKER


def strongly_connected(adjacency: Mapping[str, list[str]]) -> list[list[str]]:
    """Strongly connected components (Kosaraju, without recursion)."""
    reverse: dict[str, list[str]] = {node: [] for node in adjacency}
    for node, successors in adjacency.items():
        for successor in successors:
            reverse[successor].append(node)
    assigned: set[str] = set()
    groups: list[list[str]] = []
    for start in reversed(_finish_order(adjacency)):
        if start in assigned:
            continue
        assigned.add(start)
        group, todo = [], [start]
        while todo:
            node = todo.pop()
            group.append(node)
            for predecessor in reverse[node]:
                if predecessor not in assigned:
                    assigned.add(predecessor)
                    todo.append(predecessor)
        groups.append(group)
    return groups


def _finish_order(adjacency: Mapping[str, list[str]]) -> list[str]:
    """Nodes in the order a depth-first search finishes them."""
    order: list[str] = []
    seen: set[str] = set()
    for start in adjacency:
        if start in seen:
            continue
        seen.add(start)
        stack = [(start, iter(adjacency[start]))]
        while stack:
            node, successors = stack[-1]
            successor = next((s for s in successors if s not in seen), None)
            if successor is None:
                stack.pop()
                order.append(node)
            else:
                seen.add(successor)
                stack.append((successor, iter(adjacency[successor])))
    return order


def execution_label(arn: str) -> str:
    """``state-machine:execution-name`` of an execution ARN (the ARN if it is not one)."""
    parts = arn.split(":")
    if len(parts) >= 8 and parts[5] == "execution":
        return ":".join(parts[6:])
    return arn


def _execution_names(node: Node) -> set[str]:
    """ARNs and names of the parent execution a node stands for."""
    arns = [str(node.detail["parent_execution"])] if "parent_execution" in node.detail else []
    if node.kind == EXECUTION:
        arns.append(node.id.removeprefix(f"{EXECUTION}:"))
    return {name for arn in arns for name in (arn, arn.rsplit(":", 1)[-1])}


def _label_lines(node: Node) -> list[str]:
    lines = [node.label]
    if node.is_parent_only:
        lines.append(execution_label(str(node.detail["parent_execution"])))
    elif node.kind in (PAYLOAD, JOIN):
        lines.append(node.state or "no state")
    run = node.run
    if run is not None and run.failed:
        failure = failure_of(run, None, None)
        why = f": {failure.text()}" if failure is not None else ""
        lines.append(render.one_line(f"parent {run.status}{why}", _LABEL_ERROR_CHARS))
    elif node.payload is not None and is_failure(node.state):
        view = node.payload
        failure = failure_of(None, view.last_error, view.last_cause)
        if failure is not None:
            lines.append(render.one_line(failure.text(), _LABEL_ERROR_CHARS))
    return lines


def _edge_label(edge: Edge) -> str:
    if edge.state == PayloadState.PROCESSING:
        return ""
    state = f"{edge.state}: {edge.error}" if edge.error else edge.state
    label = state if edge.notified else f"{state}, not notified"
    return render.one_line(label, _LABEL_ERROR_CHARS)


def _class(key: str) -> str:
    return f"s_{key.lower()}"


def _mermaid_text(lines: list[str]) -> str:
    escaped = [
        line.replace("&", "#amp;").replace('"', "#quot;").replace("<", "#lt;").replace(">", "#gt;")
        for line in lines
    ]
    return "<br/>".join(escaped)


def _dot_quote(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'
