"""Resolving resources: stack outputs, the naming rule, local endpoints."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import boto3
import pytest

from dependency_tracker_cli.target import (
    LOCAL_REGION,
    ConnectionOptions,
    ResourceNames,
    Target,
    WorkflowNotDeployedError,
    is_loopback,
    stack_outputs,
)
from tests.unit.template_contract.cfn import Stack, load_template

if TYPE_CHECKING:
    from tests.conftest import Aws


def test_names_follow_the_prefix_without_outputs() -> None:
    names = ResourceNames.from_outputs({}, prefix="abc")
    assert names == ResourceNames(
        prefix="abc",
        state_table="abc-state",
        dependency_table="abc-dependencies",
        process_queue_name="abc-process",
        process_dlq_name="abc-process-dlq",
    )


def test_outputs_win_over_the_prefix() -> None:
    outputs = {
        "Prefix": "stk",
        "ProcessQueueUrl": "https://sqs/1/q",
        "ProcessDlqUrl": "https://sqs/1/dlq",
        "StateTableName": "custom-state",
        "DependencyTableName": "custom-deps",
        "PayloadBucketName": "bucket",
    }
    names = ResourceNames.from_outputs(outputs, prefix="ignored")
    assert names.prefix == "stk"
    assert names.state_table == "custom-state"
    assert names.dependency_table == "custom-deps"
    assert names.process_queue_url == "https://sqs/1/q"
    assert names.process_dlq_url == "https://sqs/1/dlq"
    assert names.payload_bucket == "bucket"
    assert names.process_queue_name == "stk-process"


def test_the_prefix_rule_finds_what_the_template_deploys() -> None:
    # GIVEN the template deployed with a prefix, and its outputs resolved
    stack = Stack(load_template(), {"Prefix": "stk"})
    outputs = {
        key: stack.resolve(output["Value"])
        for key, output in stack.template["Outputs"].items()
        if "Condition" not in output
    }
    # WHEN names are read from the outputs, and from the prefix alone
    from_stack = ResourceNames.from_outputs(outputs, prefix="ignored")
    from_prefix = ResourceNames.from_outputs({}, prefix="stk")
    # THEN both name the same tables and queues
    assert from_stack.prefix == from_prefix.prefix == "stk"
    assert from_stack.state_table == from_prefix.state_table
    assert from_stack.dependency_table == from_prefix.dependency_table
    assert from_stack.process_queue_url is not None
    assert from_stack.process_queue_url.endswith(f"/{from_prefix.process_queue_name}")
    assert from_stack.process_dlq_url is not None
    assert from_stack.process_dlq_url.endswith(f"/{from_prefix.process_dlq_name}")
    assert from_stack.payload_bucket


def test_stack_outputs_come_from_describe_stacks(aws: Aws) -> None:
    # GIVEN a stack (moto's CloudFormation) with outputs like the template's
    template = {
        "Parameters": {"Prefix": {"Type": "String"}},
        "Resources": {
            "ProcessQueue": {
                "Type": "AWS::SQS::Queue",
                "Properties": {"QueueName": {"Fn::Sub": "${Prefix}-process"}},
            }
        },
        "Outputs": {
            "Prefix": {"Value": {"Ref": "Prefix"}},
            "ProcessQueueUrl": {"Value": {"Ref": "ProcessQueue"}},
            "StateTableName": {"Value": {"Fn::Sub": "${Prefix}-state"}},
        },
    }
    cloudformation = boto3.client("cloudformation")
    cloudformation.create_stack(
        StackName="tracker",
        TemplateBody=json.dumps(template),
        Parameters=[{"ParameterKey": "Prefix", "ParameterValue": "stk"}],
    )
    # WHEN a target is resolved from the stack name
    target = Target(ConnectionOptions(stack_name="tracker"))
    # THEN names come from the outputs, the rest from the stack's prefix
    assert stack_outputs(cloudformation, "tracker")["Prefix"] == "stk"
    assert target.names.state_table == "stk-state"
    assert target.names.dependency_table == "stk-dependencies"
    assert target.process_queue_url.endswith("/stk-process")
    assert target.prefix == "stk"


@pytest.mark.parametrize(
    ("url", "local"),
    [
        ("http://127.0.0.1:4566", True),
        ("http://localhost:5000", True),
        ("http://[::1]:4566", True),
        ("https://sqs.us-east-1.amazonaws.com", False),
        ("http://10.0.0.1:4566", False),
        (None, False),
    ],
)
def test_is_loopback(url: str | None, local: bool) -> None:
    assert is_loopback(url) is local


def test_a_local_endpoint_needs_no_aws_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION", "AWS_REGION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    session = Target(ConnectionOptions(endpoint_url="http://127.0.0.1:1")).session
    assert session.region_name == LOCAL_REGION
    credentials = session.get_credentials()
    assert credentials is not None
    assert credentials.access_key == "testing"
    remote = Target(ConnectionOptions(endpoint_url="https://example.com")).session
    assert remote.region_name is None
    assert remote.get_credentials() is None


@pytest.mark.parametrize(
    ("cirrus_prefix", "cirrus_table", "expected"),
    [
        (None, None, "abc-"),  # normal mode: the tracker's own machines
        ("cirrus", None, "cirrus-"),  # --cirrus-prefix
        (None, "geo-state", "geo-"),  # a table named as cirrus names it
        ("cirrus", "geo-state", "cirrus-"),  # the prefix wins, as for the table
        (None, "my-payload-table", None),  # cirrus mode, naming unknown
        (None, "-state", None),
    ],
)
def test_workflows_are_named_as_their_runner_names_them(
    cirrus_prefix: str | None, cirrus_table: str | None, expected: str | None
) -> None:
    target = Target(ConnectionOptions(prefix="abc"))
    target.names = ResourceNames.from_outputs({}, prefix="abc")  # no DescribeStacks
    target.use_cirrus(prefix=cirrus_prefix, state_table=cirrus_table)
    assert target.workflow_prefix == expected


def test_an_unknown_cirrus_naming_checks_nothing(aws: Aws) -> None:
    # GIVEN cirrus mode with a state table not named {prefix}-state, and no state machine
    target = Target(ConnectionOptions(prefix="abc"))
    target.use_cirrus(prefix=None, state_table="my-payload-table")
    # WHEN a workflow is checked THEN nothing is refused (the naming cannot be told)
    target.require_workflows(["anything"])
    # AND with cirrus's prefix given, the same workflow is refused with cirrus's machine name
    target.use_cirrus(prefix="geo", state_table=None)
    with pytest.raises(WorkflowNotDeployedError, match="geo-anything"):
        target.require_workflows(["anything"])
