"""A dependency that never becomes readable: its parent is answered before the DLQ takes it.

The real parent state machine waits on a ``{"url"}`` dependency whose object is never
written. SQS redelivers the message after each visibility timeout; on the last receive
the queue's redrive policy allows, the process function answers the parent with
``DependencyInvalid`` and the cause, and the message still reaches the DLQ, whole.
"""

from __future__ import annotations

import io
import json
from typing import TYPE_CHECKING, Any

import pytest

from dependency_tracker_local import EmbeddedStack
from tests.conftest import wait_until
from tests.e2e.conftest import finished, start_parent

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.e2e

MAX_RECEIVES = 2


@pytest.fixture(scope="module")
def stack() -> Iterator[EmbeddedStack]:
    # Few, quick redeliveries: the last receive comes within seconds.
    with EmbeddedStack(
        prefix="lastreceive",
        sink=io.StringIO(),
        max_receive_count=MAX_RECEIVES,
        visibility_timeout=1,
        sweeper_interval=None,
    ) as running:
        yield running


def test_an_unreadable_dependency_fails_its_parent_and_reaches_the_dlq(
    stack: EmbeddedStack,
) -> None:
    # GIVEN a parent waiting (for up to 10 minutes) on an object nobody writes
    url = f"s3://{stack.outputs['PayloadBucketName']}/payloads/never-written.json"
    parent = start_parent(stack, "waits-on-nothing", [{"url": url}], timeout_seconds=600)
    # THEN it fails with DependencyInvalid after the queue's retries, not at its timeout
    described = finished(stack, parent, timeout=60)
    assert (described["status"], described["error"]) == ("FAILED", "DependencyInvalid")
    cause = json.loads(described["cause"])
    told = json.dumps(cause)
    # S3 tells a caller that may not list the bucket AccessDenied, not NoSuchKey (IAM model)
    assert f"cannot read {url}: AccessDenied" in told
    assert f"receive {MAX_RECEIVES}, the last" in told
    # AND the message itself reaches the DLQ, whole, for the operator to redrive
    sqs = stack.client("sqs")

    def dead_lettered() -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = sqs.receive_message(
            QueueUrl=stack.outputs["ProcessDlqUrl"], MaxNumberOfMessages=10
        ).get("Messages", [])
        return messages

    (message,) = wait_until(dead_lettered, timeout=30)
    body = json.loads(message["Body"])
    assert body["payload"] == {"url": url}
    assert body["callback"]["task_token"]
