"""Reruns that count: a member's outcome taken back from its undecided joins, counted again.

The latest outcome of a member counts while its join is undecided: a rerun
takes the counted one back (joins/reopening.py), the rerun's end is counted
like any member's, and no member is ever counted twice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dependency_tracker.core.enums import DependencyError, PayloadState
from dependency_tracker.joins.counting import JoinCounting
from dependency_tracker.joins.decision import decide_if_settled
from dependency_tracker.joins.reopening import MemberReopening
from dependency_tracker.joins.store import JoinStore
from dependency_tracker.table.items import MembershipItem, Resolution, membership_id_for
from dependency_tracker.table.keys import partition_key
from tests.unit.cli.rows import register_join

if TYPE_CHECKING:
    from dependency_tracker.joins.rows import JoinItem
    from tests.conftest import Aws

OK, BAD = PayloadState.SUCCEEDED, PayloadState.FAILED


class Join:
    """A join of ``members`` with quorum ``quorum``, counted and reopened as the flows do."""

    def __init__(self, aws: Aws, members: list[str], quorum: int | None, join_id: str = "j1"):
        self.aws, self.join_id = aws, join_id
        self.store = JoinStore(aws.dynamodb, aws.dependencies.table_name)
        self.counting = JoinCounting(joins=self.store, retention_days=7)
        self.reopening = MemberReopening(joins=self.store)
        register_join(aws, join_id, members, quorum=quorum, outcomes={})

    def row(self, member: str) -> MembershipItem:
        row = self.aws.dependencies.get_row(member, membership_id_for(self.join_id))
        assert isinstance(row, MembershipItem)
        return row

    def end(self, member: str, state: PayloadState, *, count: bool = True) -> None:
        """The member's run ends (update-state), and the callback counts it (the stream)."""
        resolution = Resolution(state=state, error=None if state is OK else "TaskFailed")
        assert self.aws.dependencies.resolve(member, membership_id_for(self.join_id), resolution)
        if count:
            self.counting.record(self.row(member), resolution)

    def read(self) -> tuple[JoinItem, int, int]:
        join, succeeded, failed = self.store.read(self.join_id)
        assert join is not None
        return join, succeeded, failed


def test_a_failed_member_rerun_and_succeeded_turns_a_failing_quorum_into_a_success(
    aws: Aws,
) -> None:
    # GIVEN a quorum-1 join of A and B whose member A failed
    join = Join(aws, ["a", "b"], quorum=1)
    join.end("a", BAD)
    # WHEN A is rerun (its outcome taken back before the new attempt starts)
    assert join.reopening.reopen("a") == 1
    # THEN A is pending again and counted nowhere
    assert join.row("a").workflow_state is PayloadState.PROCESSING
    assert join.read()[1:] == (0, 0)
    # AND B failing does not decide the join (A may still succeed)
    join.end("b", BAD)
    assert join.read()[0].workflow_state is PayloadState.PROCESSING
    # AND A's rerun succeeding decides it succeeded, A the winner, each member counted once
    join.end("a", OK)
    decided, succeeded, failed = join.read()
    assert decided.workflow_state is OK
    assert decided.winner == partition_key("a")
    assert (succeeded, failed) == (1, 1)
    assert join.row("a").notify_outcome == "COUNTED:SUCCEEDED"


def test_an_outcome_is_taken_back_once_and_never_from_a_decided_join(aws: Aws) -> None:
    # GIVEN an all-of join of A, B, C whose A failed (decided: all-of fails on a failure)
    join = Join(aws, ["a", "b", "c"], quorum=None)
    join.end("a", OK)
    join.end("b", BAD)
    decided, succeeded, failed = join.read()
    assert decided.workflow_state is BAD
    # WHEN B is rerun
    # THEN nothing is taken back: the decision and its counts stand
    assert join.reopening.reopen("b") == 0
    assert join.read()[1:] == (succeeded, failed) == (1, 1)
    assert join.row("b").workflow_state is BAD


def test_a_second_take_back_of_one_outcome_changes_nothing(aws: Aws) -> None:
    # GIVEN a 2-of-3 join whose A failed
    join = Join(aws, ["a", "b", "c"], quorum=2)
    join.end("a", BAD)
    stale = join.row("a")
    # WHEN the outcome is taken back, then again from the same read (a redelivered message)
    assert join.store.take_back(stale)
    assert not join.store.take_back(stale)
    # THEN it was given back once: no count below zero, one take-back on the join row
    decided, succeeded, failed = join.read()
    assert (succeeded, failed, decided.reopened) == (0, 0, 1)


def test_an_outcome_not_counted_yet_is_taken_back_and_its_late_count_refused(aws: Aws) -> None:
    # GIVEN a 2-of-3 join whose A failed, its stream record not delivered yet
    join = Join(aws, ["a", "b", "c"], quorum=2)
    join.end("a", BAD, count=False)
    late = join.row("a")
    # WHEN A is rerun before the record arrives
    assert join.reopening.reopen("a") == 1
    # THEN the late record counts nothing (A is pending again)
    assert late.resolution is not None
    assert not join.store.count(late, late.resolution, retention_days=7)
    assert join.read()[1:] == (0, 0)
    # AND the rerun's end counts once
    join.end("a", OK)
    assert join.read()[1:] == (1, 0)


def test_a_decision_read_before_a_take_back_is_refused_and_read_again(aws: Aws) -> None:
    # GIVEN a quorum-2 join of A, B, C with A and B failed: QuorumUnreachable once counted
    join = Join(aws, ["a", "b", "c"], quorum=2)
    join.end("a", BAD)
    join.end("b", BAD, count=False)
    b = join.row("b")
    assert b.resolution is not None
    assert join.store.count(b, b.resolution, retention_days=7)
    read, succeeded, failed = join.read()
    assert read.decision(succeeded, failed) == (BAD, DependencyError.QUORUM_UNREACHABLE)
    # WHEN A's rerun takes its failure back between that read and the decision
    assert join.reopening.reopen("a") == 1
    # THEN the decision from the stale read is refused
    assert not decide_if_settled(join.store, read, succeeded, failed, winner="b", may_succeed=True)
    # AND the join stays undecided: A may still succeed
    assert join.read()[0].workflow_state is PayloadState.PROCESSING
    # AND A failing again decides it, once, from the counts as they are
    join.end("a", BAD)
    decided, succeeded, failed = join.read()
    assert decided.workflow_state is BAD
    assert decided.error == DependencyError.QUORUM_UNREACHABLE.value
    assert (succeeded, failed) == (0, 2)


def test_a_member_of_two_joins_is_taken_back_only_where_undecided(aws: Aws) -> None:
    # GIVEN A in a decided all-of join and in an undecided quorum-1 join
    decided = Join(aws, ["a", "x"], quorum=None, join_id="decided")
    running = Join(aws, ["a", "y"], quorum=1, join_id="running")
    decided.end("a", BAD)
    running.end("a", BAD)
    assert decided.read()[0].workflow_state is BAD
    # WHEN A is rerun
    # THEN only the undecided join takes its outcome back
    assert running.reopening.reopen("a") == 1
    assert decided.row("a").workflow_state is BAD
    assert running.row("a").workflow_state is PayloadState.PROCESSING
    assert (decided.read()[1:], running.read()[1:]) == ((0, 1), (0, 0))
