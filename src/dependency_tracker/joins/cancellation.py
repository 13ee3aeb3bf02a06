"""A join whose parent is gone stops the members nobody else waits on (``on_parent_gone: cancel``).

How the tracker learns the parent is gone, each in the function that sees it:

* **its execution ended** (any status): update-state reads the parent's link
  rows (joins/parent_links.py) for every execution that ends. A parent that
  ended before its link was written is caught at registration: the link is
  written first, then the parent's execution is described;
* **an operator released it** (``dependency-tracker release``);
* **its answer was refused as closed** (``TaskTimedOut``, ``InvalidToken``):
  the join was decided, and the parent no longer waits for the members left.

Each of them calls :meth:`JoinCancellation.begin`: the join row records
``gone_at`` and ``gone_cause`` (once), an undecided join is decided ``ABORTED``
(``DependencyAborted``, the cause naming the parent) so no new chunk registers,
and one ``join_cancel`` message goes to the join queue. That message sends one
per registered chunk (one hop: no chain for Lambda's loop detection to stop),
and each chunk's message stops its members: a member's execution is stopped
(``StopExecution``) and its membership row resolved ``ABORTED`` with the cause,
unless another live waiter needs the member (a parent's token row not answered,
or a membership row of a join still waiting). A chunk registering while the
join is cancelled checks the join after starting its members, and stops its own
(the ordering rule: one of the two sees the other).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from aws_lambda_powertools.metrics import MetricUnit
from botocore.exceptions import ClientError

from dependency_tracker.core import naming
from dependency_tracker.core.enums import DependencyError, PayloadState, utcnow
from dependency_tracker.core.limits import SQS_MAX_BATCH_ENTRIES
from dependency_tracker.core.observability import logger, metrics
from dependency_tracker.core.threads import ContextExecutor
from dependency_tracker.joins.fan_out import send_batch
from dependency_tracker.joins.messages import JoinCancel, JoinCancelMessage
from dependency_tracker.joins.rows import ParentGone
from dependency_tracker.table.items import MembershipItem, Resolution, WaiterItem

if TYPE_CHECKING:
    from collections.abc import Callable

    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_stepfunctions import SFNClient

    from dependency_tracker.joins.parent_links import ParentLinks
    from dependency_tracker.joins.registration_rows import ChunkRows
    from dependency_tracker.joins.rows import JoinItem
    from dependency_tracker.joins.store import JoinStore
    from dependency_tracker.payloads.state_table import StateTable
    from dependency_tracker.table.dependency_table import DependencyTable

# The error a stopped member's execution and membership row carry.
PARENT_GONE_ERROR = "JoinParentGone"
# What decided a join its parent left: the summary's ``decided_by``.
DECIDED_BY_PARENT_GONE = "parent_gone"
# Members of one chunk checked and stopped side by side (each is a few calls).
STOP_CONCURRENCY = 8
# StopExecution takes a cause of at most 32,768 characters; ours are far shorter.
MAX_STOP_CAUSE_CHARS = 32_768


def ended_cause(parent_execution: str, status: str) -> str:
    """The cause of a cancellation whose parent's execution ended."""
    return f"the join's parent {parent_execution} ended {status}"


def refused_cause(parent_execution: str | None) -> str:
    """The cause of a cancellation whose parent refused its answer as closed."""
    parent = parent_execution or "execution"
    return f"the join's parent {parent} no longer waits: its answer was refused as closed"


def released_cause(parent_execution: str | None, reason: str) -> str:
    """The cause of a cancellation an operator's release brought about."""
    parent = parent_execution or "execution"
    return f"the join's parent {parent} was released by an operator: {reason}"


class JoinCancellation:
    """Begins a gone parent's cancellations, fans them out per chunk and stops members."""

    def __init__(
        self,
        *,
        joins: JoinStore,
        links: ParentLinks,
        rows: ChunkRows,
        dependencies: DependencyTable,
        states: StateTable,
        sfn: Callable[[], SFNClient],
        sqs: Callable[[], SQSClient] | None,
        queue_url: str | None,
    ) -> None:
        """``sfn`` and ``sqs`` make their clients when first used (most flows never cancel)."""
        self.joins = joins
        self.links = links
        self.rows = rows
        self.dependencies = dependencies
        self.states = states
        self._sfn = sfn
        self._sqs = sqs
        self._queue_url = queue_url

    # ------------------------------------------------------------- learning

    def watch(self, join: JoinItem) -> bool:
        """Link a cancelling join to its parent, then check the parent still runs.

        Written before the check: a parent that ends after it is found by its
        end event (update-state reads the link), one that ended before by the
        check. True when the parent was gone already (the join is cancelled).
        """
        if join.on_parent_gone != ParentGone.CANCEL or join.parent_execution is None:
            return False
        self.links.link(join.parent_execution, join.join_id, utcnow())
        try:
            status = self._sfn().describe_execution(executionArn=join.parent_execution)["status"]
        except ClientError as exc:
            # Not one the stack may describe (a parent of a foreign account), or no such
            # execution: its end event, if the stack gets it, still cancels the join.
            code = exc.response.get("Error", {}).get("Code")
            logger.warning("join's parent not checked", extra={"code": code})
            return False
        if status == "RUNNING":
            return False
        return self.begin(join.join_id, ended_cause(join.parent_execution, status))

    def parent_ended(self, execution_arn: str, status: str) -> int:
        """An execution ended: begin cancelling each join linked to it; how many there were."""
        joins = self.links.joins_of(execution_arn)
        for join_id in joins:
            self.begin(join_id, ended_cause(execution_arn, status))
        return len(joins)

    def begin(self, join_id: str, cause: str) -> bool:
        """Record the parent gone, decide the join if it was not, send its ``join_cancel``.

        Idempotent (every caller may be a redelivery): the first cause is kept, the
        decision is conditional, and the members' stops are. False when the join
        does not cancel with its parent.
        """
        join = self.joins.mark_gone(join_id, cause)
        if join is None:
            return False
        if self.joins.decide_join(
            join_id,
            PayloadState.ABORTED,
            error=DependencyError.ABORTED,
            cause=join.gone_cause,
            decided_by=DECIDED_BY_PARENT_GONE,
        ):
            logger.info("join decided: its parent is gone", extra={"join_id": join_id})
        self._send([JoinCancel(join_id=join_id, cause=join.gone_cause or cause)])
        metrics.add_metric(name="JoinsCancelled", unit=MetricUnit.Count, value=1)
        return True

    # ------------------------------------------------------------- stopping

    def handle(self, message: JoinCancelMessage) -> int:
        """Fan a join's cancellation out to its chunks, or stop one chunk's members."""
        spec = message.join_cancel
        join = self.joins.get(spec.join_id)
        if join is None or join.gone_at is None:
            logger.warning("join_cancel of a join not cancelled", extra={"join_id": spec.join_id})
            return 0
        cause = join.gone_cause or spec.cause
        if spec.chunk is None:
            indexes = self.rows.chunk_indexes(join.join_id)
            self._send([JoinCancel(join_id=join.join_id, cause=cause, chunk=i) for i in indexes])
            logger.info("join cancellation fanned out", extra={"chunks": len(indexes)})
            return len(indexes)
        return self.stop_chunk(join, spec.chunk)

    def after_chunk(self, join: JoinItem, index: int) -> None:
        """After a chunk started its members: stop them if the join was cancelled meanwhile."""
        if join.on_parent_gone != ParentGone.CANCEL:
            return
        current = self.joins.get(join.join_id)
        if current is not None and current.gone_at is not None:
            self.stop_chunk(current, index)

    def stop_chunk(self, join: JoinItem, index: int) -> int:
        """Stop chunk ``index``'s members that nobody else needs; how many were stopped."""
        chunk = self.rows.chunk(join.join_id, index)
        if chunk is None:
            return 0
        cause = join.gone_cause or "the join's parent is gone"
        pending = [row for row in self.rows.chunk_rows(chunk) if not row.workflow_state.is_terminal]
        tally: dict[str, int] = {}
        with ContextExecutor(max_workers=STOP_CONCURRENCY) as pool:
            for outcome in pool.map(lambda row: self._stop_member(row, cause), pending):
                tally[outcome] = tally.get(outcome, 0) + 1
        logger.info("join chunk cancelled", extra={"chunk": index, "members": tally})
        stopped = tally.get("stopped", 0)
        if stopped:
            metrics.add_metric(name="JoinMembersStopped", unit=MetricUnit.Count, value=stopped)
        if tally.get("kept"):
            metrics.add_metric(name="JoinMembersKept", unit=MetricUnit.Count, value=tally["kept"])
        return stopped

    def _stop_member(self, row: MembershipItem, cause: str) -> str:
        """Stop one member unless needed elsewhere; resolve its membership row. The outcome."""
        if self._needed_elsewhere(row):
            return "kept"
        state = self.states.get(row.payload_id)
        if state is not None and state.state.is_terminal:
            # Ended already; update-state resolves (or resolved) the row with its outcome.
            self.dependencies.resolve(
                row.payload_id, row.waiter_id, Resolution.of(state, replayed=True)
            )
            return "ended"
        arn = state.execution_arn if state is not None else None
        if arn is not None and naming.is_express_arn(arn):
            # StopExecution does not take Express executions: the run ends on its own, within
            # Express's 5 minutes, and its outcome is recorded on the row as any member's.
            return "express"
        if arn is not None:
            self._stop(arn, cause)
        self.dependencies.resolve(
            row.payload_id,
            row.waiter_id,
            Resolution(
                state=PayloadState.ABORTED, execution_arn=arn, error=PARENT_GONE_ERROR, cause=cause
            ),
        )
        return "stopped" if arn is not None else "not_started"

    def _needed_elsewhere(self, own: MembershipItem) -> bool:
        """Whether a live waiter other than this join needs the member.

        A parent's token row not answered yet, or the membership row of another
        join that still waits (undecided, not released, its parent not gone).
        """
        for row in self.dependencies.rows(own.payload_id):
            if row.waiter_id == own.waiter_id or row.workflow_state.is_terminal:
                continue
            if isinstance(row, WaiterItem) and row.notified_at is None:
                return True
            if isinstance(row, MembershipItem):
                other = self.joins.get(row.join_id)
                if other is not None and other.waiting:
                    return True
        return False

    def _stop(self, execution_arn: str, cause: str) -> None:
        """``StopExecution``; an execution already stopped or gone is left as it is."""
        try:
            self._sfn().stop_execution(
                executionArn=execution_arn,
                error=PARENT_GONE_ERROR,
                cause=cause[:MAX_STOP_CAUSE_CHARS],
            )
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code")
            if code != "ExecutionDoesNotExist":
                raise
            logger.info("member execution not found to stop", extra={"code": code})

    def _send(self, cancels: list[JoinCancel]) -> None:
        """Send ``join_cancel`` messages, ten to a batch (to the join queue)."""
        if self._sqs is None or self._queue_url is None:
            # No queue to fan out through (a stack without one): each message is handled here.
            for cancel in cancels:
                self.handle(JoinCancelMessage(join_cancel=cancel))
            return
        bodies = [
            json.dumps({"join_cancel": cancel.model_dump(exclude_none=True)}) for cancel in cancels
        ]
        for start in range(0, len(bodies), SQS_MAX_BATCH_ENTRIES):
            batch = bodies[start : start + SQS_MAX_BATCH_ENTRIES]
            send_batch(
                self._sqs(),
                self._queue_url,
                {str(start + n): body for n, body in enumerate(batch)},
                what="join_cancel",
            )
