"""A send Step Functions refuses with ``AccessDeniedException`` is recorded, once, and swept.

The callback role may answer only the stack's own state machines and those named in
``ExtraParentStateMachineArns``; a parent of any other is refused as AWS refuses it. The
refusal is a hook on Step Functions (botocore's ``before-call``) that answers with
AWS's error until the grant is "fixed", then plays the parents (``Parents``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest
from botocore.awsrequest import AWSResponse, HTTPHeaders

from dependency_tracker.answers.actions import CallbackAction
from dependency_tracker.core import clients
from dependency_tracker.core.enums import PayloadState
from dependency_tracker.core.naming import state_machine_of
from tests.unit.flows.test_join_registration import Harness, join_body
from tests.unit.flows.test_join_tokens import ITEMS, join_row, sent_by
from tests.unit.flows.test_sweeper import Parents, store, sweeper, waiter

if TYPE_CHECKING:
    import io

    from tests.conftest import Aws

SEND_OPERATIONS = ("SendTaskSuccess", "SendTaskFailure")
MACHINE = "arn:aws:states:us-east-1:123456789012:stateMachine:team-parent"
PARENT = "arn:aws:states:us-east-1:123456789012:execution:team-parent:run-1"
DENIED = "AccessDeniedException"


@dataclass
class Grant:
    """The callback role's grant on the parents' state machine: refused until ``allowed``."""

    parents: Parents = field(default_factory=Parents)
    allowed: bool = False
    denied: int = 0

    def __call__(self, params: dict[str, Any], model: Any, **_: Any) -> Any:
        if model.name not in SEND_OPERATIONS:
            return None
        if self.allowed:
            return self.parents.answer(params, model)
        self.denied += 1
        message = (
            "User: arn:aws:sts::123456789012:assumed-role/callback/deptrack-callback is not "
            f"authorized to perform: states:{model.name} on resource: {MACHINE}"
        )
        error = {
            "Error": {"Code": DENIED, "Message": message},
            "ResponseMetadata": {"HTTPStatusCode": 400},
        }
        return AWSResponse("https://states.invalid/", 400, HTTPHeaders(), None), error

    def attach(self, client: Any) -> None:
        for operation in SEND_OPERATIONS:
            client.meta.events.register_first(f"before-call.sfn.{operation}", self)


@pytest.fixture
def grant(aws: Aws) -> Grant:
    refusing = Grant()
    # The flows' client (aws.app()) and the sweeper's (the process-wide one).
    refusing.attach(aws.sfn)
    refusing.attach(clients.client("stepfunctions"))
    return refusing


def records(log_lines: io.StringIO, level: str) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in log_lines.getvalue().splitlines() if line.strip()]
    return [line for line in lines if line.get("level") == level]


def test_the_state_machine_of_an_execution_arn() -> None:
    assert state_machine_of(PARENT) == MACHINE
    express = "arn:aws:states:us-east-1:123456789012:express:team-parent:run-1:abc"
    assert state_machine_of(express) == MACHINE
    assert state_machine_of("not-an-arn") is None


def test_a_refused_send_is_logged_with_the_fix_and_recorded_on_the_row_once(
    aws: Aws, grant: Grant, log_lines: io.StringIO
) -> None:
    # GIVEN a terminal row whose parent runs in a state machine the role may not answer
    row = waiter(age=timedelta(minutes=1)).model_copy(update={"parent_execution": PARENT})
    store(aws, row)
    flow = aws.app().callback
    records_before = len(aws.stream_records())
    # WHEN the callback flow handles it
    action = flow.handle(row)
    # THEN it is refused (no retry can fix it: one send), the row records it, un-notified
    assert action is CallbackAction.REFUSED
    assert grant.denied == 1
    stored = aws.dependencies.get(row.payload_id, row.waiter_id)
    assert stored is not None
    assert stored.notify_refused == DENIED
    assert stored.notify_refused_at is not None
    assert stored.notified_at is None
    # AND one ERROR names the parent, its state machine, the code and the fix
    (error,) = records(log_lines, "ERROR")
    for text in (PARENT, MACHINE, DENIED, "ExtraParentStateMachineArns"):
        assert text in error["message"]
    assert error["parent_state_machine"] == MACHINE
    # WHEN the row's own write comes back on the stream (its filter passes it) and is refused
    assert len(aws.stream_records()) == records_before + 1
    again = aws.dependencies.get(row.payload_id, row.waiter_id)
    assert again is not None
    assert flow.handle(again) is CallbackAction.REFUSED
    # THEN nothing is written again: no further stream record, so no loop, and no second ERROR
    assert len(aws.stream_records()) == records_before + 1
    last = aws.dependencies.get(row.payload_id, row.waiter_id)
    assert last is not None
    assert last.notify_refused_at == stored.notify_refused_at
    assert len(records(log_lines, "ERROR")) == 1
    assert grant.denied == 2


def test_the_sweeper_answers_the_parent_once_the_grant_is_fixed(aws: Aws, grant: Grant) -> None:
    # GIVEN a row whose answer was refused (recorded), left un-notified
    row = waiter(age=timedelta(minutes=20)).model_copy(update={"parent_execution": PARENT})
    store(aws, row)
    assert aws.app().callback.handle(row) is CallbackAction.REFUSED
    # WHEN the sweeper runs while the grant is still missing THEN it is refused again, kept
    assert sweeper(aws).run().failed == 1
    # WHEN the grant is fixed and the sweeper runs again
    grant.allowed = True
    report = sweeper(aws).run()
    # THEN the parent got its answer, once, and the row is told
    assert report.sent == 1
    assert grant.parents.sent == [(row.task_token, "SendTaskSuccess")]
    told = aws.dependencies.get(row.payload_id, row.waiter_id)
    assert told is not None
    assert told.notify_outcome == "SENT:SUCCEEDED"
    assert told.notify_refused == DENIED  # what happened before the fix, kept


@pytest.mark.usefixtures("workflows")
def test_a_join_whose_parent_may_not_be_answered_records_it_and_is_answered_after_the_fix(
    aws: Aws, grant: Grant, log_lines: io.StringIO
) -> None:
    # GIVEN a decided join whose parent runs in a state machine the role may not answer
    harness = Harness(aws)
    harness.send(sent_by(join_body("j", ITEMS), "token-A", parent=PARENT))
    harness.drain()
    for item in ITEMS:
        harness.finish("j", item, PayloadState.SUCCEEDED)
    # WHEN the callback flow handles the decided join row
    assert harness.callback.handle(join_row(harness, "j")) is CallbackAction.REFUSED
    # THEN the join row records the refusal, no token is marked answered, one ERROR names it
    row = join_row(harness, "j")
    assert row.notify_refused == DENIED
    assert row.notified_at is None
    assert row.answered == {}
    (error,) = records(log_lines, "ERROR")
    assert PARENT in error["message"]
    assert error["join_id"] == "j"
    # AND a second refusal writes nothing
    assert harness.callback.handle(row) is CallbackAction.REFUSED
    assert join_row(harness, "j").notify_refused_at == row.notify_refused_at
    # WHEN the grant is fixed and the row is handled again (as the sweeper hands it over)
    grant.allowed = True
    assert harness.callback.handle(join_row(harness, "j")) is CallbackAction.SENT
    # THEN the parent got its answer once
    assert grant.parents.sent == [("token-A", "SendTaskSuccess")]
    assert join_row(harness, "j").notified_at is not None
