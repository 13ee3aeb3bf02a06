"""Idempotent payloads end to end: stored results, keys, re-runs, leases, chains, big results."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest

from dependency_tracker.core.enums import PayloadState
from tests.conftest import ROLE_ARN, wait_until
from tests.e2e.conftest import (
    child_executions,
    dependency,
    dependency_id,
    finished,
    start_parent,
    state_of,
)
from tests.e2e.parent_limits import callback_outputs

if TYPE_CHECKING:
    from dependency_tracker_local import LocalStack

pytestmark = pytest.mark.e2e


def summaries(stack: LocalStack, parent: str) -> list[dict[str, Any]]:
    described = finished(stack, parent)
    assert described["status"] == "SUCCEEDED", described.get("error")
    result: list[dict[str, Any]] = json.loads(described["output"])["dependencies"]
    return result


def test_same_payload_twice_runs_once_and_replays_the_stored_result(stack: LocalStack) -> None:
    # one parent after the other: the second finds the payload finished
    parents = [start_parent(stack, "idem-1", [dependency("i-same")])]
    (first,) = summaries(stack, parents[0])
    parents.append(start_parent(stack, "idem-2", [dependency("i-same")]))
    (second,) = summaries(stack, parents[1])
    assert len(child_executions(stack, dependency_id("i-same"))) == 1
    assert (first["replayed"], second["replayed"]) == (False, True)
    assert first["payload_id"] == second["payload_id"] == dependency_id("i-same")
    # both callbacks carried the stored result and the one execution
    (one,), (two,) = (callback_outputs(stack, parent) for parent in parents)
    assert one["result"] == two["result"]
    assert one["result"]["items"] == [{"id": "i-same", "collection": "e2e"}]
    assert one["execution_arn"] == two["execution_arn"]


def test_jmespath_key_makes_different_payloads_one(stack: LocalStack) -> None:
    def keyed(item: str) -> dict[str, Any]:
        body = dependency(item)
        body["features"][0]["properties"] = {"scene": "S2A_2026_001"}
        body["process"][0]["idempotency_key"] = "features[0].properties.scene"
        return body

    (one,) = summaries(stack, start_parent(stack, "key-1", [keyed("k-a")]))
    (two,) = summaries(stack, start_parent(stack, "key-2", [keyed("k-b")]))
    assert one["payload_id"] == two["payload_id"]
    assert one["payload_id"].startswith("workflow-simulate/key-")
    assert len(child_executions(stack, one["payload_id"])) == 1
    assert two["replayed"] is True


def test_failure_then_resubmission_runs_a_new_attempt(stack: LocalStack) -> None:
    parent = start_parent(stack, "rerun-1", [dependency("i-rerun", outcome="fail")])
    assert finished(stack, parent)["error"] == "DependencyFailed"
    (summary,) = summaries(stack, start_parent(stack, "rerun-2", [dependency("i-rerun")]))
    assert summary["replayed"] is False
    item = state_of(stack, dependency_id("i-rerun"))
    assert item is not None
    assert (item.state, item.attempt, item.last_error) == (PayloadState.SUCCEEDED, 2, "TaskFailed")
    assert len(item.executions) == 2


def rerun_of(item: str, seen: PayloadState, attempt: int) -> dict[str, Any]:
    """What ``rerun --from`` sends for ``item`` seen ``seen`` at ``attempt`` (it succeeds)."""
    body = dependency(item)
    body["process"][0] |= {"replace": True, "replace_if": {"state": seen, "attempt": attempt}}
    return body


def test_two_reruns_of_one_failure_run_one_attempt_and_keep_its_success(stack: LocalStack) -> None:
    # GIVEN a payload whose run failed (attempt 1)
    pid = dependency_id("i-twice")
    parent = start_parent(stack, "twice-0", [dependency("i-twice", outcome="fail")])
    assert finished(stack, parent)["error"] == "DependencyFailed"
    # WHEN two reruns of that failure are sent at once (two operators, or a retried send)
    sqs = stack.client("sqs")
    queue = stack.outputs["ProcessQueueUrl"]
    for _ in range(2):
        sqs.send_message(
            QueueUrl=queue, MessageBody=json.dumps(rerun_of("i-twice", PayloadState.FAILED, 1))
        )

    def drained_and_succeeded() -> Any:
        counts = sqs.get_queue_attributes(
            QueueUrl=queue,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        item = state_of(stack, pid)
        idle = not any(int(value) for value in counts.values())
        return idle and item is not None and item.state is PayloadState.SUCCEEDED and item

    done = wait_until(drained_and_succeeded, timeout=30)
    # THEN exactly one new attempt ran, and it succeeded
    assert (done.attempt, len(done.executions)) == (2, 2)
    # AND a parent that waits on the same rerun later hears that success replayed
    late = start_parent(stack, "twice-late", [rerun_of("i-twice", PayloadState.FAILED, 1)])
    (summary,) = summaries(stack, late)
    assert (summary["payload_id"], summary["replayed"]) == (pid, True)
    (told,) = callback_outputs(stack, late)
    assert told["execution_arn"] == done.execution_arn
    after = state_of(stack, pid)
    assert after is not None
    assert (after.state, after.attempt, after.executions, after.finished_at) == (
        PayloadState.SUCCEEDED,
        2,
        done.executions,
        done.finished_at,
    )


def test_a_run_whose_end_was_never_seen_is_recorded_by_the_lease_not_run_again(
    stack: LocalStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a payload that ran, whose status change the tracker never saw: it looks
    # PROCESSING, claimed long ago
    sqs = stack.client("sqs")
    queue = stack.outputs["ProcessQueueUrl"]
    sqs.send_message(QueueUrl=queue, MessageBody=json.dumps(dependency("i-lease")))
    wait_until(
        lambda: (
            (item := state_of(stack, dependency_id("i-lease"))) is not None
            and item.state is PayloadState.SUCCEEDED
        )
    )
    stack.client("dynamodb").update_item(
        TableName=stack.outputs["StateTableName"],
        Key={"payload_id": {"S": dependency_id("i-lease")}},
        UpdateExpression="SET #state = :processing, claimed_at = :old",
        ExpressionAttributeNames={"#state": "state"},
        ExpressionAttributeValues={
            ":processing": {"S": "PROCESSING"},
            ":old": {"S": (datetime.now(UTC) - timedelta(hours=2)).isoformat()},
        },
    )
    lease = stack.app.settings.claim_lease_seconds if stack.app else None
    stack.configure(claim_lease_seconds=3600)
    # WHEN a parent waits on it THEN the lease check finds that the run ended, records its end
    # as update-state would, and answers the parent; the payload is not started again
    (summary,) = summaries(stack, start_parent(stack, "lease", [dependency("i-lease")]))
    assert (summary["payload_id"], summary["replayed"]) == (dependency_id("i-lease"), False)
    item = state_of(stack, dependency_id("i-lease"))
    assert item is not None
    assert (item.state, item.attempt) == (PayloadState.SUCCEEDED, 1)
    assert len(item.executions) == 1
    stack.configure(claim_lease_seconds=lease)


def test_three_step_chain_with_a_parent_waiting_on_the_last_step(stack: LocalStack) -> None:
    sfn = stack.client("stepfunctions")
    simulate = sfn.describe_state_machine(
        stateMachineArn=stack.outputs["StateMachines"]["simulate"]
    )["definition"]
    for step in ("step-two", "step-three"):
        sfn.create_state_machine(name=f"deptrack-{step}", roleArn=ROLE_ARN, definition=simulate)
    first = dependency("chain-1")
    first["process"] += [{"workflow": "step-two"}, {"workflow": "step-three"}]
    last_id = "e2e/workflow-step-three/chain-1"
    # GIVEN a parent that waits on the last step without starting it
    parent = start_parent(stack, "chain-parent", [{"wait_for": last_id}])
    # WHEN the first step is published
    stack.client("sqs").send_message(
        QueueUrl=stack.outputs["ProcessQueueUrl"], MessageBody=json.dumps(first)
    )
    # THEN each step ran once, in order, and the parent resumed with the last one
    (summary,) = summaries(stack, parent)
    assert summary["payload_id"] == last_id
    for step_id in (dependency_id("chain-1"), "e2e/workflow-step-two/chain-1", last_id):
        item = state_of(stack, step_id)
        assert item is not None
        assert (item.state, len(item.executions)) == (PayloadState.SUCCEEDED, 1)


def test_large_output_is_stored_in_the_bucket_not_inline(stack: LocalStack) -> None:
    big = dependency("i-big")
    big["features"][0]["properties"] = {"blob": "x" * 100_000}
    parent = start_parent(stack, "big-inline", [big])
    summaries(stack, parent)
    (sent,) = callback_outputs(stack, parent)
    pointer = sent["result"]
    assert pointer["url"].startswith(f"s3://{stack.outputs['PayloadBucketName']}/results/")
    assert pointer["bytes"] > 100_000
    bucket, key = pointer["url"].removeprefix("s3://").split("/", 1)
    stored = json.loads(stack.client("s3").get_object(Bucket=bucket, Key=key)["Body"].read())
    assert stored["output"]["features"][0]["properties"]["blob"] == "x" * 100_000
    item = state_of(stack, dependency_id("i-big"))
    assert item is not None
    assert len(item.result_json or "") < 1000


def test_one_megabyte_result_travels_as_a_pointer(stack: LocalStack) -> None:
    # GIVEN a child that wrote a 1 MB result to S3 and returns a pointer to it
    bucket = stack.outputs["PayloadBucketName"]
    body = json.dumps({"features": [{"id": "x", "blob": "y" * (1024 * 1024)}]})
    stack.client("s3").put_object(Bucket=bucket, Key="outputs/one-mb.json", Body=body.encode())
    url = f"s3://{bucket}/outputs/one-mb.json"
    stack.client("stepfunctions").create_state_machine(
        name="deptrack-big-output",
        roleArn=ROLE_ARN,
        definition=json.dumps(
            {
                "StartAt": "Done",
                "States": {"Done": {"Type": "Pass", "Result": {"url": url}, "End": True}},
            }
        ),
    )
    payload = dependency("i-1mb")
    payload["process"][0]["workflow"] = "big-output"
    started = time.monotonic()
    parent = start_parent(stack, "one-mb", [payload])
    summaries(stack, parent)
    elapsed = time.monotonic() - started
    # THEN the parent gets the pointer, and the bytes it points at are intact
    (sent,) = callback_outputs(stack, parent)
    assert sent["result"] == {"url": url}
    fetched = stack.client("s3").get_object(Bucket=bucket, Key="outputs/one-mb.json")["Body"].read()
    assert len(fetched) > 1024 * 1024
    print(f"\n1 MB result end to end: {elapsed:.2f} s")  # noqa: T201


def test_payload_over_the_execution_limit_travels_by_reference(stack: LocalStack) -> None:
    # GIVEN a 300 KB payload, published as an S3 pointer (it would not fit in SQS either)
    bucket = stack.outputs["PayloadBucketName"]
    huge = dependency("i-huge")
    huge["features"][0]["properties"] = {"blob": "z" * 300_000}
    stack.client("s3").put_object(Bucket=bucket, Key="in/huge.json", Body=json.dumps(huge).encode())
    parent = start_parent(stack, "huge-input", [{"url": f"s3://{bucket}/in/huge.json"}])
    # THEN the child got a pointer as input, and the tracker still knew which payload ended
    (summary,) = summaries(stack, parent)
    assert summary["payload_id"] == dependency_id("i-huge")
    (arn,) = child_executions(stack, dependency_id("i-huge"))
    child_input = json.loads(
        stack.client("stepfunctions").describe_execution(executionArn=arn)["input"]
    )
    assert list(child_input) == ["url"]
    assert child_input["url"].startswith(f"s3://{bucket}/payloads/")


@pytest.mark.parametrize(("outcome", "error"), [("succeed", None), ("fail", "DependencyFailed")])
def test_express_child_reports_its_own_end(
    stack: LocalStack, outcome: str, error: str | None
) -> None:
    # GIVEN a dependency run by an Express workflow (no status-change events on AWS)
    express = dependency(f"i-express-{outcome}", outcome=outcome)
    express["process"][0]["workflow"] = "simulate-express"
    parent = start_parent(stack, f"express-{outcome}", [express])
    # THEN its final report on the status-report queue resumes the parent
    described = finished(stack, parent)
    assert described.get("error") == error
    item = state_of(stack, f"e2e/workflow-simulate-express/i-express-{outcome}")
    assert item is not None
    assert item.state is (PayloadState.SUCCEEDED if error is None else PayloadState.FAILED)
    machine = stack.client("stepfunctions").describe_state_machine(
        stateMachineArn=stack.outputs["StateMachines"]["simulate-express"]
    )
    assert machine["type"] == "EXPRESS"
    # AND it ran under an Express ARN (never described), and a success's output travelled
    # by pointer: written to the bucket, named by the report, read back by update-state
    assert item.execution_arn is not None
    assert ":express:" in item.execution_arn
    stored = stack.client("s3").list_objects_v2(
        Bucket=stack.outputs["PayloadBucketName"], Prefix="express-outputs/"
    )
    names = [entry["Key"] for entry in stored.get("Contents", [])]
    if error is None:
        assert item.result_json is not None
        assert any(
            name.startswith(f"express-outputs/{item.execution_arn.split(':')[7]}/")
            for name in names
        )
