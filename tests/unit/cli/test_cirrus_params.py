"""``cirrus-params NAME``: a cirrus deployment's SSM parameters become the template's cirrus mode.

The deployments are written to moto's SSM as cirrus's FilmDrop Terraform writes them
(``modules/cirrus/param_store.tf``): a pointer ``/cirrus/deployments/{name}`` holding
``{"type": "parameter_store", "value": "/deployment/{name}/"}``, and one parameter per
variable under that path, ``CIRRUS_PREFIX`` being the ResourcePrefix and a hyphen.
"""

from __future__ import annotations

import json
import re
import shlex
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from moto import mock_aws
from typer.testing import CliRunner

from dependency_tracker_cli import cirrus_deployment
from dependency_tracker_cli.__main__ import app
from tests.unit.template_contract.cfn import Stack
from tests.unit.template_contract.rules import refusals

if TYPE_CHECKING:
    from collections.abc import Iterator

    from mypy_boto3_ssm import SSMClient

REGION = "us-west-2"
ACCOUNT = "123456789012"
NAME = "fd-lion-dev"
RESOURCE_PREFIX = "fd-lion-dev-cirrus"


def filmdrop_variables(resource_prefix: str = RESOURCE_PREFIX) -> dict[str, str]:
    """What FilmDrop's param_store.tf writes under /deployment/{name}/ (names as it gives them)."""
    return {
        "CIRRUS_PAYLOAD_BUCKET": f"{resource_prefix}-payloads-abc123",
        "CIRRUS_PAYLOAD_ROOT_PREFIX": "cirrus",
        "CIRRUS_DATA_BUCKET": f"{resource_prefix}-data-abc123",
        "CIRRUS_PUBLISH_TOPIC_ARN": f"arn:aws:sns:{REGION}:{ACCOUNT}:{resource_prefix}-publish",
        "CIRRUS_PROCESS_QUEUE_URL": (
            f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/{resource_prefix}-process"
        ),
        "CIRRUS_WORKFLOW_EVENT_TOPIC_ARN": (
            f"arn:aws:sns:{REGION}:{ACCOUNT}:{resource_prefix}-workflow-event"
        ),
        "CIRRUS_LOG_LEVEL": "INFO",
        "CIRRUS_STATE_DB": f"{resource_prefix}-state",
        "CIRRUS_BASE_WORKFLOW_ARN": (
            f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:{resource_prefix}-"
        ),
        "CIRRUS_PREFIX": f"{resource_prefix}-",
    }


@pytest.fixture
def ssm() -> Iterator[SSMClient]:
    with mock_aws():
        yield boto3.client("ssm", region_name=REGION)


def put_deployment(
    ssm: SSMClient,
    name: str = NAME,
    variables: dict[str, str] | None = None,
    pointer: str | None = None,
) -> None:
    path = f"/deployment/{name}/"
    value = pointer or json.dumps({"type": "parameter_store", "value": path})
    ssm.put_parameter(Name=f"/cirrus/deployments/{name}", Value=value, Type="String")
    for key, text in (filmdrop_variables() if variables is None else variables).items():
        ssm.put_parameter(Name=f"{path}{key}", Value=text, Type="String")


def run(*args: str) -> Any:
    return CliRunner().invoke(app, ["cirrus-params", *args, "--region", REGION])


def test_the_overrides_deploy_cirrus_mode_with_the_deployment_s_names(
    ssm: SSMClient, template: dict[str, Any]
) -> None:
    # GIVEN a FilmDrop deployment's parameters in SSM (and another deployment beside it)
    put_deployment(ssm)
    put_deployment(ssm, "other", filmdrop_variables("other-cirrus"))
    # WHEN cirrus-params reads it
    result = run(NAME, "--json")
    # THEN it names each of the template's cirrus resources as the deployment does
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    variables = filmdrop_variables()
    assert printed["parameters"] == {
        "CirrusPrefix": RESOURCE_PREFIX,
        "CirrusStateTableName": variables["CIRRUS_STATE_DB"],
        "CirrusProcessQueueArn": f"arn:aws:sqs:{REGION}:{ACCOUNT}:{RESOURCE_PREFIX}-process",
        "CirrusWorkflowEventTopicArn": variables["CIRRUS_WORKFLOW_EVENT_TOPIC_ARN"],
        "CirrusPayloadBucketName": variables["CIRRUS_PAYLOAD_BUCKET"],
        "CirrusPayloadRootPrefix": "cirrus",
    }
    # AND the template deploys in cirrus mode with them: every value within its parameter's
    # pattern, no Rule refusing them, and the stack's cirrus names are the deployment's
    stack = Stack(template, printed["parameters"])
    assert stack.condition("CirrusMode")
    assert refusals(template, printed["parameters"]) == []
    outputs = {key: stack.resolve(o["Value"]) for key, o in template["Outputs"].items()}
    assert outputs["CirrusStateTable"] == variables["CIRRUS_STATE_DB"]
    assert outputs["CirrusProcessQueueUrl"] == variables["CIRRUS_PROCESS_QUEUE_URL"]
    # AND the command printed is those overrides, shell-quoted
    words = shlex.split(printed["command"])
    assert words[:3] == ["sam", "deploy", "--parameter-overrides"]
    assert dict(word.split("=", 1) for word in words[3:]) == printed["parameters"]
    assert printed["command"] == f"sam deploy --parameter-overrides {printed['overrides']}"
    # AND without --json it prints the same command, one override a line
    plain = run(NAME)
    assert plain.exit_code == 0, plain.output
    assert shlex.split(plain.stdout.replace("\\\n", " ")) == words


def test_a_queue_arn_written_beside_the_url_is_taken_as_is(ssm: SSMClient) -> None:
    # GIVEN FilmDrop's CIRRUS_PROCESS_QUEUE_ARN (cirrus-geo's own stack writes only the URL)
    arn = f"arn:aws-us-gov:sqs:us-gov-west-1:{ACCOUNT}:{RESOURCE_PREFIX}-process"
    put_deployment(ssm, variables={**filmdrop_variables(), "CIRRUS_PROCESS_QUEUE_ARN": arn})
    # THEN it is the queue's ARN (its partition kept)
    result = run(NAME, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["parameters"]["CirrusProcessQueueArn"] == arn


@pytest.mark.parametrize(
    ("url", "arn"),
    [
        (
            f"https://sqs.cn-north-1.amazonaws.com.cn/{ACCOUNT}/q",
            f"arn:aws-cn:sqs:cn-north-1:{ACCOUNT}:q",
        ),
        (
            f"https://eu-west-1.queue.amazonaws.com/{ACCOUNT}/q",
            f"arn:aws:sqs:eu-west-1:{ACCOUNT}:q",
        ),
        (f"http://127.0.0.1:4600/{ACCOUNT}/q", f"arn:aws:sqs:{REGION}:{ACCOUNT}:q"),
    ],
)
def test_a_queue_url_becomes_its_arn(url: str, arn: str) -> None:
    variables = {**filmdrop_variables(), "CIRRUS_PROCESS_QUEUE_URL": url}
    parameters = cirrus_deployment.template_parameters(
        NAME, variables, region=REGION, prefix="deptrack"
    )
    assert parameters["CirrusProcessQueueArn"] == arn


def test_an_unknown_deployment_exits_5_naming_those_there(ssm: SSMClient) -> None:
    put_deployment(ssm, "other", filmdrop_variables("other-cirrus"))
    result = run(NAME)
    assert result.exit_code == 5
    assert result.stderr.startswith(f"error: no cirrus deployment '{NAME}'")
    assert f"/cirrus/deployments/{NAME} not found" in result.stderr
    assert "deployments here: other" in result.stderr


@pytest.mark.parametrize(
    ("pointer", "why"),
    [
        ('{"type": "other_store", "value": "x"}', "is not a parameter_store pointer"),
        ("not json", "is not a parameter_store pointer"),
    ],
)
def test_a_pointer_of_another_type_exits_2(ssm: SSMClient, pointer: str, why: str) -> None:
    put_deployment(ssm, pointer=pointer)
    result = run(NAME)
    assert result.exit_code == 2
    assert why in result.stderr


def test_a_missing_name_exits_2_naming_it(ssm: SSMClient) -> None:
    variables = filmdrop_variables()
    del variables["CIRRUS_STATE_DB"], variables["CIRRUS_WORKFLOW_EVENT_TOPIC_ARN"]
    put_deployment(ssm, variables=variables)
    result = run(NAME)
    assert result.exit_code == 2
    assert "missing CIRRUS_STATE_DB, CIRRUS_WORKFLOW_EVENT_TOPIC_ARN" in result.stderr


@pytest.mark.parametrize(
    "resource_prefix",
    [
        # FilmDrop before March 2025: "fd-{project}-{environment}-cirrus", up to 63 characters
        "fd-myproject-production-cirrus",
        # FilmDrop's resource_prefix today: 2 to 22 lowercase characters, a digit first allowed
        "42geo-lion-prod-cirrus",
    ],
)
def test_every_prefix_filmdrop_makes_is_taken(
    ssm: SSMClient, template: dict[str, Any], resource_prefix: str
) -> None:
    # GIVEN a FilmDrop deployment whose ResourcePrefix cirrus-geo's own CloudFormation would
    # refuse (over 22 characters, or a digit first)
    put_deployment(ssm, variables=filmdrop_variables(resource_prefix))
    # WHEN cirrus-params reads it
    result = run(NAME, "--json")
    # THEN it prints the overrides, which the template takes
    assert result.exit_code == 0, result.output
    parameters = json.loads(result.stdout)["parameters"]
    assert parameters["CirrusPrefix"] == resource_prefix
    assert refusals(template, parameters) == []
    assert Stack(template, parameters).condition("CirrusMode")


@pytest.mark.parametrize(
    ("resource_prefix", "length"),
    [("fd-" + "x" * 54 + "-cirrus", 64), ("fd_lion_dev_cirrus", 18)],
)
def test_a_prefix_the_template_refuses_exits_2_saying_why(
    ssm: SSMClient, resource_prefix: str, length: int
) -> None:
    # GIVEN a ResourcePrefix no FilmDrop makes: over 63 characters, or with "_"
    put_deployment(ssm, variables=filmdrop_variables(resource_prefix))
    # THEN the command says so, with the rule, and prints no command
    result = run(NAME)
    assert result.exit_code == 2
    assert result.stdout == ""
    message = " ".join(result.stderr.split())
    assert f"CirrusPrefix '{resource_prefix}' ({length} characters)" in message
    assert "refused by template.yaml: 2 to 63 letters, digits and hyphens" in message


def test_a_cirrus_prefix_equal_to_the_tracker_s_exits_2(ssm: SSMClient) -> None:
    put_deployment(ssm)
    result = run(NAME, "--prefix", RESOURCE_PREFIX)
    assert result.exit_code == 2
    assert "overlaps the tracker's Prefix" in " ".join(result.stderr.split())


def test_the_patterns_are_the_template_s(template: dict[str, Any]) -> None:
    # GIVEN the patterns the command checks (the CLI ships without template.yaml)
    for key, pattern in cirrus_deployment.PATTERNS.items():
        # THEN each is the template's AllowedPattern for that parameter
        assert template["Parameters"][key]["AllowedPattern"] == pattern, key
        re.compile(pattern)


@pytest.mark.parametrize("root", ["cirrus/", "/cirrus", "cirrus payloads", "cirrus/*"])
def test_a_payload_root_filmdrop_takes_but_the_template_refuses_exits_2(
    ssm: SSMClient, root: str
) -> None:
    # GIVEN FilmDrop's payload_root_prefix, free text, set to a root the template refuses
    put_deployment(ssm, variables={**filmdrop_variables(), "CIRRUS_PAYLOAD_ROOT_PREFIX": root})
    # THEN the command says which value and why, and prints no command
    result = run(NAME)
    assert result.exit_code == 2
    assert result.stdout == ""
    message = " ".join(result.stderr.split())
    assert f"CirrusPayloadRootPrefix '{root}'" in message
    assert 'refused by template.yaml: a key prefix of letters, digits, ".", "_" and "-"' in message
