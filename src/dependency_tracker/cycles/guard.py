"""Cycle check: refuse a wait that would close a cycle of waiting payloads.

A wait names the payload that waits (``waiter_payload_id``, W) and the
payloads it waits on (P). It closes a cycle when some P waits, directly or
through other payloads, on W: then none of them can ever finish, and every
parent would sit until its callback timeout. The check follows the recorded
wait edges forward from each P, breadth first, up to ``cycle_depth`` payloads,
and ignores payloads that already ended (a finished payload blocks nobody).

Ordering rule, as for waiters: the new edges are written *before* the graph is
read, with strongly consistent reads. Of two waits closing one cycle at the
same moment, whichever reads second sees the other's edge, so at least one is
refused and no cycle goes unnoticed (both may be refused when their reads
cross; never neither). A refused wait's edges are marked refused, so later
checks do not follow a wait that no longer exists.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from aws_lambda_powertools.metrics import MetricUnit

from dependency_tracker.core.observability import logger, metrics

if TYPE_CHECKING:
    from collections.abc import Sequence

    from dependency_tracker.cycles.edges import WaitEdges
    from dependency_tracker.payloads.state_table import StateTable

# Bounds the reads of one check on a large graph; past it the check gives up
# (reported), since refusing on a guess would fail a healthy parent.
DEFAULT_MAX_NODES = 1_000


@dataclass(frozen=True)
class Cycle:
    """A cycle of waiting payloads, from the waiter back to itself."""

    path: tuple[str, ...]

    @property
    def length(self) -> int:
        """Payloads in the cycle (A waits on B waits on A is 2)."""
        return len(self.path) - 1

    def describe(self) -> str:
        """Human-readable: ``a -> b -> a``."""
        return " -> ".join(self.path)


class CycleGuard:
    """Records wait edges and finds the cycle a new wait would close."""

    def __init__(
        self,
        *,
        states: StateTable,
        edges: WaitEdges,
        max_length: int,
        max_nodes: int = DEFAULT_MAX_NODES,
    ) -> None:
        self.states = states
        self.edges = edges
        self.max_length = max_length
        self.max_nodes = max_nodes

    @property
    def enabled(self) -> bool:
        """False when ``cycle_depth`` is 0: no edges are written, nothing is checked."""
        return self.max_length > 0

    def admit(self, waiter: str, depends_on: Sequence[str], *, via: str) -> Cycle | None:
        """Record that ``waiter`` waits on ``depends_on``; the cycle this closes, if any.

        ``via`` names the waiting row (a waiter id or a join's ``join#`` id).
        When a cycle is found the new edges are marked refused, with the cycle,
        before returning; the caller turns the wait down (and counts it). A
        redelivered wait that was refused before gets the recorded cycle back
        without a new search: the parent was (or is being) told already, even if
        the cycle has broken since.
        """
        if not self.enabled:
            return None
        current = self.states.get(waiter)
        recorded = self.edges.add(
            waiter, depends_on, via=via, waiter_attempt=None if current is None else current.attempt
        )
        if recorded is not None:
            return Cycle(tuple(recorded))
        cycle = self.find(waiter, depends_on)
        if cycle is not None:
            self.edges.refuse(waiter, depends_on, via=via, cycle=list(cycle.path))
            logger.warning(
                "dependency cycle found",
                extra={"cycle": cycle.describe(), "cycle_length": cycle.length},
            )
        return cycle

    def find(self, waiter: str, depends_on: Sequence[str]) -> Cycle | None:
        """A path from one of ``depends_on`` back to ``waiter``, or None.

        Breadth first, so the cycle found is a shortest one. Only payloads that
        have not ended are followed, and only the waits of their current
        attempt; a payload without a state item (not run by the tracker) counts
        as live, since it may still be waiting.
        """
        if waiter in depends_on:
            return Cycle((waiter, waiter))
        came_from: dict[str, str] = dict.fromkeys(depends_on, waiter)
        frontier = list(came_from)
        hops = 1  # edges from the waiter to the frontier
        while frontier and hops < self.max_length:
            seen = self.states.batch_get(frontier)
            following: list[str] = []
            for node in frontier:
                item = seen.get(node)
                if item is not None and item.state.is_terminal:
                    continue
                attempt = None if item is None else item.attempt
                for target in self.edges.targets(node, attempt=attempt):
                    if target == waiter:
                        return Cycle(_path(came_from, node, waiter))
                    if target in came_from:
                        continue
                    if len(came_from) >= self.max_nodes:
                        logger.warning(
                            "cycle check stopped at its node budget",
                            extra={"max_nodes": self.max_nodes, "hops": hops},
                        )
                        metrics.add_metric(
                            name="CycleCheckTruncated", unit=MetricUnit.Count, value=1
                        )
                        return None
                    came_from[target] = node
                    following.append(target)
            frontier = following
            hops += 1
        return None


def _path(came_from: dict[str, str], last: str, waiter: str) -> tuple[str, ...]:
    """The path ``waiter -> ... -> last -> waiter`` from the breadth-first predecessors."""
    backwards = [last]
    while backwards[-1] != waiter:
        backwards.append(came_from[backwards[-1]])
    return (*reversed(backwards), waiter)
