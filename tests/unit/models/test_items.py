"""Table items, resolutions, callback outputs and status changes."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from dependency_tracker.core.enums import DependencyError, ExecutionStatus, PayloadState
from dependency_tracker.payloads.events import StatusChange
from dependency_tracker.table.items import PayloadStateItem, Resolution, WaiterItem, waiter_id_for
from dependency_tracker.waits.outputs import CallbackFailure
from tests.conftest import load_event

NOW = datetime(2026, 11, 1, 12, tzinfo=UTC)


def test_state_item_round_trips_through_dynamodb_types() -> None:
    item = PayloadStateItem(
        payload_id="p",
        state=PayloadState.PROCESSING,
        workflow="w",
        attempt=2,
        execution_arn="arn:e2",
        executions=["arn:e2", "arn:e1"],
        created_at=NOW,
        updated_at=NOW,
    )
    raw = item.to_item()
    assert raw["executions"] == {"SS": ["arn:e1", "arn:e2"]}
    assert raw["attempt"] == {"N": "2"}
    assert PayloadStateItem.from_item(raw) == item.model_copy(
        update={"executions": ["arn:e1", "arn:e2"]}
    )


def test_waiter_key_is_a_hash_not_the_token() -> None:
    token = "x" * 2048
    waiter_id = waiter_id_for(token)
    assert token not in waiter_id
    assert len(waiter_id.encode()) < 1024
    assert waiter_id == waiter_id_for(token)


def test_waiter_resolution_only_when_terminal() -> None:
    waiter = WaiterItem(
        payload_id="p", waiter_id="w", task_token="t", created_at=NOW, updated_at=NOW
    )
    assert waiter.resolution is None
    done = waiter.model_copy(update={"workflow_state": PayloadState.FAILED, "error": "E"})
    assert done.resolution == Resolution(state=PayloadState.FAILED, error="E")


def test_resolution_rejects_live_states() -> None:
    with pytest.raises(ValueError, match="terminal"):
        Resolution(state=PayloadState.PROCESSING)


@pytest.mark.parametrize(
    ("state", "error"),
    [
        (PayloadState.FAILED, "DependencyFailed"),
        (PayloadState.INVALID, "DependencyInvalid"),
        (PayloadState.ABORTED, "DependencyAborted"),
    ],
)
def test_failure_error_names_are_the_public_ones(state: PayloadState, error: str) -> None:
    assert DependencyError.for_state(state).value == error


def test_no_error_name_is_reserved() -> None:
    assert not any(error.value.startswith("States.") for error in DependencyError)


def test_success_has_no_error_name() -> None:
    with pytest.raises(ValueError, match="not a failure state"):
        DependencyError.for_state(PayloadState.SUCCEEDED)


def test_failure_cause_names_the_payload_and_its_error() -> None:
    failure = CallbackFailure(
        error=DependencyError.FAILED,
        payload_id="p",
        state=PayloadState.FAILED,
        execution_arn="arn:e",
        payload_error="TaskFailed",
        payload_cause="boom",
    )
    assert json.loads(failure.cause_json()) == {
        "payload_id": "p",
        "state": "FAILED",
        "execution_arn": "arn:e",
        "error": "TaskFailed",
        "cause": "boom",
    }


@pytest.mark.parametrize(
    ("status", "error", "expected"),
    [
        ("SUCCEEDED", None, PayloadState.SUCCEEDED),
        ("FAILED", "TaskFailed", PayloadState.FAILED),
        ("FAILED", "InvalidInput", PayloadState.INVALID),
        ("FAILED", "stactask.exceptions.InvalidInput", PayloadState.INVALID),
        ("TIMED_OUT", None, PayloadState.FAILED),
        ("ABORTED", None, PayloadState.ABORTED),
        ("RUNNING", None, None),
    ],
)
def test_status_maps_to_payload_state(
    status: str, error: str | None, expected: PayloadState | None
) -> None:
    detail = load_event("eventbridge_status_change.json")["detail"]
    change = StatusChange.model_validate({**detail, "status": status, "error": error})
    assert change.final_state == expected
    assert change.status is ExecutionStatus(status)


def test_status_change_reads_the_real_event_detail() -> None:
    change = StatusChange.model_validate(load_event("eventbridge_status_change.json")["detail"])
    assert change.state_machine_name == "deptrack-pass"
    assert change.input_details.included is True
    assert change.failure_error is None
