"""A payload may not name the tracker's own parent state machines as its workflow.

The process function may start any "{prefix}-*" state machine, and the parents
(``wait-for-dependencies``, ``wait-for-join``) are among them: started as a payload's
workflow, a parent would read that payload as its own waits and joins. Such a payload is
refused before anything is written, with the usual invalid-message answer to its parent.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from dependency_tracker import naming
from dependency_tracker.handlers.process import lambda_handler
from dependency_tracker.models import PayloadState, waiter_id_for
from tests.conftest import PASS_WORKFLOW, WORKFLOW_ARN_PREFIX, Aws, payload, payload_id
from tests.unit.handlers.conftest import sqs_event

if TYPE_CHECKING:
    from dependency_tracker.local.context import LocalContext


def started(aws: Aws, workflow: str) -> list[dict[str, Any]]:
    listed: list[dict[str, Any]] = aws.sfn.list_executions(
        stateMachineArn=f"{WORKFLOW_ARN_PREFIX}{workflow}"
    )["executions"]
    return listed


@pytest.mark.parametrize("parent", sorted(naming.TRACKER_WORKFLOWS))
def test_a_payload_naming_a_parent_machine_is_refused_and_its_parent_told(
    aws: Aws, lambda_context: LocalContext, parent: str
) -> None:
    # GIVEN the stack's parent state machine, deployed as "{prefix}-{name}" like any workflow
    aws.create_workflow(parent, PASS_WORKFLOW)
    body = payload("loop", workflow=parent, callback={"task_token": "tok-loop"})
    # WHEN a payload naming it as its workflow is processed
    response = lambda_handler(sqs_event(body, ids=["loop-msg"]), lambda_context)
    # THEN nothing retries it and the parent machine never starts
    assert response["batchItemFailures"] == []
    assert started(aws, parent) == []
    # AND nothing was claimed; the message is kept as invalid, saying why
    assert aws.states.get(payload_id("loop", workflow=parent)) is None
    record = aws.states.get("invalid-message/loop-msg")
    assert record is not None
    assert "tracker's own parent state machines" in (record.last_error or "")
    # AND its parent hears DependencyInvalid instead of waiting out its timeout
    told = aws.dependencies.get("invalid-message/loop-msg", waiter_id_for("tok-loop"))
    assert told is not None
    assert told.workflow_state is PayloadState.INVALID


def test_a_workflow_named_like_a_parent_still_runs(aws: Aws, lambda_context: LocalContext) -> None:
    # GIVEN a managed workflow whose name merely resembles a parent's
    aws.create_workflow("wait-for-tiles", PASS_WORKFLOW)
    body = payload("fine", workflow="wait-for-tiles")
    # WHEN it is processed THEN it starts as usual
    assert lambda_handler(sqs_event(body), lambda_context)["batchItemFailures"] == []
    assert len(started(aws, "wait-for-tiles")) == 1
