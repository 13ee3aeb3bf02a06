"""Final states in the order runs ended, whatever order their reports arrive in.

moto has no redrives and its Express starts are idempotent, so these paths are
driven with the reports AWS would send: EventBridge retries a delivery for up
to 24 hours (a first failure's event can arrive after its redrive's success),
and an Express start under a used name runs a second time.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

from dependency_tracker.core import naming
from dependency_tracker.core.enums import PayloadState, utcnow
from dependency_tracker.core.errors import InvalidMessageError
from dependency_tracker.payloads.bucket import PayloadBucket
from dependency_tracker.payloads.events import StatusChange
from dependency_tracker.payloads.model import ProcessPayload
from dependency_tracker.payloads.update_state import UpdateAction, UpdateStateFlow
from dependency_tracker.table.items import WaiterItem, waiter_id_for
from tests.conftest import WORKFLOW_ARN_PREFIX, payload, payload_id

if TYPE_CHECKING:
    from tests.conftest import Aws

NAME = naming.execution_name(payload_id(), 1)
STANDARD = f"{WORKFLOW_ARN_PREFIX.replace(':stateMachine:', ':execution:')}pass:{NAME}"


def express(run: str) -> str:
    return f"arn:aws:states:us-east-1:123456789012:express:deptrack-pass:{NAME}:{run}"


def report(
    arn: str, status: str, *, stop: int, redrives: int = 0, error: str | None = None
) -> StatusChange:
    return StatusChange.model_validate(
        {
            "executionArn": arn,
            "stateMachineArn": f"{WORKFLOW_ARN_PREFIX}pass",
            "name": NAME,
            "status": status,
            "startDate": stop - 1000,
            "stopDate": stop,
            "input": json.dumps(payload()),
            "output": "{}" if status == "SUCCEEDED" else None,
            "error": error,
            "cause": "boom" if error else None,
            "redriveCount": redrives,
        }
    )


@pytest.fixture
def flow(aws: Aws) -> UpdateStateFlow:
    return UpdateStateFlow(
        settings=aws.settings, states=aws.states, dependencies=aws.dependencies, sfn=aws.sfn
    )


def running(aws: Aws, arn: str) -> None:
    """Attempt 1 of the payload, started as ``arn``, with one waiter."""
    claimed = aws.states.claim(ProcessPayload.model_validate(payload()), None)
    aws.states.set_processing(payload_id(), claimed.attempt, arn)
    now = utcnow()
    aws.dependencies.register(
        WaiterItem(
            payload_id=payload_id(),
            waiter_id=waiter_id_for("t"),
            task_token="t",
            created_at=now,
            updated_at=now,
        )
    )


def test_a_late_failure_from_before_a_redrive_never_overwrites_its_success(
    aws: Aws, flow: UpdateStateFlow
) -> None:
    # GIVEN a run that failed, then was redriven (same ARN) and succeeded
    running(aws, STANDARD)
    failed = report(STANDARD, "FAILED", stop=1_000_000, error="TaskFailed")
    assert flow.handle(failed) is UpdateAction.RECORDED
    redriven = report(STANDARD, "SUCCEEDED", stop=2_000_000, redrives=1)
    assert flow.handle(redriven) is UpdateAction.RECORDED
    # WHEN the first failure's event is delivered again, late
    action = flow.handle(failed)
    # THEN it is stale: the redriven run's success stands
    assert action is UpdateAction.STALE
    item = aws.states.get(payload_id())
    assert item is not None
    assert item.state is PayloadState.SUCCEEDED
    # AND a repeat of the success is a repeat
    assert flow.handle(redriven) is UpdateAction.REPEATED


def test_a_redrive_that_fails_again_is_recorded_over_the_first_failure(
    aws: Aws, flow: UpdateStateFlow
) -> None:
    # GIVEN a run that failed with one error
    running(aws, STANDARD)
    assert flow.handle(report(STANDARD, "FAILED", stop=10, error="First")) is UpdateAction.RECORDED
    # WHEN its redrive fails with another
    again = report(STANDARD, "FAILED", stop=20, redrives=1, error="Second")
    # THEN the newer failure is the one recorded
    assert flow.handle(again) is UpdateAction.RECORDED
    item = aws.states.get(payload_id())
    assert item is not None
    assert item.last_error == "Second"


def test_a_second_express_run_of_an_ended_attempt_changes_nothing(
    aws: Aws, flow: UpdateStateFlow
) -> None:
    # GIVEN attempt 1 ran twice as Express runs (Express starts are not idempotent): the
    # first succeeded and woke the waiter
    running(aws, express("run-1"))
    assert flow.handle(report(express("run-1"), "SUCCEEDED", stop=10)) is UpdateAction.RECORDED
    # WHEN the second run of the same attempt fails
    action = flow.handle(report(express("run-2"), "FAILED", stop=20, error="TaskFailed"))
    # THEN the attempt keeps the first end (it was SUCCEEDED, then FAILED, before)
    assert action is UpdateAction.STALE
    item = aws.states.get(payload_id())
    assert item is not None
    assert (item.state, item.execution_arn) == (PayloadState.SUCCEEDED, express("run-1"))
    waiter = aws.dependencies.get(payload_id(), waiter_id_for("t"))
    assert waiter is not None
    assert waiter.workflow_state is PayloadState.SUCCEEDED


def test_a_new_attempt_does_not_carry_the_previous_run(aws: Aws, flow: UpdateStateFlow) -> None:
    # GIVEN attempt 1 failed
    running(aws, STANDARD)
    assert flow.handle(report(STANDARD, "FAILED", stop=10, error="X")) is UpdateAction.RECORDED
    seen = aws.states.get(payload_id())
    assert seen is not None
    # WHEN attempt 2 is claimed
    aws.states.claim(ProcessPayload.model_validate(payload()), seen)
    # THEN the item names no run until attempt 2's starts (liveness looks at the right one)
    claimed = aws.states.get(payload_id())
    assert claimed is not None
    assert (claimed.state, claimed.attempt) == (PayloadState.CLAIMED, 2)
    assert claimed.execution_arn is None
    assert claimed.executions == [STANDARD]


def test_a_payload_pointer_that_cannot_be_read_yet_is_retried_not_dropped(aws: Aws) -> None:
    # GIVEN a run of a large payload, passed by a pointer that S3 does not serve right now
    aws.s3.create_bucket(Bucket="deptrack-payloads")
    flow = UpdateStateFlow(
        settings=aws.settings,
        states=aws.states,
        dependencies=aws.dependencies,
        sfn=aws.sfn,
        bucket=PayloadBucket(aws.s3, "deptrack-payloads"),
    )
    running(aws, STANDARD)
    change = report(STANDARD, "SUCCEEDED", stop=10).model_copy(
        update={"input": json.dumps({"url": "s3://deptrack-payloads/payloads/missing.json"})}
    )
    # WHEN its status change arrives
    # THEN it raises (the event is retried, then kept in the DLQ), instead of being dropped
    # as "unknown input" with its waiter never answered
    with pytest.raises(InvalidMessageError) as raised:
        flow.handle(change)
    assert raised.value.retryable
    waiter = aws.dependencies.get(payload_id(), waiter_id_for("t"))
    assert waiter is not None
    assert waiter.workflow_state is PayloadState.PROCESSING
