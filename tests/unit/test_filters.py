"""The event filters the template declares, evaluated as Lambda/EventBridge would."""

from __future__ import annotations

import copy

import pytest

from dependency_tracker_local.filters import (
    CALLBACK_STREAM_FILTER,
    matches,
    update_state_event_pattern,
)
from tests.conftest import WORKFLOW_ARN_PREFIX, load_event


def stream_record() -> dict[str, object]:
    record: dict[str, object] = load_event("ddb_stream_waiter.json")["Records"][0]
    return record


def test_terminal_unnotified_waiter_passes() -> None:
    assert matches(CALLBACK_STREAM_FILTER, stream_record())


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(
            lambda r: r["dynamodb"]["NewImage"].update(workflow_state={"S": "PROCESSING"}),
            id="processing",
        ),
        pytest.param(
            lambda r: r["dynamodb"]["NewImage"].update(notified_at={"S": "2026-01-01"}),
            id="notified",
        ),
        pytest.param(lambda r: r.update(eventName="REMOVE"), id="remove"),
        pytest.param(lambda r: r["dynamodb"].pop("NewImage"), id="no-image"),
    ],
)
def test_other_records_are_filtered_out(change: object) -> None:
    record = copy.deepcopy(stream_record())
    change(record)  # type: ignore[operator]
    assert not matches(CALLBACK_STREAM_FILTER, record)


def test_update_state_pattern_matches_terminal_managed_executions() -> None:
    pattern = update_state_event_pattern(WORKFLOW_ARN_PREFIX)
    event = load_event("eventbridge_status_change.json")
    assert matches(pattern, event)
    running = copy.deepcopy(event)
    running["detail"]["status"] = "RUNNING"
    assert not matches(pattern, running)
    foreign = copy.deepcopy(event)
    foreign["detail"]["stateMachineArn"] = "arn:aws:states:us-east-1:1:stateMachine:other"
    assert not matches(pattern, foreign)


def test_unsupported_rules_are_refused() -> None:
    with pytest.raises(ValueError, match="unsupported"):
        matches({"a": [{"numeric": [">", 1]}]}, {"a": 2})
