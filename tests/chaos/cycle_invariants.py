"""The chaos run's dependency-cycle invariant: of each ring one wait refused, nothing else sent.

Reads the rings' parents (:class:`~tests.chaos.workload.Workload`), what each heard
(:class:`~tests.chaos.faults.FakeParents`), and their rows and wait edges in the
dependency table.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime
from typing import TYPE_CHECKING, Any

from dependency_tracker.core.enums import DependencyError, PayloadState
from dependency_tracker.joins.rows import JoinItem
from dependency_tracker.joins.store import JoinStore
from dependency_tracker.table.items import (
    WaiterItem,
    edge_id_for,
    edge_partition_for,
    membership_id_for,
    waiter_id_for,
)
from tests.chaos.workload import CYCLE

if TYPE_CHECKING:
    from dependency_tracker.table.items import PayloadStateItem
    from tests.chaos.faults import FakeParents, Sent
    from tests.chaos.operator_faults import ReleaseDone
    from tests.chaos.workload import Parent, Records, Ring, Workload
    from tests.conftest import Aws

CYCLES = "dependency cycles: one of each refused, nothing else sent"
CYCLES_HELD = "no cycle refused that the wait graph does not hold"
RELEASED = DependencyError.RELEASED.value
SUCCEEDED_JOIN = frozenset({"succeeded", "succeeded_gone"})  # a "join" ring's join let through


class CycleChecks:
    """Checks every ring of the run against what its parents heard and what the rows say."""

    def __init__(
        self,
        *,
        aws: Aws,
        workload: Workload,
        records: Records,
        fake: FakeParents,
        released: dict[str, ReleaseDone] | None = None,
    ):
        self.aws = aws
        self.workload = workload
        self.records = records
        self.fake = fake
        # Parent token -> the operator's release that failed it (DependencyReleased).
        self.released = released or {}

    @property
    def joins(self) -> JoinStore:
        return JoinStore(self.aws.dynamodb, self.aws.dependencies.table_name)

    def check(self, counts: dict[str, int], states: dict[str, PayloadStateItem]) -> list[str]:
        """Of each ring at least one wait refused with ``DependencyCycle``; nothing else sent.

        A wait-only parent hears ``DependencyCycle`` once, naming its ring as the cycle, or
        nothing: it waits (on AWS its callback timeout would end it). A "join" ring's join
        may instead succeed, once, if it was let through (its member ran): then the
        member's own wait is the one that closes the cycle, and is refused, unless the join
        was decided before that wait's edge was written (:meth:`_join_ended_first`: the
        cycle never stood, and the member's wait rightly waits). A parent made gone by an
        injected ``TaskTimedOut``/``InvalidToken`` counts as its row says it was told; one
        whose message is in the DLQ and heard nothing is left for the redrive. The
        figures go to ``counts`` (the report's).
        """
        problems: list[str] = []
        tally: Counter[str] = Counter()
        dead = self.records.dead_tokens
        parents = self.workload.parents
        for ring in self.workload.rings:
            tally["cycles"] += 1
            tally[f"cycles_{ring.shape}"] += 1
            members = sorted((p for p in parents if p.ring is ring), key=lambda p: p.position)
            outcomes: list[str] = []
            for parent in members:
                label = f"ring {ring.index} ({ring.shape}) {ring.ids[parent.position]}"
                outcome, found = self._ring_outcome(parent, ring, dead)
                problems.extend(f"{label}: {problem}" for problem in found)
                outcomes.append(outcome if not found else "wrong")
                tally[f"cycle_parents_{outcome}"] += 1
            ran = [pid for pid in ring.ids if pid in states]
            if ring.member is not None and ring.ids[1] in ran:
                ran.remove(ring.ids[1])
                let_through = outcomes[0] in SUCCEEDED_JOIN
                tally["cycles_join_let_through" if let_through else "cycles_join_member_ran"] += 1
            problems.extend(f"ring {ring.index}: the tracker ran {pid}" for pid in ran)
            verdict = self._ring_verdict(members, outcomes)
            if verdict is None:
                problems.append(f"ring {ring.index} ({ring.shape}): none refused: {outcomes}")
            elif verdict:
                tally[verdict] += 1
        # Checked again after a redrive: replace the first check's figures, except how many
        # rings the redrive had to settle.
        left = counts.get("cycles_left_for_redrive", 0)
        for key in [key for key in counts if key.startswith("cycle")]:
            del counts[key]
        counts.update({key: tally[key] for key in sorted(tally)})
        if left:
            counts["cycles_left_for_redrive"] = left
        return problems

    def _ring_verdict(self, members: list[Parent], outcomes: list[str]) -> str | None:
        """The count a ring adds to, "" if a member is wrong already, None if none refused."""
        if "wrong" in outcomes:
            return ""
        refused = sum(o in {"refused", "refused_gone"} for o in outcomes)
        if refused:
            return "cycles_refused_all" if refused == len(outcomes) else "cycles_refused_some"
        if "left" in outcomes:
            return "cycles_left_for_redrive"
        if "released" in outcomes:
            # An operator ended one of its waits: the cycle may never have stood whole
            # (a refusal after the release would be one the graph does not hold).
            return "cycles_released"
        ring = members[0].ring
        if ring is None or ring.shape != "join" or outcomes[0] not in SUCCEEDED_JOIN:
            return None
        return self._join_verdict(members, ring, outcomes)

    def _join_verdict(self, members: list[Parent], ring: Ring, outcomes: list[str]) -> str | None:
        """A "join" ring whose join succeeded and whose member's wait was not refused."""
        if self._edge_refused(members[0], ring):
            # Let through, then refused on a redelivery once its member had won: its wait
            # had ended, so the member's wait closed no cycle any more.
            return "cycles_join_refused_late"
        if outcomes[1] == "waiting" and self._join_ended_first(members, ring):
            return "cycles_join_ended_first"
        return None

    def _join_ended_first(self, members: list[Parent], ring: Ring) -> bool:
        """A "join" ring's join waited on nothing any more when its member's wait was recorded.

        The check follows a wait edge only while its waiting row is ``PROCESSING``
        (architecture.md, section 12): once the member's membership row has turned
        terminal, the join waits on nothing and no cycle is left to close. The member's
        edge is written before its every search: a membership row resolved before the
        edge proves each search of the member's wait came after the join's wait had
        ended, and the join's own search, before its members started, could not meet the
        member's edge. The join's own decision may come later (its count is retried after
        a crash): the membership row, not the decision, is what the check reads. No
        deadlock was possible; anything less proves nothing and stays a failure.
        """
        join = self._ring_row(members[0], ring)
        edge = self._edge(members[1], ring)
        if not isinstance(join, JoinItem) or edge is None:
            return False
        membership = self.aws.dependencies.get_row(ring.ids[1], membership_id_for(join.join_id))
        if membership is None or membership.resolved_at is None:
            return False
        recorded = datetime.fromisoformat(edge["created_at"]["S"])
        return (
            join.workflow_state is PayloadState.SUCCEEDED
            and membership.workflow_state is PayloadState.SUCCEEDED
            and membership.resolved_at <= recorded
        )

    def _ring_outcome(self, parent: Parent, ring: Ring, dead: set[str]) -> tuple[str, list[str]]:
        """How one ring parent ended, and what is wrong with that.

        Outcomes: refused, refused_gone, waiting, succeeded (a "join" ring's join),
        succeeded_gone, released (an operator's release failed it: the release check), or
        left (dead-lettered, nothing heard: for the redrive).
        """
        row = self._ring_row(parent, ring)
        sends = self.fake.sent.get(parent.token, [])
        if parent.token in self.fake.gone:
            return self._ring_gone(parent, ring, row, resumed=bool(sends))
        if sends:
            return self._ring_sent(parent, ring, row, sends[0])
        if parent.token in dead:
            return "left", []
        # Nothing heard: only a wait-only parent whose wait was let through may be waiting
        # (a join always hears something: a refusal, or its member's success).
        if isinstance(row, WaiterItem) and row.workflow_state is PayloadState.PROCESSING:
            return "waiting", self._ring_edge(parent, ring, refused=False)
        described = row and f"{row.workflow_state} {getattr(row, 'error_name', row.error)}"
        return "wrong", [f"never resumed, row {described}"]

    def _ring_sent(
        self, parent: Parent, ring: Ring, row: WaiterItem | JoinItem | None, sent: Sent
    ) -> tuple[str, list[str]]:
        """The one send that resumed a ring parent (FakeParents keeps re-sends in .late)."""
        problems = [
            f"contradictory re-send {again.operation} {again.error} after {sent.error}"
            for again in self.fake.late.get(parent.token, [])
            if (again.operation, again.error) != (sent.operation, sent.error)
        ]
        if sent.error == RELEASED and parent.token in self.released:
            return "released", problems
        if sent.operation == "SendTaskFailure" and sent.error == CYCLE:
            problems += self._ring_cause(parent, ring, json.loads(sent.cause or "{}"))
            if not self._ring_refused(parent, ring, row):
                problems.append(f"told DependencyCycle, row {row and row.workflow_state}")
            return "refused", problems + self._ring_edge(parent, ring, refused=True)
        if parent.quorum is not None and sent.operation == "SendTaskSuccess":
            output = json.loads(sent.output or "{}")
            if output.get("quorum") != 1 or output.get("succeeded") != [ring.ids[1]]:
                problems.append(f"join output {output}")
            return "succeeded", problems
        return "wrong", [*problems, f"sent {sent.operation} {sent.error}"]

    def _ring_gone(
        self, parent: Parent, ring: Ring, row: WaiterItem | JoinItem | None, *, resumed: bool
    ) -> tuple[str, list[str]]:
        """A send was tried and met ``TaskTimedOut``/``InvalidToken``: the row says which."""
        if resumed:
            return "wrong", ["resumed after it timed out"]
        if self._ring_refused(parent, ring, row):
            return "refused_gone", self._ring_edge(parent, ring, refused=True)
        if isinstance(row, JoinItem) and row.workflow_state is PayloadState.SUCCEEDED:
            return "succeeded_gone", []
        return "wrong", [f"gone, but its row is {row and row.workflow_state}"]

    @staticmethod
    def _ring_cause(parent: Parent, ring: Ring, cause: dict[str, Any]) -> list[str]:
        """The failure's cause names the ring, from the refused waiter round to itself."""
        problems: list[str] = []
        if parent.quorum is not None:
            named = cause.get("cycle")  # a join's cause is its summary
        else:
            text = str(cause.get("cause", ""))
            named = text.rpartition(": ")[2].split(" -> ") if ": " in text else None
            if cause.get("payload_id") != ring.waits_on(parent.position):
                problems.append(f"cause names {cause.get('payload_id')}")
        expected = ring.cycle_from(parent.position)
        if named != expected:
            problems.append(f"cycle named {named}, expected {expected}")
        return problems

    def _ring_row(self, parent: Parent, ring: Ring) -> WaiterItem | JoinItem | None:
        if parent.quorum is not None:
            join, _, _ = self.joins.read(parent.join_key)
            return join
        return self.aws.dependencies.get(
            ring.waits_on(parent.position), waiter_id_for(parent.token)
        )

    @staticmethod
    def _ring_refused(parent: Parent, ring: Ring, row: WaiterItem | JoinItem | None) -> bool:
        """The row says the wait was refused with ``DependencyCycle``."""
        if isinstance(row, JoinItem):
            return (
                row.workflow_state is PayloadState.FAILED
                and row.error == CYCLE
                and row.cycle == ring.cycle_from(parent.position)
            )
        return (
            row is not None
            and row.workflow_state is PayloadState.INVALID
            and row.error_name is DependencyError.CYCLE
        )

    def _edge(self, parent: Parent, ring: Ring) -> dict[str, Any] | None:
        """The wait edge ``parent``'s message recorded (``waits#{waiter}``), if any."""
        via = (
            waiter_id_for(parent.token)
            if parent.quorum is None
            else membership_id_for(parent.join_key)
        )
        key = {
            "payload_id": {"S": edge_partition_for(ring.ids[parent.position])},
            "waiter_id": {"S": edge_id_for(via, ring.waits_on(parent.position))},
        }
        found = self.aws.dynamodb.get_item(
            TableName=self.aws.dependencies.table_name, Key=key, ConsistentRead=True
        )
        item: dict[str, Any] | None = found.get("Item")
        return item

    def _edge_refused(self, parent: Parent, ring: Ring) -> bool:
        edge = self._edge(parent, ring)
        return edge is not None and "refused_at" in edge

    def _ring_edge(self, parent: Parent, ring: Ring, *, refused: bool) -> list[str]:
        """A refused wait's edge is marked refused, with its cycle (so no later check follows
        it); a waiting one's is live (so the next wait round the ring meets it)."""
        edge = self._edge(parent, ring)
        if edge is None:
            return ["no wait edge recorded"]
        if not refused:
            return ["waits, but its edge is marked refused"] if "refused_at" in edge else []
        if "refused_at" not in edge:
            return ["refused, but its edge is live"]
        recorded = [entry["S"] for entry in edge.get("refused_cycle", {}).get("L", [])]
        expected = ring.cycle_from(parent.position)
        return [] if recorded == expected else [f"edge records cycle {recorded}, not {expected}"]

    # ------------------------------------------------------ refusals the graph held

    def refusals_held(self, counts: dict[str, int]) -> list[str]:
        """Each refusal was decided while every other wait of its cycle was live.

        A wait refused with ``DependencyCycle`` (its edge's ``refused_at``) closes a cycle
        only through waits still waiting: none of the ring's other waits may have been
        released by the operator before it (a released waiter row is no longer
        ``PROCESSING``; a released join no longer counts). The operator's commands run
        between the handlers' invocations, so "before" is exact: the release had
        returned before the refusal's time.
        """
        problems: list[str] = []
        checked = 0
        parents = self.workload.parents
        for ring in self.workload.rings:
            members = [p for p in parents if p.ring is ring]
            for parent in members:
                edge = self._edge(parent, ring)
                if edge is None or "refused_at" not in edge:
                    continue
                checked += 1
                at = datetime.fromisoformat(edge["refused_at"]["S"])
                for other in members:
                    done = self.released.get(other.token)
                    if other is parent or done is None or done.ended > at:
                        continue
                    problems.append(
                        f"ring {ring.index} ({ring.shape}): {ring.ids[parent.position]} refused "
                        f"at {at.isoformat()} through {ring.ids[other.position]}, released "
                        f"at {done.ended.isoformat()}"
                    )
        counts["cycle_refusals_checked"] = checked
        return problems
