"""Bad input on the process queue: reported, recorded or dead-lettered; nothing lost."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

from dependency_tracker.models import PayloadState
from tests.conftest import wait_until
from tests.e2e.conftest import dependency, finished, start_parent, state_of

if TYPE_CHECKING:
    from dependency_tracker.local import LocalStack

pytestmark = pytest.mark.e2e


def test_invalid_dependency_message_fails_its_parent_at_once(stack: LocalStack) -> None:
    # GIVEN a parent whose dependency has neither features nor id
    parent = start_parent(stack, "bad-dep", [{"process": [{"workflow": "simulate"}]}])
    # THEN it hears DependencyInvalid instead of waiting for its timeout
    described = finished(stack, parent)
    assert (described["status"], described["error"]) == ("FAILED", "DependencyInvalid")


def test_garbage_is_recorded_and_unknown_workflows_reach_the_dlq(stack: LocalStack) -> None:
    sqs = stack.client("sqs")
    queue = stack.outputs["ProcessQueueUrl"]
    # GIVEN garbage, a payload for a workflow nobody deployed, and a good payload
    garbage = sqs.send_message(QueueUrl=queue, MessageBody="{this is not json")["MessageId"]
    unknown = dependency("b-unknown")
    unknown["process"][0]["workflow"] = "not-deployed"
    sqs.send_message(QueueUrl=queue, MessageBody=json.dumps(unknown))
    sqs.send_message(QueueUrl=queue, MessageBody=json.dumps(dependency("b-good")))
    # THEN the good one runs, the garbage is recorded as invalid ...
    wait_until(
        lambda: (
            (item := state_of(stack, "e2e/workflow-simulate/b-good")) is not None
            and item.state is PayloadState.SUCCEEDED
        )
    )
    record = wait_until(lambda: state_of(stack, f"invalid-message/{garbage}"))
    assert record.state is PayloadState.INVALID
    assert "not valid JSON" in (record.last_error or "")
    # ... and the unknown workflow is retried, then lands in the DLQ, intact
    dlq = stack.outputs["ProcessDlqUrl"]

    def dead_lettered() -> list[dict[str, str]]:
        messages: list[dict[str, str]] = sqs.receive_message(
            QueueUrl=dlq, MaxNumberOfMessages=10, AttributeNames=["All"]
        ).get("Messages", [])
        return messages

    (message,) = wait_until(dead_lettered, timeout=60)
    assert json.loads(message["Body"]) == unknown
    assert int(message["Attributes"]["ApproximateReceiveCount"]) >= 3
