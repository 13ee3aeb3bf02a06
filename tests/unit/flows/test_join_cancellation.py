"""A join whose parent is gone (``on_parent_gone: cancel``) stops the members nobody else needs.

Members run as real (moto) executions of a state machine that waits an hour, so a
stopped member is one moto reports ``ABORTED`` and a kept one is still ``RUNNING``.
Joins are registered through the process flow in chunks of two; the join queue (the
process queue here) is drained by hand, so every ``join_cancel`` goes through it.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest

from dependency_tracker.core.enums import DependencyError, PayloadState, utcnow
from dependency_tracker.joins.cancellation import (
    DECIDED_BY_PARENT_GONE,
    PARENT_GONE_ERROR,
    ended_cause,
)
from dependency_tracker.joins.parent_links import ParentLinks, link_partition_for
from dependency_tracker.joins.row_access import RowAccess
from dependency_tracker.joins.rows import JoinItem, ParentGone
from dependency_tracker.payloads.bucket import PayloadBucket
from dependency_tracker.table.items import (
    MembershipItem,
    Resolution,
    WaiterItem,
    membership_id_for,
)
from dependency_tracker.table.prefixes import PARENT_LINK_KEY_PREFIX
from dependency_tracker.table.rows import is_bookkeeping_item
from tests.conftest import FAIL_WORKFLOW, PASS_WORKFLOW, payload, payload_id

if TYPE_CHECKING:
    from dependency_tracker.joins.cancellation import JoinCancellation
    from tests.conftest import Aws

BUCKET = "deptrack-payloads"
CHUNK = 2
# A member that runs until it is stopped (an hour: far longer than any test).
SLOW_WORKFLOW = {
    "StartAt": "Hold",
    "States": {"Hold": {"Type": "Wait", "Seconds": 3600, "End": True}},
}
ABORTED = PayloadState.ABORTED


class Stack:
    """The process flow (chunks of two), its queue drained by hand, and the cancellation."""

    def __init__(self, aws: Aws) -> None:
        self.aws = aws
        aws.s3.create_bucket(Bucket=BUCKET)
        settings = aws.settings.model_copy(
            update={
                "join_chunk_size": CHUNK,
                "process_queue_url": aws.queue_url,
                "payload_bucket": BUCKET,
            }
        )
        root = aws.app(
            settings, dependencies=aws.dependencies, bucket=PayloadBucket(aws.s3, BUCKET)
        )
        self.flow = root.process
        self.joins = root.joins
        cancellation = root.cancellation
        assert cancellation is not None
        self.cancellation: JoinCancellation = cancellation
        self.links = ParentLinks(RowAccess(aws.dynamodb, aws.dependencies.table_name))
        self.machines = {
            "slow": aws.create_workflow("slow", SLOW_WORKFLOW),
            "pass": aws.create_workflow("pass", PASS_WORKFLOW),
            "fail": aws.create_workflow("fail", FAIL_WORKFLOW),
        }
        self.handled: list[dict[str, Any]] = []

    def parent(self, name: str) -> str:
        """A running parent execution (a Standard workflow's execution ARN)."""
        started = self.aws.sfn.start_execution(stateMachineArn=self.machines["slow"], name=name)
        return str(started["executionArn"])

    def send(self, body: dict[str, Any], message_id: str) -> None:
        self.flow.handle(self.flow.parse(json.dumps(body), message_id=message_id))

    def join(
        self,
        join_id: str,
        items: list[str],
        *,
        parent: str | None = None,
        on_parent_gone: str | None = None,
        workflows: dict[str, str] | None = None,
    ) -> None:
        """Register a join of ``items`` (slow unless ``workflows`` says) and all its chunks."""
        spec: dict[str, Any] = {"task_token": f"token-{join_id}", "join_id": join_id}
        if parent is not None:
            spec["parent_execution"] = parent
        if on_parent_gone is not None:
            spec["on_parent_gone"] = on_parent_gone
        workflows = workflows or {}
        members = [payload(item, workflows.get(item, "slow")) for item in items]
        self.send({"join": spec, "payloads": members}, message_id=f"m-{join_id}")
        self.drain()

    def queued(self) -> list[dict[str, Any]]:
        """Receive (and delete) every message on the process queue."""
        return self.aws.queued()

    def drain(self) -> list[dict[str, Any]]:
        """Handle queued messages until none is left; the bodies handled."""
        handled: list[dict[str, Any]] = []
        while bodies := self.queued():
            for body in bodies:
                self.send(body, message_id=f"q-{len(self.handled)}")
                self.handled.append(body)
                handled.append(body)
        return handled

    def member(self, item: str) -> str:
        return payload_id(item, "slow")

    def execution(self, item: str, workflow: str = "slow") -> str:
        state = self.aws.states.get(payload_id(item, workflow))
        assert state is not None
        assert state.execution_arn is not None
        return state.execution_arn

    def status(self, item: str, workflow: str = "slow") -> str:
        described = self.aws.sfn.describe_execution(executionArn=self.execution(item, workflow))
        return str(described["status"])

    def membership(self, join_id: str, item: str, workflow: str = "slow") -> MembershipItem:
        row = self.aws.dependencies.get_row(payload_id(item, workflow), membership_id_for(join_id))
        assert isinstance(row, MembershipItem)
        return row

    def row(self, join_id: str) -> JoinItem:
        join = self.joins.get(join_id)
        assert join is not None
        return join

    def raw(self, join_id: str) -> dict[str, Any]:
        item: dict[str, Any] = self.aws.dynamodb.get_item(
            TableName=self.aws.dependencies.table_name,
            Key={"payload_id": {"S": f"join#{join_id}"}, "waiter_id": {"S": "join"}},
            ConsistentRead=True,
        )["Item"]
        return item


@pytest.fixture
def stack(aws: Aws) -> Stack:
    return Stack(aws)


def cancels(bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [body["join_cancel"] for body in bodies if "join_cancel" in body]


def assert_stopped(stack: Stack, join_id: str, item: str, cause: str) -> None:
    """The member's execution was stopped and its membership row resolved ABORTED."""
    described = stack.aws.sfn.describe_execution(executionArn=stack.execution(item))
    assert described["status"] == "ABORTED"
    assert described.get("error") == PARENT_GONE_ERROR
    row = stack.membership(join_id, item)
    assert (row.workflow_state, row.error, row.cause) == (ABORTED, PARENT_GONE_ERROR, cause)
    assert row.execution_arn == stack.execution(item)


def assert_running(stack: Stack, join_id: str, item: str) -> None:
    """The member runs on and the join's membership row still waits for it."""
    assert stack.status(item) == "RUNNING"
    assert stack.membership(join_id, item).workflow_state is PayloadState.PROCESSING


# ----------------------------------------------------------------------------- begin


@pytest.mark.parametrize("on_parent_gone", [None, "keep"])
def test_begin_on_a_join_that_keeps_its_members_returns_false_and_writes_nothing(
    stack: Stack, on_parent_gone: str | None
) -> None:
    # GIVEN a join that keeps its members (the default, or said), its parent running
    parent = stack.parent("keeping-parent")
    stack.join("keeping", ["k1", "k2", "k3"], parent=parent, on_parent_gone=on_parent_gone)
    before = stack.raw("keeping")
    # WHEN a cancellation is begun for it (a redelivered or mistaken call)
    assert not stack.cancellation.begin("keeping", "the join's parent is gone")
    # THEN the join row is untouched: not gone, not decided
    assert stack.raw("keeping") == before
    assert stack.row("keeping").workflow_state is PayloadState.PROCESSING
    # AND nothing is sent, no link was ever written, and every member runs on
    assert stack.queued() == []
    assert stack.links.joins_of(parent) == []
    for item in ("k1", "k2", "k3"):
        assert_running(stack, "keeping", item)


def test_begin_on_a_join_that_does_not_exist_writes_nothing(stack: Stack) -> None:
    assert not stack.cancellation.begin("nobody", "the join's parent is gone")
    assert stack.joins.get("nobody") is None
    assert stack.queued() == []


def test_begin_twice_keeps_the_first_cause_and_decides_the_join_aborted_once(
    stack: Stack,
) -> None:
    # GIVEN a cancelling join of three slow members (two chunks), its parent running
    parent = stack.parent("twice-parent")
    stack.join("twice", ["t1", "t2", "t3"], parent=parent, on_parent_gone="cancel")
    assert stack.links.joins_of(parent) == ["twice"]
    # WHEN its cancellation is begun, then begun again with another cause (a redelivery, or
    # a second way of learning the parent is gone)
    assert stack.cancellation.begin("twice", "first cause")
    first = stack.row("twice")
    assert stack.cancellation.begin("twice", "second cause")
    again = stack.row("twice")
    # THEN the first time and cause are kept
    assert first.gone_at is not None
    assert (again.gone_at, again.gone_cause) == (first.gone_at, "first cause")
    # AND the join was decided ABORTED once, by its parent gone, with the first cause
    assert (again.workflow_state, again.error, again.cause, again.decided_by) == (
        ABORTED,
        DependencyError.ABORTED.value,
        "first cause",
        DECIDED_BY_PARENT_GONE,
    )
    assert again.resolved_at == first.resolved_at
    assert again.updated_at == first.updated_at
    # AND each begin sent one join_cancel, both carrying the first cause
    handled = stack.drain()
    assert [(c["join_id"], c["cause"], c.get("chunk")) for c in cancels(handled)][:2] == [
        ("twice", "first cause", None),
        ("twice", "first cause", None),
    ]
    # AND each fanned out to the join's two chunks, whose members were all stopped
    chunks = sorted(c["chunk"] for c in cancels(handled) if "chunk" in c)
    assert chunks == [0, 0, 1, 1]
    for item in ("t1", "t2", "t3"):
        assert_stopped(stack, "twice", item, "first cause")


def test_begin_on_a_join_decided_before_keeps_its_decision_and_stops_its_members(
    stack: Stack,
) -> None:
    # GIVEN a cancelling join already decided (its parent was answered), members still running
    parent = stack.parent("decided-parent")
    stack.join("decided", ["d1", "d2"], parent=parent, on_parent_gone="cancel")
    assert stack.joins.decide_join("decided", PayloadState.SUCCEEDED, winner="elsewhere")
    # WHEN its parent refuses an answer as closed and the cancellation begins
    assert stack.cancellation.begin("decided", "its answer was refused as closed")
    stack.drain()
    # THEN the decision stands (not decided again by the parent gone)
    row = stack.row("decided")
    assert (row.workflow_state, row.decided_by, row.error) == (PayloadState.SUCCEEDED, None, None)
    assert row.gone_cause == "its answer was refused as closed"
    # AND the members nobody waits on any more are stopped
    for item in ("d1", "d2"):
        assert_stopped(stack, "decided", item, "its answer was refused as closed")


# ----------------------------------------------------------------------- parent_ended


def test_parent_ended_begins_the_joins_linked_to_that_parent_and_only_those(
    stack: Stack,
) -> None:
    # GIVEN two cancelling joins of parent P, one of parent Q, and a keeping join of P
    p, q = stack.parent("parent-p"), stack.parent("parent-q")
    stack.join("p-one", ["a1"], parent=p, on_parent_gone="cancel")
    stack.join("p-two", ["a2"], parent=p, on_parent_gone="cancel")
    stack.join("q-one", ["b1"], parent=q, on_parent_gone="cancel")
    stack.join("p-keep", ["c1"], parent=p, on_parent_gone="keep")
    assert sorted(stack.links.joins_of(p)) == ["p-one", "p-two"]
    # WHEN P's execution ends
    stack.aws.sfn.stop_execution(executionArn=p, error="Cancelled", cause="by hand")
    assert stack.cancellation.parent_ended(p, "ABORTED") == 2
    stack.drain()
    # THEN P's cancelling joins are gone, decided ABORTED, the cause naming P and how it ended
    cause = ended_cause(p, "ABORTED")
    assert p in cause
    for join_id, item in (("p-one", "a1"), ("p-two", "a2")):
        row = stack.row(join_id)
        assert (row.gone_cause, row.workflow_state, row.cause) == (cause, ABORTED, cause)
        assert_stopped(stack, join_id, item, cause)
    # AND Q's join and P's keeping join are untouched, their members running
    for join_id, item in (("q-one", "b1"), ("p-keep", "c1")):
        row = stack.row(join_id)
        assert (row.gone_at, row.workflow_state) == (None, PayloadState.PROCESSING)
        assert_running(stack, join_id, item)


def test_parent_ended_of_an_execution_without_links_does_nothing(stack: Stack) -> None:
    p = stack.parent("linked")
    stack.join("linked", ["l1"], parent=p, on_parent_gone="cancel")
    other = stack.parent("unlinked")
    assert stack.cancellation.parent_ended(other, "SUCCEEDED") == 0
    assert stack.queued() == []
    assert stack.row("linked").gone_at is None
    assert_running(stack, "linked", "l1")


# ----------------------------------------------------------------------- who is kept


def test_a_member_another_waiting_join_needs_is_kept_and_one_nobody_needs_is_stopped(
    stack: Stack,
) -> None:
    # GIVEN a keeping join of S, and a cancelling join of S and A
    stack.join("keeper", ["s"], parent=stack.parent("keeper-parent"))
    p = stack.parent("cancel-parent")
    stack.join("cancelling", ["s", "a"], parent=p, on_parent_gone="cancel")
    # WHEN the cancelling join's parent ends
    assert stack.cancellation.parent_ended(p, "FAILED") == 1
    stack.drain()
    # THEN S, which the keeping join still waits on, runs on, waited on by both joins
    assert_running(stack, "cancelling", "s")
    assert_running(stack, "keeper", "s")
    # AND A, which nobody else needs, is stopped, its row ABORTED with the cause
    assert_stopped(stack, "cancelling", "a", ended_cause(p, "FAILED"))


@pytest.mark.parametrize("how", ["decided", "released", "gone"])
def test_a_member_of_another_join_no_longer_waiting_is_stopped(stack: Stack, how: str) -> None:
    # GIVEN a join of S that no longer waits (decided, released, or its parent gone too),
    # and a cancelling join of S
    stack.join("other", ["s", "o"], parent=stack.parent("other-parent"), on_parent_gone="cancel")
    if how == "decided":
        assert stack.joins.decide_join("other", PayloadState.FAILED)
    elif how == "released":
        stack.aws.dynamodb.update_item(
            TableName=stack.aws.dependencies.table_name,
            Key={"payload_id": {"S": "join#other"}, "waiter_id": {"S": "join"}},
            UpdateExpression="SET released_at = :now",
            ExpressionAttributeValues={":now": {"S": utcnow().isoformat()}},
        )
    else:
        assert stack.joins.mark_gone("other", "its parent is gone too") is not None
    assert not stack.row("other").waiting
    p = stack.parent("cancel-parent")
    stack.join("cancelling", ["s"], parent=p, on_parent_gone="cancel")
    # WHEN the cancelling join's parent ends
    assert stack.cancellation.parent_ended(p, "TIMED_OUT") == 1
    stack.drain()
    # THEN S is stopped: no live waiter needs it
    assert_stopped(stack, "cancelling", "s", ended_cause(p, "TIMED_OUT"))


def test_a_member_whose_row_in_another_waiting_join_ended_is_not_needed_by_it(
    stack: Stack,
) -> None:
    # GIVEN a waiting join whose row for S already holds an outcome (not counted yet), S now
    # running again, and a cancelling join of S
    stack.join("other", ["s", "o"], parent=stack.parent("other-parent"))
    failed = Resolution(state=PayloadState.FAILED, error="TaskFailed")
    assert stack.aws.dependencies.resolve(stack.member("s"), membership_id_for("other"), failed)
    assert stack.row("other").waiting
    p = stack.parent("cancel-parent")
    stack.join("cancelling", ["s"], parent=p, on_parent_gone="cancel")
    # WHEN the cancelling join's parent ends
    assert stack.cancellation.parent_ended(p, "ABORTED") == 1
    stack.drain()
    # THEN S is stopped: the other join has its outcome already
    assert_stopped(stack, "cancelling", "s", ended_cause(p, "ABORTED"))
    assert stack.membership("other", "s").workflow_state is PayloadState.FAILED


def test_a_member_with_an_unanswered_waiter_is_kept(stack: Stack) -> None:
    # GIVEN W, which a parent waits on with a task token, and a cancelling join of W and A
    stack.send({**payload("w", "slow"), "callback": {"task_token": "token-w"}}, message_id="m-w")
    waiters = [
        r for r in stack.aws.dependencies.rows(stack.member("w")) if isinstance(r, WaiterItem)
    ]
    assert len(waiters) == 1
    assert waiters[0].notified_at is None
    p = stack.parent("cancel-parent")
    stack.join("cancelling", ["w", "a"], parent=p, on_parent_gone="cancel")
    # WHEN the join's parent ends
    assert stack.cancellation.parent_ended(p, "ABORTED") == 1
    stack.drain()
    # THEN W runs on (the waiter's parent still needs it); A is stopped
    assert_running(stack, "cancelling", "w")
    assert_stopped(stack, "cancelling", "a", ended_cause(p, "ABORTED"))


def test_a_member_whose_payload_already_ended_is_resolved_with_its_real_outcome(
    stack: Stack,
) -> None:
    # GIVEN a cancelling join of a member that succeeds, one that fails, and a slow one
    p = stack.parent("cancel-parent")
    workflows = {"ok": "pass", "bad": "fail"}
    stack.join(
        "ending", ["ok", "bad", "slow"], parent=p, on_parent_gone="cancel", workflows=workflows
    )
    # AND the first two ended, their ends recorded in the state table, not on the join's rows
    for item, workflow in workflows.items():
        described = stack.aws.wait_for_execution(stack.execution(item, workflow))
        state = stack.aws.states.get(payload_id(item, workflow))
        assert state is not None
        stack.aws.states.set_final(
            payload_id=payload_id(item, workflow),
            workflow=workflow,
            state=PayloadState(described["status"]),
            execution_arn=described["executionArn"],
            attempt=state.attempt,
            error=described.get("error"),
            cause=described.get("cause"),
        )
        assert stack.membership("ending", item, workflow).workflow_state is PayloadState.PROCESSING
    # WHEN the join's parent ends
    assert stack.cancellation.parent_ended(p, "ABORTED") == 1
    stack.drain()
    # THEN the ended members are resolved with how they really ended, not ABORTED
    ok = stack.membership("ending", "ok", "pass")
    assert (ok.workflow_state, ok.error) == (PayloadState.SUCCEEDED, None)
    bad = stack.membership("ending", "bad", "fail")
    assert (bad.workflow_state, bad.error, bad.cause) == (
        PayloadState.FAILED,
        "TaskFailed",
        "simulated failure",
    )
    assert stack.status("ok", "pass") == "SUCCEEDED"
    assert stack.status("bad", "fail") == "FAILED"
    # AND the slow one is stopped
    assert_stopped(stack, "ending", "slow", ended_cause(p, "ABORTED"))


def test_an_express_member_is_left_to_end_on_its_own(stack: Stack) -> None:
    # GIVEN a cancelling join whose member runs as an Express execution (its state row names
    # an express ARN: StopExecution does not take those)
    p = stack.parent("cancel-parent")
    stack.join("express", ["fast-x"], parent=p, on_parent_gone="cancel")
    express = "arn:aws:states:us-east-1:123456789012:express:deptrack-slow:x:0b1c2d3e"
    stack.aws.dynamodb.update_item(
        TableName=stack.aws.states.table_name,
        Key={"payload_id": {"S": payload_id("fast-x", "slow")}},
        UpdateExpression="SET execution_arn = :arn",
        ExpressionAttributeValues={":arn": {"S": express}},
    )
    # WHEN the join's parent ends
    assert stack.cancellation.parent_ended(p, "ABORTED") == 1
    stack.drain()
    # THEN the member is not stopped nor recorded ABORTED: its own end will be recorded
    assert stack.membership("express", "fast-x").workflow_state is PayloadState.PROCESSING


# ----------------------------------------------------------------------------- watch


def test_a_join_whose_parent_already_ended_is_cancelled_at_registration(stack: Stack) -> None:
    # GIVEN a parent execution that has ended already
    p = stack.parent("ended-parent")
    stack.aws.sfn.stop_execution(executionArn=p, error="Cancelled", cause="before the join")
    # WHEN it sends a cancelling join
    stack.join("late", ["z1", "z2", "z3"], parent=p, on_parent_gone="cancel")
    # THEN the join is cancelled at once: gone, decided ABORTED by its parent gone
    row = stack.row("late")
    cause = ended_cause(p, "ABORTED")
    assert (row.gone_cause, row.workflow_state, row.decided_by) == (
        cause,
        ABORTED,
        DECIDED_BY_PARENT_GONE,
    )
    # AND its link was written, and no member was ever started
    assert stack.links.joins_of(p) == ["late"]
    for item in ("z1", "z2", "z3"):
        assert stack.aws.states.get(stack.member(item)) is None
    assert [c["join_id"] for c in cancels(stack.handled)] == ["late"]


def test_watch_links_the_join_and_begins_the_cancellation_once_its_parent_ended(
    stack: Stack,
) -> None:
    # GIVEN a cancelling join registered while its parent ran
    p = stack.parent("watched-parent")
    stack.join("watched", ["v1"], parent=p, on_parent_gone="cancel")
    row = stack.row("watched")
    # THEN watching it again finds its parent running: nothing begins
    assert not stack.cancellation.watch(row)
    assert stack.row("watched").gone_at is None
    assert stack.queued() == []
    # WHEN its parent ends, and the join is watched (a redelivered registration)
    stack.aws.sfn.stop_execution(executionArn=p)
    assert stack.cancellation.watch(row)
    stack.drain()
    # THEN the cancellation began at once and stopped its member
    assert stack.row("watched").gone_cause == ended_cause(p, "ABORTED")
    assert_stopped(stack, "watched", "v1", ended_cause(p, "ABORTED"))


def test_watch_of_a_join_that_keeps_its_members_writes_no_link(stack: Stack) -> None:
    p = stack.parent("kept-parent")
    stack.aws.sfn.stop_execution(executionArn=p)
    stack.join("kept", ["n1"], parent=p)
    row = stack.row("kept")
    assert not stack.cancellation.watch(row)
    assert stack.links.joins_of(p) == []
    assert (row.gone_at, row.workflow_state) == (None, PayloadState.PROCESSING)
    assert_running(stack, "kept", "n1")


# ------------------------------------------------------------------------- link rows


def test_link_rows_are_bookkeeping_skipped_by_the_tables_readers(stack: Stack) -> None:
    # GIVEN a cancelling join, linked under its parent
    p = stack.parent("linking-parent")
    stack.join("linked", ["r1"], parent=p, on_parent_gone="cancel")
    key = {
        "payload_id": {"S": link_partition_for(p)},
        "waiter_id": {"S": f"{PARENT_LINK_KEY_PREFIX}linked"},
    }
    item = stack.aws.dynamodb.get_item(
        TableName=stack.aws.dependencies.table_name, Key=key, ConsistentRead=True
    )["Item"]
    assert item["join_id"] == {"S": "linked"}
    assert item["parent_execution"] == {"S": p}
    # THEN it is bookkeeping, as an attribute-value map and as plain data
    assert is_bookkeeping_item(item)
    assert is_bookkeeping_item({"payload_id": link_partition_for(p), "waiter_id": "link#linked"})
    # AND the table's readers skip it: no row under the parent's links, none in a scan
    assert list(stack.aws.dependencies.rows(link_partition_for(p))) == []
    scanned = [
        row for page in stack.aws.dependencies.scan_pages(parent_execution=p) for row in page
    ]
    assert [(row.payload_id, row.waiter_id) for row in scanned] == [("join#linked", "join")]


@pytest.mark.parametrize(
    "waiter_id", ["token#abc", "join#linked", "join", "linked", "xlink#linked"]
)
def test_rows_that_are_not_links_are_not_taken_for_bookkeeping(waiter_id: str) -> None:
    assert not is_bookkeeping_item({"payload_id": {"S": "p"}, "waiter_id": {"S": waiter_id}})


# --------------------------------------------------------------------------- waiting


@pytest.mark.parametrize(
    ("fields", "waiting"),
    [
        ({}, True),
        ({"on_parent_gone": ParentGone.CANCEL}, True),
        ({"workflow_state": PayloadState.SUCCEEDED}, False),
        ({"workflow_state": ABORTED}, False),
        ({"released_at": utcnow()}, False),
        ({"gone_at": utcnow(), "gone_cause": "gone"}, False),
    ],
)
def test_a_join_waits_only_while_undecided_not_released_and_its_parent_not_gone(
    fields: dict[str, Any], waiting: bool
) -> None:
    now = utcnow() - timedelta(minutes=1)
    row = JoinItem(
        payload_id="join#w",
        waiter_id="join",
        join_id="w",
        task_token="token-w",
        created_at=now,
        updated_at=now,
        **fields,
    )
    assert row.waiting is waiting
