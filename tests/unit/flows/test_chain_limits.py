"""Chained next steps within the process queue's message limit: by reference past a bound.

SQS refuses a body over the queue's maximum message size (256 KiB unless set;
the strict layer of the ``aws`` fixture refuses it here too). update-state sends
a next step inline up to :data:`MAX_INLINE_CHAIN_BYTES`, and past it writes the
body to the payload bucket and sends ``{"url": ...}``, which the process queue
accepts like any message.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from botocore.exceptions import ClientError

from dependency_tracker.core import naming
from dependency_tracker.core.enums import PayloadState, utcnow
from dependency_tracker.core.errors import ConfigurationError
from dependency_tracker.core.limits import SQS_DEFAULT_MAX_MESSAGE_BYTES, utf8_size
from dependency_tracker.intake.parse import read_message
from dependency_tracker.payloads.bucket import PayloadBucket
from dependency_tracker.payloads.chaining import (
    CHAINED_PREFIX,
    MAX_INLINE_CHAIN_BYTES,
    next_payload,
)
from dependency_tracker.payloads.events import StatusChange
from dependency_tracker.payloads.model import ProcessPayload
from dependency_tracker.payloads.update_state import UpdateAction, UpdateStateFlow
from dependency_tracker.table.items import WaiterItem, waiter_id_for
from dependency_tracker.waits.messages import ProcessMessage
from tests.conftest import ACCOUNT, REGION

if TYPE_CHECKING:
    from tests.conftest import Aws

BUCKET = "deptrack-test-chain"
FIRST: dict[str, Any] = {
    "type": "FeatureCollection",
    "features": [{"type": "Feature", "id": "big", "collection": "c"}],
    "process": [{"workflow": "one"}, {"workflow": "two"}],
}
FIRST_ID = "c/workflow-one/big"
NEXT_ID = "c/workflow-two/big"


@pytest.fixture
def bucket(aws: Aws) -> PayloadBucket:
    aws.s3.create_bucket(Bucket=BUCKET)
    return PayloadBucket(aws.s3, BUCKET)


def update_state(aws: Aws, bucket: PayloadBucket | None) -> UpdateStateFlow:
    return UpdateStateFlow(
        settings=aws.settings.model_copy(update={"process_queue_url": aws.queue_url}),
        states=aws.states,
        dependencies=aws.dependencies,
        sfn=aws.sfn,
        bucket=bucket,
        sqs=aws.sqs,
    )


def output(pad: int) -> dict[str, Any]:
    feature = {"type": "Feature", "id": "big", "collection": "c", "properties": {"pad": "x" * pad}}
    return {"type": "FeatureCollection", "features": [feature]}


def output_for_next_body_of(size: int) -> dict[str, Any]:
    """A first step's output whose next-step body is exactly ``size`` bytes."""
    payload = ProcessPayload.model_validate(FIRST)

    def body_size(pad: int) -> int:
        body = next_payload(payload, json.dumps(output(pad)))
        assert body is not None
        return utf8_size(json.dumps(body))

    chosen = output(size - body_size(0))
    assert body_size(size - body_size(0)) == size
    return chosen


def succeeded(first_output: dict[str, Any]) -> StatusChange:
    name = naming.execution_name(FIRST_ID, 1)
    return StatusChange.model_validate(
        {
            "executionArn": f"arn:aws:states:{REGION}:{ACCOUNT}:execution:deptrack-one:{name}",
            "stateMachineArn": f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:deptrack-one",
            "name": name,
            "status": "SUCCEEDED",
            "input": json.dumps(FIRST),
            "output": json.dumps(first_output),
        }
    )


def published(aws: Aws) -> list[str]:
    response = aws.sqs.receive_message(QueueUrl=aws.queue_url, MaxNumberOfMessages=10)
    return [message["Body"] for message in response.get("Messages", [])]


def chained_objects(aws: Aws) -> list[str]:
    listed = aws.s3.list_objects_v2(Bucket=BUCKET, Prefix=f"{CHAINED_PREFIX}/")
    return [item["Key"] for item in listed.get("Contents", [])]


def test_next_step_at_the_bound_is_sent_inline(aws: Aws, bucket: PayloadBucket) -> None:
    first_output = output_for_next_body_of(MAX_INLINE_CHAIN_BYTES)
    assert update_state(aws, bucket).handle(succeeded(first_output)) is UpdateAction.RECORDED
    (body,) = published(aws)
    assert utf8_size(body) == MAX_INLINE_CHAIN_BYTES
    assert json.loads(body)["features"] == first_output["features"]
    assert chained_objects(aws) == []


def test_next_step_one_byte_over_goes_by_reference(aws: Aws, bucket: PayloadBucket) -> None:
    first_output = output_for_next_body_of(MAX_INLINE_CHAIN_BYTES + 1)
    update_state(aws, bucket).handle(succeeded(first_output))
    (body,) = published(aws)
    (key,) = chained_objects(aws)
    assert json.loads(body) == {"url": f"s3://{BUCKET}/{key}"}
    # the process flow reads it back as the next step's payload
    message = read_message(body, load_url=bucket.read_url)
    assert isinstance(message, ProcessMessage)
    assert message.payload_id == NEXT_ID
    assert (
        message.payload.features[0].model_dump(mode="json", exclude_none=True)["properties"]
        == first_output["features"][0]["properties"]
    )


def test_a_body_over_the_queue_limit_is_refused_when_sent_inline(aws: Aws) -> None:
    # what update-state did before: SQS (the strict layer here) refuses it
    with pytest.raises(ClientError) as refused:
        aws.sqs.send_message(
            QueueUrl=aws.queue_url, MessageBody="x" * (SQS_DEFAULT_MAX_MESSAGE_BYTES + 1)
        )
    assert refused.value.response["Error"]["Code"] == "InvalidParameterValue"


def test_a_failed_write_loses_no_step(aws: Aws, bucket: PayloadBucket) -> None:
    # GIVEN a parent waiting on the first step
    now = utcnow()
    aws.dependencies.register(
        WaiterItem(
            payload_id=FIRST_ID,
            waiter_id=waiter_id_for("tok"),
            task_token="tok",
            created_at=now,
            updated_at=now,
        )
    )
    change = succeeded(output_for_next_body_of(MAX_INLINE_CHAIN_BYTES + 1))
    # WHEN the next step's body cannot be written (S3 fails only for chained/ keys)
    s3 = boto3.client("s3", region_name=REGION)

    def refuse(params: dict[str, Any], **_: Any) -> None:
        if params["Key"].startswith(f"{CHAINED_PREFIX}/"):
            raise ClientError({"Error": {"Code": "SlowDown", "Message": "later"}}, "PutObject")

    s3.meta.events.register("provide-client-params.s3.PutObject", refuse)
    with pytest.raises(ClientError):
        update_state(aws, PayloadBucket(s3, BUCKET)).handle(change)
    # THEN the waiter was told, nothing was published, and the status change failed
    waiter = aws.dependencies.get(FIRST_ID, waiter_id_for("tok"))
    assert waiter is not None
    assert waiter.workflow_state is PayloadState.SUCCEEDED
    assert published(aws) == []
    # AND its retry publishes the step
    assert update_state(aws, bucket).handle(change) is UpdateAction.REPEATED
    (body,) = published(aws)
    assert json.loads(body)["url"].startswith(f"s3://{BUCKET}/{CHAINED_PREFIX}/")


def test_no_bucket_for_an_oversize_step_raises_for_the_retry_and_dlq(aws: Aws) -> None:
    change = succeeded(output_for_next_body_of(MAX_INLINE_CHAIN_BYTES + 1))
    with pytest.raises(ConfigurationError, match="DEPTRACK_PAYLOAD_BUCKET"):
        update_state(aws, None).handle(change)
    assert published(aws) == []
