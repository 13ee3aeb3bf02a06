"""The parent state machines at Step Functions' limits, through the embedded stack.

The Map parent's state is largest either before the Map (its input with the
defaults filled in: reached here with two large inline dependencies) or as the
Map's output (one summary per dependency: reached in ``make chaos``,
``tests/chaos/test_map_scale.py``, with ~130 ids of 2,000 characters, and run
there with 1,000 cirrus-length ids). Past 1,500 dependencies it refuses at once.
A join that times out before the tracker registered it still ends in
``DependencyTimedOut``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest

from dependency_tracker.core.limits import SFN_MAX_PAYLOAD_BYTES
from tests.conftest import wait_until
from tests.e2e.conftest import dependency, dependency_id, finished, state_of
from tests.e2e.parent_limits import (
    MAX_DEPENDENCIES,
    compact_size,
    moto_size,
    run_parent,
    state_before_map,
)

if TYPE_CHECKING:
    from dependency_tracker_local import LocalStack

pytestmark = pytest.mark.e2e

TIMEOUT = 300


def padded(item: str, pad: int) -> dict[str, Any]:
    """An inline ``simulate`` payload carrying ``pad`` bytes of properties."""
    body = dependency(item)
    body["features"][0]["properties"] = {"pad": "p" * pad}
    return body


def inline_pair(tag: str, state_bytes: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Two inline dependencies whose parent state before the Map is ``state_bytes`` (compact)."""

    def pair(pad: int) -> list[dict[str, Any]]:
        return [padded(f"{tag}-1", pad), padded(f"{tag}-2", pad)]

    base = compact_size(state_before_map(pair(0), timeout_seconds=TIMEOUT))
    first = (state_bytes - base) // 2
    dependencies = pair(first)
    dependencies[1] = padded(f"{tag}-2", state_bytes - base - first)
    state = state_before_map(dependencies, timeout_seconds=TIMEOUT)
    assert compact_size(state) == state_bytes
    return dependencies, state


def test_inline_input_just_under_the_state_limit_runs(stack: LocalStack) -> None:
    # GIVEN two inline dependencies that make the parent's state (its input with the
    # defaults filled in) just under 256 KiB, however the spaces are counted
    dependencies, state = inline_pair("inline-under", SFN_MAX_PAYLOAD_BYTES - 200)
    assert moto_size(state) < SFN_MAX_PAYLOAD_BYTES
    # WHEN the parent runs THEN both are sent, run and reported
    run = run_parent(stack, "inline-under", dependencies)
    assert run.described["status"] == "SUCCEEDED", run.described.get("error")
    assert [d["payload_id"] for d in run.output["dependencies"]] == [
        dependency_id("inline-under-1"),
        dependency_id("inline-under-2"),
    ]
    assert run.peak_state_bytes == compact_size(state)


def test_inline_input_that_outgrows_the_state_limit_fails_at_once(stack: LocalStack) -> None:
    # GIVEN an input Step Functions accepts (within 256 KiB), but which the defaults
    # push over the state limit, counted either way
    dependencies, state = inline_pair("inline-over", SFN_MAX_PAYLOAD_BYTES + 10)
    body = {"dependencies": dependencies, "timeout_seconds": TIMEOUT}
    assert compact_size(body) < SFN_MAX_PAYLOAD_BYTES <= compact_size(state)
    # WHEN the parent starts THEN it fails before sending anything, with Step Functions'
    # own error name (a Pass state cannot catch it; docs/patterns.md)
    run = run_parent(stack, "inline-over", dependencies)
    assert (run.described["status"], run.described["error"]) == (
        "FAILED",
        "States.DataLimitExceeded",
    )
    assert run.count("MapStateEntered") == run.count("TaskScheduled") == 0
    assert state_of(stack, dependency_id("inline-over-1")) is None


def test_map_parent_past_its_limit_is_refused_at_once(stack: LocalStack) -> None:
    # GIVEN more dependencies than the Map pattern takes (the objects need not exist)
    bucket = stack.outputs["PayloadBucketName"]
    references = [
        {"url": f"s3://{bucket}/never/{index}.json"} for index in range(MAX_DEPENDENCIES + 1)
    ]
    run = run_parent(stack, "too-many", references)
    # THEN it fails with InvalidJoin before publishing anything
    assert (run.described["status"], run.described["error"]) == ("FAILED", "InvalidJoin")
    assert "at most 1,500 dependencies" in run.described["cause"]
    assert run.count("MapStateEntered") == run.count("TaskScheduled") == 0
    assert len(run.events) < 20


def test_join_timeout_before_the_join_is_registered(stack: LocalStack) -> None:
    # GIVEN a join whose only member points at an object that does not exist yet, so
    # the tracker retries the message and never registers the join's row
    sqs = stack.client("sqs")
    bucket = stack.outputs["PayloadBucketName"]
    missing = {"url": f"s3://{bucket}/not-yet/member.json"}
    sfn = stack.client("stepfunctions")
    arn = sfn.start_execution(
        stateMachineArn=stack.outputs["StateMachines"]["wait-for-join"],
        name="join-no-row",
        input=json.dumps({"dependencies": [missing], "timeout_seconds": 1}),
    )["executionArn"]
    # WHEN its callback timeout expires
    described = finished(stack, arn)
    # THEN it fails with DependencyTimedOut, whose cause says nobody was registered
    assert (described["status"], described["error"]) == ("FAILED", "DependencyTimedOut")
    assert "no member had been registered" in described["cause"]
    events = sfn.get_execution_history(executionArn=arn, maxResults=1000)["events"]
    entered = [
        e["stateEnteredEventDetails"]["name"] for e in events if "stateEnteredEventDetails" in e
    ]
    assert entered[-4:] == ["ReadSummary", "RowExists", "NoMemberRegistered", "DependencyTimedOut"]
    # AND the message that could not be read ends in the process DLQ, not lost
    dlq = stack.outputs["ProcessDlqUrl"]

    def dead_lettered() -> list[dict[str, str]]:
        messages: list[dict[str, str]] = sqs.receive_message(
            QueueUrl=dlq, MaxNumberOfMessages=10, VisibilityTimeout=30
        ).get("Messages", [])
        return [m for m in messages if missing["url"] in m["Body"]]

    (message,) = wait_until(dead_lettered, timeout=60)
    sqs.delete_message(QueueUrl=dlq, ReceiptHandle=message["ReceiptHandle"])
