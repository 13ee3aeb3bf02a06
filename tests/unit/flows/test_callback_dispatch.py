"""The callback flow hands each row to the flow of its kind, and counts each once.

The notifiers are stand-ins that record what they were handed: this is the routing
alone (the notifiers' own tests are test_callback_*.py, test_join_*.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, cast

import pytest

from dependency_tracker.answers.actions import CallbackAction
from dependency_tracker.callbacks.flow import CallbackFlow
from dependency_tracker.core.backoff import Backoff
from dependency_tracker.core.enums import PayloadState, utcnow
from dependency_tracker.core.observability import metrics
from dependency_tracker.joins.rows import JoinItem
from dependency_tracker.table.items import (
    JOIN_ROW_KEY,
    MembershipItem,
    join_partition_for,
    membership_id_for,
)
from tests.unit.flows.test_sweeper import waiter

if TYPE_CHECKING:
    from collections.abc import Iterator

    from dependency_tracker.answers.parent import ParentAnswers
    from dependency_tracker.joins.notify import JoinNotifier
    from dependency_tracker.joins.rows import Row
    from dependency_tracker.waits.callback import WaiterNotifier
    from tests.conftest import Aws


@dataclass
class Notifier:
    """Records what it was handed and answers ``action``."""

    action: CallbackAction
    handed: list[tuple[str, Any, float | None]] = field(default_factory=list)

    def notify(self, image: Any, *, deadline: float | None = None) -> CallbackAction:
        self.handed.append(("notify", image, deadline))
        return self.action

    def record_member(self, image: Any) -> CallbackAction:
        self.handed.append(("record_member", image, None))
        return self.action


@dataclass
class Flows:
    waiters: Notifier = field(default_factory=lambda: Notifier(CallbackAction.SENT))
    joins: Notifier = field(default_factory=lambda: Notifier(CallbackAction.RECORDED))

    def flow(self, answers: ParentAnswers) -> CallbackFlow:
        return CallbackFlow(
            answers=answers,
            waiters=cast("WaiterNotifier", self.waiters),
            joins=cast("JoinNotifier", self.joins),
        )


@pytest.fixture
def counted() -> Iterator[dict[str, Any]]:
    """The metrics added while the test runs (the process-wide set, emptied around it)."""
    metrics.clear_metrics()
    try:
        yield metrics.metric_set
    finally:
        metrics.clear_metrics()


def membership(state: PayloadState) -> MembershipItem:
    now = utcnow()
    return MembershipItem(
        payload_id="c/workflow-pass/m0",
        waiter_id=membership_id_for("j"),
        join_id="j",
        workflow_state=state,
        created_at=now,
        updated_at=now,
    )


def join(state: PayloadState) -> JoinItem:
    now = utcnow()
    return JoinItem(
        payload_id=join_partition_for("j"),
        waiter_id=JOIN_ROW_KEY,
        join_id="j",
        task_token="token-j",
        quorum=1,
        workflow_state=state,
        created_at=now,
        updated_at=now,
    )


def test_a_waiter_row_goes_to_the_waits(aws: Aws, counted: dict[str, Any]) -> None:
    # GIVEN a terminal waiter row
    flows = Flows()
    row = waiter(age=timedelta(minutes=1))
    # WHEN the flow handles it, with a deadline
    action = flows.flow(aws.app().answers).handle(row, deadline=12.5)
    # THEN the waiters' notifier had it (deadline and all), the joins nothing
    assert action is CallbackAction.SENT
    assert flows.waiters.handed == [("notify", row, 12.5)]
    assert flows.joins.handed == []
    assert set(counted) == {"CallbackSent"}


def test_a_join_row_goes_to_the_joins(aws: Aws, counted: dict[str, Any]) -> None:
    flows = Flows(joins=Notifier(CallbackAction.PARENT_GONE))
    row = join(PayloadState.SUCCEEDED)
    action = flows.flow(aws.app().answers).handle(row, deadline=3.0)
    assert action is CallbackAction.PARENT_GONE
    assert flows.joins.handed == [("notify", row, 3.0)]
    assert flows.waiters.handed == []
    assert set(counted) == {"CallbackParentGone"}


def test_a_membership_row_is_recorded_by_the_joins(aws: Aws, counted: dict[str, Any]) -> None:
    flows = Flows()
    row = membership(PayloadState.FAILED)
    action = flows.flow(aws.app().answers).handle(row)
    assert action is CallbackAction.RECORDED
    assert flows.joins.handed == [("record_member", row, None)]
    assert flows.waiters.handed == []
    assert set(counted) == {"CallbackRecorded"}


@pytest.mark.parametrize(
    "row",
    [
        waiter(age=timedelta(minutes=1), state=PayloadState.PROCESSING),
        join(PayloadState.PROCESSING),
        membership(PayloadState.PROCESSING),
    ],
    ids=["waiter", "join", "membership"],
)
def test_a_row_not_terminal_yet_reaches_no_flow(
    aws: Aws, counted: dict[str, Any], row: Row
) -> None:
    flows = Flows()
    assert flows.flow(aws.app().answers).handle(row) is CallbackAction.NOT_READY
    assert flows.waiters.handed == flows.joins.handed == []
    assert set(counted) == {"CallbackNotReady"}


def test_the_sends_client_and_backoff_are_the_shared_answerer_s(aws: Aws) -> None:
    # GIVEN the app's callback flow WHEN its backoff is replaced (as tests and chaos runs do)
    root = aws.app()
    flow = root.callback
    backoff = Backoff(attempts=2)
    flow.backoff = backoff
    # THEN the one answerer both notifiers send through has it, and the flow names its client
    assert root.answers.backoff is backoff
    assert root.waiter_notifier.answers is root.join_notifier.answers is root.answers
    assert flow.sfn is root.answers.sfn is aws.sfn
    assert root.sweeper.callback is flow


def test_the_actions_metric_names_are_the_documented_ones() -> None:
    assert {action.metric_name for action in CallbackAction} == {
        "CallbackSent",
        "CallbackParentGone",
        "CallbackAlreadyNotified",
        "CallbackNotReady",
        "CallbackRecorded",
        "CallbackRefused",
    }
