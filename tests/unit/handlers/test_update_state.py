"""update-state handler: real EventBridge status changes from real executions."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest

from dependency_tracker.core.enums import PayloadState
from dependency_tracker.handlers.process import lambda_handler as process_handler
from dependency_tracker.handlers.update_state import lambda_handler
from dependency_tracker.table.items import waiter_id_for
from dependency_tracker_local.events import status_change_event
from tests.conftest import ACCOUNT, REGION, Aws, load_event, payload, payload_id
from tests.unit.handlers.conftest import sqs_event

if TYPE_CHECKING:
    from dependency_tracker_local.context import LocalContext


def run_child(aws: Aws, ctx: LocalContext, body: dict[str, Any]) -> dict[str, Any]:
    """Send ``body`` through the process handler and wait for its execution to stop."""
    process_handler(sqs_event(body), ctx)
    item = aws.states.get(payload_id(body["features"][0]["id"], body["process"][0]["workflow"]))
    assert item is not None
    assert item.execution_arn is not None
    return aws.wait_for_execution(item.execution_arn)


def event_for(execution: dict[str, Any]) -> dict[str, Any]:
    return status_change_event(execution, region=REGION, account=ACCOUNT)


@pytest.mark.usefixtures("workflows")
@pytest.mark.parametrize(
    ("workflow", "state", "error"),
    [
        ("pass", PayloadState.SUCCEEDED, None),
        ("fail", PayloadState.FAILED, "TaskFailed"),
        ("invalid", PayloadState.INVALID, "InvalidInput"),
    ],
)
def test_final_state_is_written_and_waiters_resolved(
    aws: Aws, lambda_context: LocalContext, workflow: str, state: PayloadState, error: str | None
) -> None:
    # GIVEN a running payload with two waiters
    body = payload(workflow=workflow, callback={"task_token": "t1"})
    execution = run_child(aws, lambda_context, body)
    process_handler(
        sqs_event(payload(workflow=workflow, callback={"task_token": "t2"})), lambda_context
    )
    # WHEN its status change arrives
    result = lambda_handler(event_for(execution), lambda_context)
    # THEN the state and every waiter carry the outcome
    assert result == {"action": "recorded"}
    pid = payload_id(workflow=workflow)
    item = aws.states.get(pid)
    assert item is not None
    assert (item.state, item.last_error) == (state, error)
    for token in ("t1", "t2"):
        waiter = aws.dependencies.get(pid, waiter_id_for(token))
        assert waiter is not None
        assert waiter.workflow_state is state
        assert waiter.error == error
        assert waiter.execution_arn == execution["executionArn"]
        assert waiter.replayed is False


@pytest.mark.usefixtures("workflows")
def test_input_left_out_of_the_event_is_fetched(aws: Aws, lambda_context: LocalContext) -> None:
    execution = run_child(aws, lambda_context, payload(callback={"task_token": "t"}))
    event = event_for(execution)
    event["detail"]["input"] = None
    event["detail"]["inputDetails"] = {"included": False}
    assert lambda_handler(event, lambda_context) == {"action": "recorded"}
    item = aws.states.get(payload_id())
    assert item is not None
    assert item.state is PayloadState.SUCCEEDED


@pytest.mark.usefixtures("workflows")
def test_repeated_event_changes_nothing(aws: Aws, lambda_context: LocalContext) -> None:
    execution = run_child(aws, lambda_context, payload(callback={"task_token": "t"}))
    event = event_for(execution)
    lambda_handler(event, lambda_context)
    before = aws.states.get(payload_id())
    waiter_before = aws.dependencies.get(payload_id(), waiter_id_for("t"))
    assert lambda_handler(event, lambda_context) == {"action": "repeated"}
    assert aws.states.get(payload_id()) == before
    assert aws.dependencies.get(payload_id(), waiter_id_for("t")) == waiter_before


@pytest.mark.usefixtures("workflows")
def test_stale_attempt_does_not_resolve_new_waiters(aws: Aws, lambda_context: LocalContext) -> None:
    # GIVEN attempt 1 failed and was recorded, and attempt 2 is running with a new waiter
    first = run_child(aws, lambda_context, payload(workflow="fail"))
    lambda_handler(event_for(first), lambda_context)
    process_handler(
        sqs_event(payload(workflow="fail", callback={"task_token": "new"}), ids=["m2"]),
        lambda_context,
    )
    item = aws.states.get(payload_id(workflow="fail"))
    assert item is not None
    assert item.attempt == 2
    # WHEN attempt 1's event is delivered again
    assert lambda_handler(event_for(first), lambda_context) == {"action": "stale"}
    # THEN the new waiter still waits for attempt 2
    waiter = aws.dependencies.get(payload_id(workflow="fail"), waiter_id_for("new"))
    assert waiter is not None
    assert waiter.workflow_state is PayloadState.PROCESSING


def test_unmanaged_running_and_foreign_inputs_are_ignored(
    aws: Aws, lambda_context: LocalContext
) -> None:
    base = load_event("eventbridge_status_change.json")
    unmanaged = json.loads(json.dumps(base))
    unmanaged["detail"]["stateMachineArn"] = unmanaged["detail"]["stateMachineArn"].replace(
        "deptrack-pass", "other-pass"
    )
    running = json.loads(json.dumps(base))
    running["detail"]["status"] = "RUNNING"
    foreign = json.loads(json.dumps(base))
    foreign["detail"]["input"] = '{"not": "a payload"}'
    assert lambda_handler(unmanaged, lambda_context) == {"action": "not_managed"}
    assert lambda_handler(running, lambda_context) == {"action": "not_terminal"}
    assert lambda_handler(foreign, lambda_context) == {"action": "unknown_input"}
    assert aws.states.get(payload_id()) is None


def test_static_event_for_an_untracked_payload_is_recorded(
    aws: Aws, lambda_context: LocalContext
) -> None:
    # GIVEN the real event shape of a run the tracker never saw (started by hand)
    assert lambda_handler(load_event("eventbridge_status_change.json"), lambda_context) == {
        "action": "recorded"
    }
    item = aws.states.get(payload_id())
    assert item is not None
    assert (item.state, item.attempt) == (PayloadState.SUCCEEDED, 0)


def test_malformed_event_raises_for_the_retry_policy(lambda_context: LocalContext) -> None:
    event = load_event("eventbridge_status_change.json")
    del event["detail"]["executionArn"]
    with pytest.raises(ValueError, match="executionArn"):
        lambda_handler(event, lambda_context)


@pytest.mark.usefixtures("workflows")
def test_success_stores_the_result_and_replays_it(aws: Aws, lambda_context: LocalContext) -> None:
    # GIVEN a payload that ran and succeeded, with a waiter
    execution = run_child(aws, lambda_context, payload(callback={"task_token": "t1"}))
    lambda_handler(event_for(execution), lambda_context)
    item = aws.states.get(payload_id())
    assert item is not None
    assert item.result_json is not None
    stored = json.loads(item.result_json)
    assert stored["items"] == [{"id": "item-1", "collection": "sentinel-2-l2a"}]
    waited = aws.dependencies.get(payload_id(), waiter_id_for("t1"))
    assert waited is not None
    assert waited.result_json == item.result_json
    # WHEN a second waiter arrives later THEN it is resolved with the same stored result
    process_handler(sqs_event(payload(callback={"task_token": "t2"}), ids=["m2"]), lambda_context)
    replayed = aws.dependencies.get(payload_id(), waiter_id_for("t2"))
    assert replayed is not None
    assert (replayed.replayed, replayed.result_json) == (True, item.result_json)


@pytest.mark.usefixtures("workflows")
def test_express_status_reports_arrive_by_sqs(aws: Aws, lambda_context: LocalContext) -> None:
    # GIVEN a running payload, and its workflow's own report of its end, next to garbage
    execution = run_child(aws, lambda_context, payload(callback={"task_token": "t1"}))
    detail = event_for(execution)["detail"]
    report = {"status_report": detail}
    event = sqs_event(report, "{not a report", ids=["good", "bad"])
    # WHEN the reports are delivered
    response = lambda_handler(event, lambda_context)
    # THEN the good one is recorded like an EventBridge event, the bad one alone is retried
    assert response == {"batchItemFailures": [{"itemIdentifier": "bad"}]}
    item = aws.states.get(payload_id())
    assert item is not None
    assert item.state is PayloadState.SUCCEEDED
    waiter = aws.dependencies.get(payload_id(), waiter_id_for("t1"))
    assert waiter is not None
    assert waiter.workflow_state is PayloadState.SUCCEEDED
