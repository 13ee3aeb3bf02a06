"""Registering one chunk of a join's members, exactly once.

Each chunk, in its own invocation:

1. stops if the join is decided or the chunk was registered before;
2. writes its members' membership rows (conditional puts: an earlier chunk's
   row marks a duplicate), *then* reads their states (ordering rule) and
   starts, replays or leaves each member, as a single wait does;
3. records itself and adds its members to the join row in one transaction,
   exactly once; whichever chunk is recorded last (the last in the list makes
   the number of chunks known) makes ``n`` known and checks the decision.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_lambda_powertools.metrics import MetricUnit

from dependency_tracker.core.enums import DependencyError, PayloadState, utcnow
from dependency_tracker.core.errors import InvalidMessageError
from dependency_tracker.core.observability import logger, metrics
from dependency_tracker.joins.decision import decide_if_settled
from dependency_tracker.joins.registration_rows import Registration
from dependency_tracker.joins.rows import ChunkItem
from dependency_tracker.table.items import MembershipItem, Resolution, membership_id_for

if TYPE_CHECKING:
    from dependency_tracker.cycles.guard import Cycle, CycleGuard
    from dependency_tracker.joins.cancellation import JoinCancellation
    from dependency_tracker.joins.registration_rows import ChunkRows
    from dependency_tracker.joins.rows import JoinItem
    from dependency_tracker.joins.store import JoinStore
    from dependency_tracker.payloads.model import ProcessPayload
    from dependency_tracker.payloads.runner import PayloadRunner
    from dependency_tracker.payloads.state_table import StateTable
    from dependency_tracker.table.dependency_table import DependencyTable


class ChunkRegistrar:
    """Registers one chunk's members and runs them; finishes a begun chunk whose list is gone."""

    def __init__(
        self,
        *,
        joins: JoinStore,
        rows: ChunkRows,
        dependencies: DependencyTable,
        states: StateTable,
        cycles: CycleGuard,
        runner: PayloadRunner,
        cancellation: JoinCancellation | None = None,
    ) -> None:
        self.joins = joins
        self.cancellation = cancellation
        self.rows = rows
        self.dependencies = dependencies
        self.states = states
        self.cycles = cycles
        self._runner = runner

    def stopped(self, join: JoinItem, index: int) -> bool:
        """True when chunk ``index`` has nothing left to do.

        A decided join registers no new chunk. A chunk it had begun (listed, maybe
        some membership rows written) is finished all the same: a membership row
        written is a promise to read its member's state (the ordering rule), or a
        member that had already ended would leave its row waiting for good.
        """
        chunk = self.rows.chunk(join.join_id, index)
        if chunk is not None and chunk.recorded:
            logger.info("chunk already registered", extra={"chunk": index})
            if join.total is None and join.workflow_state is PayloadState.PROCESSING:
                # Its delivery may have died between recording it and checking the decision.
                self.check_decision(join.join_id)
            return True
        if join.workflow_state is not PayloadState.PROCESSING and chunk is None:
            logger.info("join already decided: chunk not registered", extra={"chunk": index})
            metrics.add_metric(name="JoinChunksSkipped", unit=MetricUnit.Count, value=1)
            return True
        return False

    def register(
        self,
        join: JoinItem,
        index: int,
        payloads: list[ProcessPayload],
        *,
        last: bool,
        message_id: str | None,
    ) -> bool:
        """Register one chunk's members and run them; False when the join was refused."""
        for payload in payloads:
            try:
                self._runner.check_startable(payload, join.task_token)
            except InvalidMessageError as exc:
                # The join, not one wait, is refused: its parent catches InvalidJoin.
                raise InvalidMessageError(
                    exc.reason,
                    retryable=exc.retryable,
                    task_token=join.task_token,
                    payload_id=payload.id,
                    error_name=DependencyError.INVALID_JOIN,
                ) from exc
        distinct: dict[str, ProcessPayload] = {}
        repeated: list[str] = []
        for payload in payloads:
            if payload.id in distinct:
                repeated.append(payload.id)
            else:
                distinct[payload.id] = payload
        membership_id = membership_id_for(join.join_id)
        if join.waiter_payload_id is not None:
            cycle = self.cycles.admit(join.waiter_payload_id, list(distinct), via=membership_id)
            # Checked before this chunk writes anything: a refused join starts no
            # member of this chunk (earlier chunks' members may run already).
            if cycle is not None and self._refuse(join.join_id, cycle):
                return False
        now = utcnow()
        # Listed before any member is registered: a decision its members bring about
        # before the chunk is finished still names them in the summary.
        self.rows.start_chunk(ChunkItem.of(join.join_id, index, list(distinct), [], now))
        rows = [
            MembershipItem(
                payload_id=member,
                waiter_id=membership_id,
                join_id=join.join_id,
                chunk=index,
                created_at=now,
                updated_at=now,
            )
            for member in distinct
        ]
        found = self.rows.register_members(rows)
        own = [
            m for m, how in zip(distinct, found, strict=True) if how is not Registration.DUPLICATE
        ]
        repeated += [
            m for m, how in zip(distinct, found, strict=True) if how is Registration.DUPLICATE
        ]
        if repeated:
            logger.warning(
                "duplicate payloads in join",
                extra={"duplicates": repeated[:20], "count": len(repeated)},
            )
        actions = self._settle([distinct[member] for member in own], membership_id, message_id)
        if self.cancellation is not None:
            # Read after the starts: a cancellation that read this chunk's rows before
            # they ran is seen here (joins/cancellation.py).
            self.cancellation.after_chunk(join, index)
        recorded = self.rows.finish_chunk(
            ChunkItem.of(join.join_id, index, own, repeated, now),
            chunks=index + 1 if last else None,
        )
        logger.info(
            "join chunk registered" if recorded else "join chunk registered before",
            extra={"chunk": index, "members": len(own), "last": last, "actions": actions},
        )
        metrics.add_metric(name="JoinChunksRegistered", unit=MetricUnit.Count, value=1)
        if join.total is None and (last or recorded):
            # n is known once every chunk is recorded, by whichever is recorded last: each
            # reads the join row after its own transaction (the ordering rule). With n known
            # from the start, the counts decide alone.
            self.check_decision(join.join_id)
        return True

    def _settle(
        self, members: list[ProcessPayload], membership_id: str, message_id: str | None
    ) -> dict[str, int]:
        """Start, replay or leave each member; how many of each action."""
        # Every membership row of the chunk is written before any state is read.
        seen = self.states.batch_get([member.id for member in members])
        actions: dict[str, int] = {}
        for member in members:
            action = self._runner.settle(
                member, membership_id, message_id=message_id, seen=seen.get(member.id)
            ).value
            actions[action] = actions.get(action, 0) + 1
        return actions

    def check_decision(self, join_id: str) -> None:
        """After a chunk: write ``n`` once known, and decide a join ``n`` settles."""
        join, succeeded, failed = self.joins.read(join_id)
        if join is None or join.known_total is None:
            return
        if join.total is None:
            self.rows.set_total(join_id, join.known_total)
        decide_if_settled(
            self.joins,
            join,
            succeeded,
            failed,
            winner=None,
            may_succeed=join.quorum is None,
        )

    def finish_begun(self, join: JoinItem, index: int) -> None:
        """Keep a begun chunk's promise when its list can no longer be read.

        Its membership rows are written (a delivery died after writing them) but
        the member list that names the payloads is gone or changed: read the
        states of those members now and resolve the rows of the ones that ended,
        so none is left waiting on a payload that has ended. Members still
        running are resolved by update-state, as any waiter.
        """
        chunk = self.rows.chunk(join.join_id, index)
        if chunk is None or chunk.recorded:
            return
        rows = [row for row in self.rows.chunk_rows(chunk) if not row.workflow_state.is_terminal]
        seen = self.states.batch_get([row.payload_id for row in rows])
        for row in rows:
            state = seen.get(row.payload_id)
            if state is not None and state.state.is_terminal:
                resolution = Resolution.of(state, replayed=True)
                self.dependencies.resolve(row.payload_id, row.waiter_id, resolution)

    def _refuse(self, join_id: str, cycle: Cycle) -> bool:
        """Decide a join ``DependencyCycle``; False if it was already decided otherwise."""
        if self.joins.decide_join(
            join_id, PayloadState.FAILED, error=DependencyError.CYCLE, cycle=list(cycle.path)
        ):
            logger.warning("wait refused: dependency cycle", extra={"cycle": cycle.describe()})
            metrics.add_metric(name="DependencyCycles", unit=MetricUnit.Count, value=1)
            return True
        existing = self.joins.get(join_id)
        return existing is not None and existing.error == DependencyError.CYCLE
