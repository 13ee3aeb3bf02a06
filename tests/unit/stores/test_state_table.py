"""State table: claims, transitions and their conditional paths."""

from __future__ import annotations

import pytest

from dependency_tracker.core.enums import PayloadState
from dependency_tracker.core.errors import TransitionConflictError
from dependency_tracker.payloads.model import ProcessPayload
from tests.conftest import Aws, payload


@pytest.fixture
def model() -> ProcessPayload:
    return ProcessPayload.model_validate(payload())


def test_get_missing_is_none(aws: Aws) -> None:
    assert aws.states.get("nope") is None


def test_first_claim_creates_attempt_one(aws: Aws, model: ProcessPayload) -> None:
    claimed = aws.states.claim(model, None, message_id="m1")
    stored = aws.states.get(model.id)
    assert stored is not None
    assert stored.state is PayloadState.CLAIMED
    assert stored.attempt == claimed.attempt == 1
    assert stored.claim_message_id == "m1"
    assert stored.workflow == "pass"


def test_second_first_claim_loses(aws: Aws, model: ProcessPayload) -> None:
    aws.states.claim(model, None)
    with pytest.raises(TransitionConflictError, match="claim"):
        aws.states.claim(model, None)


def test_claim_from_stale_view_loses(aws: Aws, model: ProcessPayload) -> None:
    # GIVEN a failed attempt 1
    aws.states.claim(model, None)
    aws.states.set_final(
        payload_id=model.id,
        workflow="pass",
        state=PayloadState.FAILED,
        execution_arn="arn:e1",
        attempt=1,
        error="E",
    )
    seen = aws.states.get(model.id)
    assert seen is not None
    # WHEN two processes claim from the same view THEN only the first wins
    second = aws.states.claim(model, seen)
    assert second.attempt == 2
    with pytest.raises(TransitionConflictError):
        aws.states.claim(model, seen)
    stored = aws.states.get(model.id)
    assert stored is not None
    assert (stored.state, stored.attempt, stored.last_error) == (PayloadState.CLAIMED, 2, "E")


def test_set_processing_only_for_the_claimed_attempt(aws: Aws, model: ProcessPayload) -> None:
    aws.states.claim(model, None)
    with pytest.raises(TransitionConflictError):
        aws.states.set_processing(model.id, 2, "arn:e2")
    aws.states.set_processing(model.id, 1, "arn:e1")
    stored = aws.states.get(model.id)
    assert stored is not None
    assert stored.state is PayloadState.PROCESSING
    assert stored.execution_arn == "arn:e1"
    assert stored.executions == ["arn:e1"]
    # a second recording of the same start is refused
    with pytest.raises(TransitionConflictError):
        aws.states.set_processing(model.id, 1, "arn:e1")


def test_set_final_records_result(aws: Aws, model: ProcessPayload) -> None:
    aws.states.claim(model, None)
    aws.states.set_processing(model.id, 1, "arn:e1")
    item = aws.states.set_final(
        payload_id=model.id,
        workflow="pass",
        state=PayloadState.SUCCEEDED,
        execution_arn="arn:e1",
        attempt=1,
    )
    assert item.state is PayloadState.SUCCEEDED
    assert item.finished_at is not None
    assert item.last_error is None
    assert aws.states.get(model.id) == item


def test_set_final_before_set_processing_wins(aws: Aws, model: ProcessPayload) -> None:
    # GIVEN an execution that ended before its starter recorded it
    aws.states.claim(model, None)
    aws.states.set_final(
        payload_id=model.id,
        workflow="pass",
        state=PayloadState.SUCCEEDED,
        execution_arn="arn:e1",
        attempt=1,
    )
    # THEN the late set_processing cannot move it back
    with pytest.raises(TransitionConflictError):
        aws.states.set_processing(model.id, 1, "arn:e1")
    stored = aws.states.get(model.id)
    assert stored is not None
    assert stored.state is PayloadState.SUCCEEDED
    assert stored.executions == ["arn:e1"]


def test_repeated_final_is_refused(aws: Aws, model: ProcessPayload) -> None:
    aws.states.claim(model, None)
    kwargs = {
        "payload_id": model.id,
        "workflow": "pass",
        "state": PayloadState.FAILED,
        "execution_arn": "arn:e1",
        "attempt": 1,
        "error": "E",
        "cause": "c",
    }
    aws.states.set_final(**kwargs)  # type: ignore[arg-type]
    with pytest.raises(TransitionConflictError):
        aws.states.set_final(**kwargs)  # type: ignore[arg-type]


def test_stale_attempt_cannot_overwrite_new_claim(aws: Aws, model: ProcessPayload) -> None:
    aws.states.claim(model, None)
    first = aws.states.set_final(
        payload_id=model.id,
        workflow="pass",
        state=PayloadState.FAILED,
        execution_arn="arn:e1",
        attempt=1,
    )
    aws.states.claim(model, first)
    with pytest.raises(TransitionConflictError):
        aws.states.set_final(
            payload_id=model.id,
            workflow="pass",
            state=PayloadState.ABORTED,
            execution_arn="arn:e1-late",
            attempt=1,
        )
    stored = aws.states.get(model.id)
    assert stored is not None
    assert (stored.state, stored.attempt) == (PayloadState.CLAIMED, 2)


def test_foreign_execution_recorded_only_when_nothing_is_live(
    aws: Aws, model: ProcessPayload
) -> None:
    # GIVEN no item: a run the tracker did not start is recorded
    item = aws.states.set_final(
        payload_id=model.id,
        workflow="pass",
        state=PayloadState.SUCCEEDED,
        execution_arn="arn:manual",
        attempt=None,
    )
    assert item.attempt == 0
    assert item.created_at is not None
    # GIVEN a live attempt: a foreign run is refused
    other = ProcessPayload.model_validate(payload("item-2"))
    aws.states.claim(other, None)
    with pytest.raises(TransitionConflictError):
        aws.states.set_final(
            payload_id=other.id,
            workflow="pass",
            state=PayloadState.FAILED,
            execution_arn="arn:manual",
            attempt=None,
        )


def test_set_final_refuses_live_state(aws: Aws) -> None:
    with pytest.raises(ValueError, match="not terminal"):
        aws.states.set_final(
            payload_id="p",
            workflow="w",
            state=PayloadState.PROCESSING,
            execution_arn="a",
            attempt=1,
        )


def test_batch_get_reads_many(aws: Aws) -> None:
    ids = []
    for index in range(3):
        model = ProcessPayload.model_validate(payload(f"item-{index}"))
        aws.states.claim(model, None)
        ids.append(model.id)
    found = aws.states.batch_get([*ids, "missing", ids[0]])
    assert sorted(found) == sorted(ids)
    assert all(item.state is PayloadState.CLAIMED for item in found.values())
