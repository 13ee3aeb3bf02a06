"""The embedded stack's queues, tables and bucket are the ones ``template.yaml`` declares.

The stack reads them through :mod:`dependency_tracker_local.template`; these tests start it on
the real template and on a copy whose names, attributes and redrive wiring differ, so a name
or an attribute written into ``stack.py`` again fails one of them.
"""

from __future__ import annotations

import copy
import io
import json
from typing import TYPE_CHECKING, Any

import pytest
import yaml  # type: ignore[import-untyped]  # PyYAML comes with moto; no stubs here

from dependency_tracker_local import template as template_reader
from dependency_tracker_local.stack import ACCOUNT, EmbeddedStack
from tests.conftest import REGION

if TYPE_CHECKING:
    from pathlib import Path

PREFIX = "deptrack"
# The stack's overrides of the template's values (its defaults).
VISIBILITY_TIMEOUT = "2"
MAX_RECEIVE_COUNT = 3
SQS_DEFAULT_VISIBILITY_TIMEOUT = "30"


def described(template: dict[str, Any], **parameters: str) -> template_reader.Resources:
    deployed = template_reader.Deployed(
        template, {"Prefix": PREFIX, **parameters}, account=ACCOUNT, region=REGION
    )
    return template_reader.describe(deployed)


def variant(template: dict[str, Any]) -> dict[str, Any]:
    """The template with other names, attributes and DLQs for the stack's queues."""
    changed = copy.deepcopy(template)
    resources = changed["Resources"]
    for resource in resources.values():
        properties = resource.get("Properties", {})
        for key, renamed in (
            ("QueueName", "${Prefix}-q-"),
            ("TableName", "${Prefix}-t-"),
            ("BucketName", "${Prefix}-objects-"),
        ):
            if resource["Type"] in ("AWS::SQS::Queue", "AWS::DynamoDB::Table", "AWS::S3::Bucket"):
                name = properties.get(key)
                if isinstance(name, dict) and "Fn::Sub" in name:
                    name["Fn::Sub"] = name["Fn::Sub"].replace("${Prefix}-", renamed, 1)
        if "MessageRetentionPeriod" in properties:
            properties["MessageRetentionPeriod"] -= 60
        if "MaximumMessageSize" in properties:
            properties["MaximumMessageSize"] = 200_000
    # The join queue's failed chunks to the status-report DLQ instead of the process DLQ.
    join_redrive = resources["JoinQueue"]["Properties"]["RedrivePolicy"]
    join_redrive["deadLetterTargetArn"] = {"Fn::GetAtt": ["StatusReportDlq", "Arn"]}
    return changed


def created(stack: EmbeddedStack) -> dict[str, Any]:
    """Queue name -> attributes, table names and bucket names of the running stack."""
    sqs = stack.client("sqs")
    queues = {
        url.rsplit("/", 1)[1]: sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])[
            "Attributes"
        ]
        for url in sqs.list_queues().get("QueueUrls", [])
    }
    tables = set(stack.client("dynamodb").list_tables()["TableNames"])
    buckets = {bucket["Name"] for bucket in stack.client("s3").list_buckets()["Buckets"]}
    return {"queues": queues, "tables": tables, "buckets": buckets}


def assert_stack_follows(found: dict[str, Any], expected: template_reader.Resources) -> None:
    queues = found["queues"]
    assert set(queues) == {queue.name for queue in expected.queues.values()}
    arns = {name: attributes["QueueArn"] for name, attributes in queues.items()}
    for queue in expected.queues.values():
        attributes = queues[queue.name]
        for key in ("MaximumMessageSize", "MessageRetentionPeriod"):
            if key in queue.attributes:
                assert attributes[key] == queue.attributes[key], (queue.name, key)
        visibility = (
            VISIBILITY_TIMEOUT
            if "VisibilityTimeout" in queue.attributes
            else SQS_DEFAULT_VISIBILITY_TIMEOUT
        )
        assert attributes["VisibilityTimeout"] == visibility, queue.name
        if queue.redrive is None:
            assert "RedrivePolicy" not in attributes, queue.name
        else:
            redrive = json.loads(attributes["RedrivePolicy"])
            target = expected.queues[queue.redrive.target].name
            assert redrive["deadLetterTargetArn"] == arns[target], queue.name
            assert int(redrive["maxReceiveCount"]) == MAX_RECEIVE_COUNT, queue.name
    assert found["tables"] == set(expected.tables.values())
    assert found["buckets"] == set(expected.buckets.values())


def start(stack: EmbeddedStack) -> tuple[dict[str, Any], dict[str, str]]:
    with stack:
        pumps = {name: getattr(pump, "queue_url", "") for name, pump in stack.pumps.items()}
        return created(stack), pumps


def test_the_stack_creates_the_templates_queues_tables_and_bucket() -> None:
    expected = described(template_reader.load_template())

    found, pumps = start(EmbeddedStack(PREFIX, sink=io.StringIO(), sweeper_interval=None))

    assert_stack_follows(found, expected)
    # AND each SQS pump reads the queue its function's trigger reads in the template
    for pump, trigger in (
        ("sqs", ("process", "ProcessQueue")),
        ("joins", ("process", "JoinQueue")),
        ("reports", ("update-state", "StatusReports")),
    ):
        assert pumps[pump].endswith("/" + expected.queues[expected.triggers[trigger]].name)


def test_the_stack_follows_a_template_with_other_names_and_wiring(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a template whose queues, tables and bucket have other names and attributes,
    # and whose join queue redrives to another DLQ
    template = variant(template_reader.load_template())
    path = tmp_path / "template.yaml"
    path.write_text(yaml.safe_dump(template, sort_keys=False), encoding="utf-8")
    expected = described(template_reader.load_template(path))
    assert expected != described(template_reader.load_template())
    monkeypatch.setattr(template_reader, "TEMPLATE_PATH", path)

    # WHEN the stack starts on it
    found, pumps = start(EmbeddedStack(PREFIX, sink=io.StringIO(), sweeper_interval=None))

    # THEN it creates what that template declares, and its pumps read those queues
    assert_stack_follows(found, expected)
    assert pumps["joins"].endswith(f"/{PREFIX}-q-join-chunks")


@pytest.mark.parametrize("prefix", ["deptrack", "other1"])
@pytest.mark.parametrize("cirrus", [False, True])
def test_the_built_in_resources_are_the_templates(prefix: str, cirrus: bool) -> None:
    # The fallback for a package without template.yaml must not drift from the template.
    parameters = {"Prefix": prefix, **({"CirrusPrefix": "cirrus"} if cirrus else {})}
    deployed = template_reader.Deployed(
        template_reader.load_template(), parameters, account=ACCOUNT, region=REGION
    )

    assert template_reader.builtin_resources(
        prefix, cirrus=cirrus, account=ACCOUNT, region=REGION
    ) == template_reader.describe(deployed)


def test_outside_a_checkout_the_stack_uses_the_built_in_resources(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(template_reader, "TEMPLATE_PATH", tmp_path / "absent.yaml")

    found, _ = start(EmbeddedStack(PREFIX, sink=io.StringIO(), sweeper_interval=None))

    assert_stack_follows(found, template_reader.builtin_resources(PREFIX, region=REGION))
