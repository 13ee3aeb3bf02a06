"""Event sources against the patterns and filters local mode applies."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from dependency_tracker.core import settings
from dependency_tracker_local.filters import (
    CALLBACK_STREAM_FILTER,
    matches,
    update_state_event_pattern,
)
from tests.conftest import load_event
from tests.unit.template_contract.cfn import ACCOUNT, Stack
from tests.unit.template_contract.functions import environment, event_properties, stream_filter
from tests.unit.template_contract.parameters import OTHER_STACK

if TYPE_CHECKING:
    from collections.abc import Callable


def test_update_state_rule_is_the_code_pattern(template: dict[str, Any]) -> None:
    stack = Stack(template, OTHER_STACK, region="eu-west-1")
    rule = event_properties(stack, "UpdateStateFunction", "EventBridgeRule")
    prefix = environment(stack, "UpdateStateFunction")[settings.ENV_WORKFLOW_ARN_PREFIX]
    assert rule["Pattern"] == update_state_event_pattern(prefix)
    assert prefix == f"arn:aws:states:eu-west-1:{ACCOUNT}:stateMachine:pipeline-"
    # a terminal status change of a managed machine matches; others do not
    event = load_event("eventbridge_status_change.json")
    event["detail"]["stateMachineArn"] = f"{prefix}pass"
    assert matches(rule["Pattern"], event)
    event["detail"]["status"] = "RUNNING"
    assert not matches(rule["Pattern"], event)
    # failures end in the DLQ, whether delivery or the function failed
    dlq = stack.arn_of("UpdateStateDlq")
    assert rule["DeadLetterConfig"] == {"Arn": dlq}
    assert 0 < rule["RetryPolicy"]["MaximumRetryAttempts"] <= 185
    invoke = stack.resolved_properties("UpdateStateFunction")["EventInvokeConfig"]
    assert invoke["DestinationConfig"]["OnFailure"] == {"Type": "SQS", "Destination": dlq}
    statements = stack.resolved_properties("UpdateStateDlqPolicy")["PolicyDocument"]["Statement"]
    (allow,) = [s for s in statements if s["Effect"] == "Allow"]  # beside the TLS-only deny
    rule_arn = f"arn:aws:events:eu-west-1:{ACCOUNT}:rule/{rule['RuleName']}"
    assert allow["Condition"] == {"ArnEquals": {"aws:SourceArn": rule_arn}}


def test_callback_stream_mapping(stack: Stack) -> None:
    mapping = event_properties(stack, "CallbackFunction", "DynamoDB")
    assert stream_filter(stack) == CALLBACK_STREAM_FILTER
    assert mapping["Stream"] == stack.physical("DependencyTable").attributes["StreamArn"]
    assert mapping["BisectBatchOnFunctionError"] is True
    assert 0 <= mapping["MaximumRetryAttempts"] <= 100, "bounded retries"
    assert mapping["DestinationConfig"]["OnFailure"] == {
        "Type": "SQS",
        "Destination": stack.arn_of("CallbackFailureQueue"),
    }


def stream_record(change: Callable[[dict[str, Any]], object] | None = None) -> dict[str, Any]:
    record: dict[str, Any] = load_event("ddb_stream_waiter.json")["Records"][0]
    if change is not None:
        change(record)
    return record


def terminal_record(state: str) -> dict[str, Any]:
    record = stream_record()
    record["dynamodb"]["NewImage"]["workflow_state"] = {"S": state}
    return record


@pytest.mark.parametrize(
    ("record", "passes"),
    [
        *[
            pytest.param(terminal_record(state), True, id=f"modify-{state}")
            for state in ("SUCCEEDED", "FAILED", "INVALID", "ABORTED")
        ],
        pytest.param(stream_record(lambda r: r.update(eventName="INSERT")), True, id="insert"),
        pytest.param(
            stream_record(
                lambda r: r["dynamodb"]["NewImage"].update(workflow_state={"S": "PROCESSING"})
            ),
            False,
            id="processing",
        ),
        pytest.param(
            stream_record(
                lambda r: r["dynamodb"]["NewImage"].update(notified_at={"S": "2026-11-01"})
            ),
            False,
            id="notified",
        ),
        pytest.param(
            stream_record(lambda r: (r.update(eventName="REMOVE"), r["dynamodb"].pop("NewImage"))),
            False,
            id="ttl-remove",
        ),
    ],
)
def test_stream_filter_passes_only_terminal_unnotified_rows(
    stack: Stack, record: dict[str, Any], *, passes: bool
) -> None:
    assert matches(stream_filter(stack), record) is passes
