"""Alarms on every failure queue and function; outputs the public contract promises."""

from __future__ import annotations

import json
import re
import tomllib
from typing import Any

import pytest

from tests.unit.template_contract import rules as template_rules
from tests.unit.template_contract.cfn import ACCOUNT, REGION, ROOT, Stack
from tests.unit.template_contract.functions import FUNCTIONS, event_properties
from tests.unit.template_contract.step_functions import STATE_MACHINE

# What the public contract (docs/versioning.md) promises as outputs, plus one ARN per state machine.
CONTRACT_OUTPUTS = {
    "ProcessQueueUrl",
    "ProcessDlqUrl",
    "StateTableName",
    "DependencyTableName",
    "PayloadBucketName",
    "Prefix",
    "Region",
}


def test_alarms_watch_every_failure_queue_and_function(template: dict[str, Any]) -> None:
    stack = Stack(template)
    alarms = [stack.resolved_properties(a) for a in stack.of_type("AWS::CloudWatch::Alarm")]
    watched = {
        (alarm.get("MetricName"), dimension["Value"])
        for alarm in alarms
        for dimension in alarm.get("Dimensions", [])
        if alarm.get("Threshold") == 0 and alarm["ComparisonOperator"] == "GreaterThanThreshold"
    }
    failure_queues = {"ProcessDlq", "UpdateStateDlq", "CallbackFailureQueue"}
    for queue in failure_queues:
        queue_name = stack.physical(queue).attributes["QueueName"]
        assert ("ApproximateNumberOfMessagesVisible", queue_name) in watched, queue
    assert ("Errors", stack.physical("CallbackFunction").ref) in watched
    throttled = {
        dimension["Value"]
        for alarm in alarms
        for metric in alarm.get("Metrics", [])
        if metric.get("MetricStat", {}).get("Metric", {}).get("MetricName") == "Throttles"
        for dimension in metric["MetricStat"]["Metric"]["Dimensions"]
    }
    assert throttled == {stack.physical(f).ref for f in FUNCTIONS}
    # every queue a failure ends in is one of those
    ends = {
        json.dumps(stack.resolved_properties("ProcessQueue")["RedrivePolicy"]),
        json.dumps(event_properties(stack, "CallbackFunction", "DynamoDB")["DestinationConfig"]),
        json.dumps(stack.resolved_properties("UpdateStateFunction")["EventInvokeConfig"]),
    }
    for end in ends:
        assert any(stack.arn_of(q) in end for q in failure_queues), end


@pytest.mark.parametrize(
    ("parameters", "actions"),
    [
        pytest.param({}, None, id="none"),
        pytest.param({"AlarmEmail": "ops@example.com"}, ["alarm-topic"], id="e-mail"),
        pytest.param(
            {"AlarmTopicArn": f"arn:aws:sns:{REGION}:{ACCOUNT}:ops", "AlarmEmail": "a@b.io"},
            [f"arn:aws:sns:{REGION}:{ACCOUNT}:ops"],
            id="topic",
        ),
    ],
)
def test_alarm_actions_follow_the_parameters(
    template: dict[str, Any], parameters: dict[str, str], actions: list[str] | None
) -> None:
    stack = Stack(template, parameters)
    topic = stack.physical("AlarmTopic").ref
    expected = None if actions is None else [topic if a == "alarm-topic" else a for a in actions]
    assert stack.condition("CreateAlarmTopic") is (actions == ["alarm-topic"])
    for alarm in stack.of_type("AWS::CloudWatch::Alarm"):
        assert stack.resolved_properties(alarm).get("AlarmActions") == expected, alarm


def test_outputs_name_the_contract_resources(stack: Stack) -> None:
    outputs = {name: stack.resolve(o["Value"]) for name, o in stack.template["Outputs"].items()}
    assert set(outputs) >= CONTRACT_OUTPUTS
    assert outputs["ProcessQueueUrl"] == stack.physical("ProcessQueue").ref
    assert outputs["ProcessDlqUrl"] == stack.physical("ProcessDlq").ref
    assert outputs["StateTableName"] == stack.physical("StateTable").ref
    assert outputs["DependencyTableName"] == stack.physical("DependencyTable").ref
    assert outputs["PayloadBucketName"] == stack.physical("PayloadBucket").ref
    for logical_id in stack.of_type(STATE_MACHINE):
        assert outputs[f"{logical_id}Arn"] == stack.physical(logical_id).ref


def test_samconfig_deploys_this_template(stack: Stack) -> None:
    config = tomllib.loads((ROOT / "samconfig.toml").read_text())["default"]
    deploy = config["deploy"]["parameters"]
    assert "CAPABILITY_IAM" in deploy["capabilities"]
    assert deploy["resolve_s3"] is True
    overrides = dict(re.findall(r'(\w+)="([^"]*)"', deploy.get("parameter_overrides", "")))
    Stack(stack.template, overrides)  # raises for a name the template does not declare
    for name, value in overrides.items():
        allowed = stack.template["Parameters"][name].get("AllowedValues")
        assert allowed is None or value in map(str, allowed), name
    # and the Rules let the saved parameters deploy
    assert template_rules.refusals(stack.template, overrides) == []


@pytest.mark.parametrize("parameters", [{}, {"CirrusPrefix": "my-cirrus"}])
def test_a_recursive_loop_lambda_stops_is_alarmed_for_every_function(
    template: dict[str, Any], parameters: dict[str, str]
) -> None:
    # GIVEN the alarms' metric-math reads of Lambda's RecursiveInvocationsDropped
    stack = Stack(template, parameters)
    alarms = [
        stack.resolved_properties(alarm)
        for alarm in stack.of_type("AWS::CloudWatch::Alarm")
        if "Condition" not in stack.resources[alarm]
        or stack.condition(stack.resources[alarm]["Condition"])
    ]
    (alarm,) = [
        a
        for a in alarms
        if any(
            m.get("MetricStat", {}).get("Metric", {}).get("MetricName")
            == "RecursiveInvocationsDropped"
            for m in a.get("Metrics", [])
        )
    ]
    reads = {m["Id"]: m["MetricStat"]["Metric"] for m in alarm["Metrics"] if "MetricStat" in m}
    # THEN it reads every function the stack deploys, by its FunctionName (the metric Lambda
    # publishes per function), and sums exactly those
    functions = {
        stack.physical(f).ref
        for f in stack.of_type("AWS::Serverless::Function")
        if "Condition" not in stack.resources[f] or stack.condition(stack.resources[f]["Condition"])
    }
    assert {d["Value"] for metric in reads.values() for d in metric["Dimensions"]} == functions
    assert all(metric["Namespace"] == "AWS/Lambda" for metric in reads.values())
    (expression,) = [m["Expression"] for m in alarm["Metrics"] if m.get("ReturnData")]
    assert set(expression.replace(" ", "").split("+")) == set(reads)
    # AND it fires at the first stopped invocation
    assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (0, "GreaterThanThreshold")
    assert alarm["TreatMissingData"] == "notBreaching"


@pytest.mark.parametrize(
    ("parameters", "says"),
    [
        pytest.param({}, "NOBODY", id="none"),
        pytest.param({"AlarmEmail": "ops@example.com"}, "ops@example.com", id="e-mail"),
        pytest.param(
            {"AlarmTopicArn": f"arn:aws:sns:{REGION}:{ACCOUNT}:ops", "AlarmEmail": "a@b.io"},
            f"arn:aws:sns:{REGION}:{ACCOUNT}:ops",
            id="topic",
        ),
    ],
)
def test_an_output_says_where_the_alarms_go(
    template: dict[str, Any], parameters: dict[str, str], says: str
) -> None:
    # GIVEN a deployment with or without somewhere for the alarms to go
    stack = Stack(template, parameters)
    output = stack.template["Outputs"]["AlarmNotifications"]
    # THEN the output is always there (sam deploy prints it) and names where they go
    assert "Condition" not in output
    assert says in str(stack.resolve(output["Value"]))
