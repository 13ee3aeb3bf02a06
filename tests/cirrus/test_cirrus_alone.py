"""cirrus-geo 2.0.0's own Lambdas on the embedded cirrus layout, with no tracker at all.

What cirrus does here is what the tracker's cirrus mode builds on: which
workflow events it publishes for each outcome (and in what shape), what its
state table holds afterwards, and how its process Lambda and the SQS event
source mapping treat a batch it could only partly take.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import TYPE_CHECKING, Any

from tests.cirrus.conftest import cirrus_payload, cirrus_payload_id
from tests.conftest import wait_until

if TYPE_CHECKING:
    from tests.cirrus.conftest import Cirrus

UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
ISO_UTC = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+\+00:00"


def types(events: list[dict[str, Any]]) -> list[str]:
    return [e["event_type"] for e in events]


def execution_arn(event: dict[str, Any]) -> str:
    """The ARN in an event's ``execution`` (a console URL; the ARN is after the last '/')."""
    url: str = event["execution"]
    return url.rsplit("/", 1)[-1]


def test_success_claims_starts_and_succeeds_once(cirrus: Cirrus) -> None:
    body = cirrus_payload("ok-1", "succeed")
    payload_id = cirrus_payload_id("ok-1", "succeed")
    cirrus.send(body)

    events = cirrus.wait_for(payload_id, "SUCCEEDED")
    assert types(events) == ["CLAIMED_PROCESSING", "STARTED_PROCESSING", "SUCCEEDED"]
    claimed, started, succeeded = events
    # CLAIMED_PROCESSING carries no execution, no URL.
    assert set(claimed) == {"event_type", "payload_id", "isotimestamp"}
    assert re.fullmatch(ISO_UTC, claimed["isotimestamp"])
    bucket = cirrus.outputs["CirrusPayloadBucketName"]
    (run,) = cirrus.executions("succeed")
    prefix = f"s3://{bucket}/cirrus/executions/{payload_id}/{run['name']}"
    assert set(started) == {
        "event_type",
        "payload_id",
        "isotimestamp",
        "input_payload_url",
        "execution",
    }
    assert started["input_payload_url"] == f"{prefix}/input.json"
    assert started["execution"] == (
        "https://us-east-1.console.aws.amazon.com/states/home?region=us-east-1"
        f"#/v2/executions/details/{run['executionArn']}"
    )
    assert set(succeeded) == {
        "event_type",
        "payload_id",
        "isotimestamp",
        "input_payload_url",
        "output_payload_url",
        "execution",
    }
    assert execution_arn(succeeded) == run["executionArn"]
    assert re.fullmatch(UUID, run["name"])
    assert run["status"] == "SUCCEEDED"
    # The output payload is in cirrus's bucket: the input, with its id (a Pass workflow).
    assert succeeded["output_payload_url"] == f"{prefix}/output.json"
    output = cirrus.read_s3_json(succeeded["output_payload_url"])
    assert output == {**body, "id": payload_id}
    assert cirrus.read_s3_json(started["input_payload_url"]) == output

    item = cirrus.state_item(payload_id)
    assert item is not None
    assert item["state_updated"].startswith("SUCCEEDED_")
    assert item["executions"] == [run["executionArn"]]  # ARNs here, URLs in events
    # cirrus 2.0.0 never writes ``outputs``: update_state's set_succeeded gets none, and a
    # claim REMOVEs the attribute. The output is only the object in its bucket.
    assert "outputs" not in item
    assert "last_error" not in item
    assert set(item) == {
        "collections_workflow",
        "itemids",
        "created",
        "updated",
        "claimed_at",
        "state_updated",
        "executions",
    }
    assert item["collections_workflow"] == "cirrus-tier_succeed"
    assert item["itemids"] == "ok-1"


def test_events_raw_and_enveloped(cirrus: Cirrus) -> None:
    """Raw delivery: the body is the event. Otherwise: SNS's envelope, the event in Message."""
    payload_id = cirrus_payload_id("shape-1", "succeed")
    cirrus.send(cirrus_payload("shape-1", "succeed"))
    cirrus.wait_for(payload_id, "SUCCEEDED")

    raw = cirrus.events.messages_for(payload_id)
    assert [json.loads(m["Body"])["event_type"] for m in raw] == [
        "CLAIMED_PROCESSING",
        "STARTED_PROCESSING",
        "SUCCEEDED",
    ]
    # With raw delivery SNS's message attributes become the SQS message's.
    assert raw[0]["MessageAttributes"] == {
        "event_type": {"StringValue": "CLAIMED_PROCESSING", "DataType": "String"},
        "workflow": {"StringValue": "succeed", "DataType": "String"},
        "collections": {"StringValue": "cirrus-tier", "DataType": "String"},
    }

    def enveloped() -> list[dict[str, Any]] | None:
        found = cirrus.enveloped.messages_for(payload_id)
        return found if len(found) == 3 else None

    messages = wait_until(enveloped)
    envelope = json.loads(messages[0]["Body"])
    assert envelope["Type"] == "Notification"
    assert envelope["TopicArn"] == cirrus.outputs["CirrusWorkflowEventTopicArn"]
    assert json.loads(envelope["Message"]) == json.loads(raw[0]["Body"])
    assert envelope["MessageAttributes"]["event_type"] == {
        "Type": "String",
        "Value": "CLAIMED_PROCESSING",
    }
    assert "MessageAttributes" not in messages[0]


def test_failure_is_failed(cirrus: Cirrus) -> None:
    payload_id = cirrus_payload_id("bad-1", "fail")
    cirrus.send(cirrus_payload("bad-1", "fail"))

    events = cirrus.wait_for(payload_id, "FAILED")
    assert types(events) == ["CLAIMED_PROCESSING", "STARTED_PROCESSING", "FAILED"]
    failed = events[-1]
    assert failed["error"] == "WorkflowFailed: the cirrus test workflow failed"
    assert "output_payload_url" not in failed
    (run,) = cirrus.executions("fail")
    assert execution_arn(failed) == run["executionArn"]
    item = cirrus.state_item(payload_id)
    assert item is not None
    assert item["state_updated"].startswith("FAILED_")
    assert item["last_error"] == failed["error"]


def test_invalid_input_is_invalid(cirrus: Cirrus) -> None:
    payload_id = cirrus_payload_id("invalid-1", "invalid")
    cirrus.send(cirrus_payload("invalid-1", "invalid"))

    events = cirrus.wait_for(payload_id, "INVALID")
    assert types(events) == ["CLAIMED_PROCESSING", "STARTED_PROCESSING", "INVALID"]
    assert events[-1]["error"] == (
        "stactask.exceptions.InvalidInput: the cirrus test workflow rejected its input"
    )
    item = cirrus.state_item(payload_id)
    assert item is not None
    assert item["state_updated"].startswith("INVALID_")

    # An INVALID payload is not run again: the next submission is only announced.
    cirrus.send(cirrus_payload("invalid-1", "invalid"))
    events = cirrus.wait_for(payload_id, "ALREADY_INVALID")
    assert types(events)[3:] == ["ALREADY_INVALID"]
    assert len(cirrus.executions("invalid")) == 1


def test_timeout_is_timed_out_and_recorded_failed(cirrus: Cirrus) -> None:
    """moto honours the state machine's TimeoutSeconds: the execution ends TIMED_OUT."""
    payload_id = cirrus_payload_id("slow-1", "timeout")
    cirrus.send(cirrus_payload("slow-1", "timeout"))

    events = cirrus.wait_for(payload_id, "TIMED_OUT")
    assert types(events) == ["CLAIMED_PROCESSING", "STARTED_PROCESSING", "TIMED_OUT"]
    assert events[-1]["error"] == "TimedOutError: The step function execution timed out."
    (run,) = cirrus.executions("timeout")
    assert run["status"] == "TIMED_OUT"
    item = cirrus.state_item(payload_id)
    assert item is not None
    # No TIMED_OUT state: cirrus records a timeout as FAILED (and runs it again when asked).
    assert item["state_updated"].startswith("FAILED_")
    assert item["last_error"] == events[-1]["error"]


def test_already_succeeded_runs_nothing(cirrus: Cirrus) -> None:
    body = cirrus_payload("again-1", "succeed")
    payload_id = cirrus_payload_id("again-1", "succeed")
    cirrus.send(body)
    cirrus.wait_for(payload_id, "SUCCEEDED")
    runs = [r for r in cirrus.executions("succeed") if _ran(cirrus, r, payload_id)]

    cirrus.send(body)
    events = cirrus.wait_for(payload_id, "ALREADY_SUCCEEDED")
    assert types(events) == [
        "CLAIMED_PROCESSING",
        "STARTED_PROCESSING",
        "SUCCEEDED",
        "ALREADY_SUCCEEDED",
    ]
    skipped = events[-1]
    # No output URL, and an input URL naming an execution that never ran (cirrus derives
    # it from the next execution name it would use): the state table is what to read.
    assert set(skipped) == {"event_type", "payload_id", "isotimestamp", "input_payload_url"}
    assert runs[0]["name"] not in skipped["input_payload_url"]
    assert [r for r in cirrus.executions("succeed") if _ran(cirrus, r, payload_id)] == runs
    item = cirrus.state_item(payload_id)
    assert item is not None
    assert item["executions"] == [runs[0]["executionArn"]]


def test_replace_runs_again(cirrus: Cirrus) -> None:
    payload_id = cirrus_payload_id("replace-1", "succeed")
    cirrus.send(cirrus_payload("replace-1", "succeed"))
    cirrus.wait_for(payload_id, "SUCCEEDED")

    cirrus.send(cirrus_payload("replace-1", "succeed", replace=True))
    events = cirrus.wait_for(payload_id, "SUCCEEDED", count=2)
    assert types(events) == ["CLAIMED_PROCESSING", "STARTED_PROCESSING", "SUCCEEDED"] * 2
    first, second = execution_arn(events[2]), execution_arn(events[5])
    assert first != second
    item = cirrus.state_item(payload_id)
    assert item is not None
    assert item["executions"] == [first, second]
    assert item["state_updated"].startswith("SUCCEEDED_")


def test_failed_payload_runs_again(cirrus: Cirrus) -> None:
    """FAILED is not final for cirrus: the next submission runs (cirrus's minimal workflow)."""
    payload_id = cirrus_payload_id("retry-1", "minimal")
    cirrus.send(cirrus_payload("retry-1", "minimal", succeed=False))
    events = cirrus.wait_for(payload_id, "FAILED")
    assert events[-1]["error"] == "WorkflowMismatch: The succeed field was not true"

    cirrus.send(cirrus_payload("retry-1", "minimal", succeed=True))
    events = cirrus.wait_for(payload_id, "SUCCEEDED")
    assert types(events) == [
        "CLAIMED_PROCESSING",
        "STARTED_PROCESSING",
        "FAILED",
        "CLAIMED_PROCESSING",
        "STARTED_PROCESSING",
        "SUCCEEDED",
    ]
    item = cirrus.state_item(payload_id)
    assert item is not None
    assert len(item["executions"]) == 2
    # A claim removes the last run's error; a success does not write one.
    assert "last_error" not in item


def test_running_payload_is_not_started_twice(cirrus: Cirrus) -> None:
    """A payload sent again while it runs: ALREADY_PROCESSING, one execution."""
    body = cirrus_payload("busy-1", "succeed", workflow_options={"wait_seconds": 3})
    payload_id = cirrus_payload_id("busy-1", "succeed")
    cirrus.send(body)
    cirrus.wait_for(payload_id, "STARTED_PROCESSING")

    cirrus.send(body)
    cirrus.wait_for(payload_id, "ALREADY_PROCESSING")
    # Not even ``replace`` starts a second run of a running payload (its claim is refused).
    cirrus.send(cirrus_payload("busy-1", "succeed", replace=True))
    cirrus.wait_for(payload_id, "ALREADY_PROCESSING", count=2)
    events = cirrus.wait_for(payload_id, "SUCCEEDED")
    assert types(events) == [
        "CLAIMED_PROCESSING",
        "STARTED_PROCESSING",
        "ALREADY_PROCESSING",
        "ALREADY_PROCESSING",
        "SUCCEEDED",
    ]
    assert len([r for r in cirrus.executions("succeed") if _ran(cirrus, r, payload_id)]) == 1


def test_duplicates_in_one_batch_run_once(cirrus: Cirrus) -> None:
    body = cirrus_payload("dup-1", "succeed")
    payload_id = cirrus_payload_id("dup-1", "succeed")
    cirrus.send(body, body, body)

    events = cirrus.wait_for(payload_id, "SUCCEEDED")
    assert sorted(types(events)) == sorted(
        [
            "CLAIMED_PROCESSING",
            "STARTED_PROCESSING",
            "DUPLICATE_ID_ENCOUNTERED",
            "DUPLICATE_ID_ENCOUNTERED",
            "SUCCEEDED",
        ]
    )
    assert len([r for r in cirrus.executions("succeed") if _ran(cirrus, r, payload_id)]) == 1


def test_partial_batch_failure(cirrus: Cirrus) -> None:
    """cirrus deletes what it took and raises; the pump leaves the rest to redrive.

    A message that is not JSON and one that is not a process payload share a batch
    with a good payload. The good one runs once (cirrus deleted its message itself);
    the two others come back after the visibility timeout, are announced at each
    receive, and reach the DLQ after maxReceiveCount (5) receives.
    """
    good = cirrus_payload("mixed-1", "succeed")
    good_id = cirrus_payload_id("mixed-1", "succeed")
    not_json = "this is not json"
    not_a_payload = {"type": "FeatureCollection", "features": [], "note": "no process"}
    cirrus.send(good, not_json, not_a_payload)

    sqs = cirrus.client("sqs")
    dlq = cirrus.outputs["CirrusProcessDlqUrl"]
    dead: list[dict[str, Any]] = []

    def in_dlq() -> bool:
        dead.extend(
            sqs.receive_message(QueueUrl=dlq, MaxNumberOfMessages=10, WaitTimeSeconds=0).get(
                "Messages", []
            )
        )
        return len(dead) == 2

    wait_until(in_dlq, timeout=60)
    assert sorted(m["Body"] for m in dead) == sorted([not_json, json.dumps(not_a_payload)])
    events = cirrus.wait_for(good_id, "SUCCEEDED")
    assert types(events) == ["CLAIMED_PROCESSING", "STARTED_PROCESSING", "SUCCEEDED"]
    assert len([r for r in cirrus.executions("succeed") if _ran(cirrus, r, good_id)]) == 1
    # Announced at each of the 5 receives, under the payload id "unknown" (none to give).
    unknown = cirrus.events.events("unknown")
    assert Counter(types(unknown)) == {"RECORD_EXTRACT_FAILED": 5, "NOT_A_PROCESS_PAYLOAD": 5}
    extract_failed = next(e for e in unknown if e["event_type"] == "RECORD_EXTRACT_FAILED")
    assert extract_failed["error"].startswith("Expecting value")
    invalid_url = extract_failed["input_payload_url"]
    assert invalid_url.startswith(
        f"s3://{cirrus.outputs['CirrusPayloadBucketName']}/cirrus/tmp/invalid/"
    )
    # What cirrus keeps of it: the whole SQS record as the Lambda received it.
    assert cirrus.read_s3_json(invalid_url)["body"] == not_json


def _ran(cirrus: Cirrus, execution: dict[str, Any], payload_id: str) -> bool:
    """Whether ``execution`` ran ``payload_id`` (its input names it)."""
    described = cirrus.client("stepfunctions").describe_execution(
        executionArn=execution["executionArn"]
    )
    return bool(json.loads(described["input"]).get("id") == payload_id)
