"""``cirrus-params`` beside a deployment FilmDrop's Terraform made deploys a valid stack.

The SSM parameters are written as FilmDrop's ``modules/cirrus/param_store.tf`` writes them,
every one of them, for two ResourcePrefixes cirrus-geo's own CloudFormation would refuse:

* FilmDrop before March 2025 built ``fd-{project_name}-{environment}-cirrus`` (cut at 63
  characters). Its payload bucket here is one passed in (``cirrus_payload_bucket``): the
  AWS provider takes a ``bucket_prefix`` of at most 37 characters (63 less its 26-character
  suffix), and ``{resource_prefix}-payload-`` is longer.
* FilmDrop's ``resource_prefix`` today is 2 to 22 lowercase characters and may start with a
  digit. Its payload bucket is the one Terraform made from ``{resource_prefix}-payload-``
  and a unique suffix (a timestamp and a counter).

The overrides printed are then held to ``template.yaml``: each value within its parameter's
``AllowedPattern`` and lengths, no ``Rules`` refusing them, cirrus mode on, and the SAM
transform of the template with those values as the parameters' defaults clean under
cfn-lint (which holds a default to its ``AllowedPattern``, E2015).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from moto import mock_aws
from typer.testing import CliRunner

from dependency_tracker_cli.__main__ import app
from tests.unit.template_contract.cfn import Stack
from tests.unit.template_contract.linting import lint
from tests.unit.template_contract.rules import refusals
from tests.unit.template_contract.transformed import transform

if TYPE_CHECKING:
    from pathlib import Path

REGION = "eu-central-1"
ACCOUNT = "210987654321"
# Terraform's unique suffix of a bucket_prefix: a timestamp, then a counter (26 characters).
SUFFIX = "20250312153540123400000001"


@dataclass(frozen=True)
class FilmDrop:
    """One FilmDrop cirrus deployment: its module's inputs that name things."""

    project_name: str
    environment: str
    resource_prefix: str
    payload_bucket: str
    payload_root_prefix: str

    @property
    def name(self) -> str:
        return f"{self.project_name}-{self.environment}"

    def parameters(self) -> dict[str, str]:
        """``param_store.tf``'s parameters under ``/deployment/{name}/``, optional ones too."""
        p, arn = self.resource_prefix, f"{REGION}:{ACCOUNT}"
        return {
            "CIRRUS_EVENT_DB_AND_TABLE": f"{p}-state-events|{p}-state-events-table",
            "CIRRUS_PAYLOAD_BUCKET": self.payload_bucket,
            "CIRRUS_PAYLOAD_ROOT_PREFIX": self.payload_root_prefix,
            "CIRRUS_DATA_BUCKET": f"{p}-data-{SUFFIX}",
            "CIRRUS_PUBLISH_TOPIC_ARN": f"arn:aws:sns:{arn}:{p}-publish",
            "CIRRUS_PROCESS_QUEUE_URL": f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/{p}-process",
            "CIRRUS_PROCESS_QUEUE_ARN": f"arn:aws:sqs:{arn}:{p}-process",
            "CIRRUS_WORKFLOW_EVENT_TOPIC_ARN": f"arn:aws:sns:{arn}:{p}-workflow-event",
            "CIRRUS_LOG_LEVEL": "INFO",
            "CIRRUS_STATE_DB": f"{p}-state",
            "CIRRUS_BASE_WORKFLOW_ARN": f"arn:aws:states:{arn}:stateMachine:{p}-",
            "CIRRUS_PREFIX": f"{p}-",
            "CIRRUS_CLI_IAM_ARN": f"arn:aws:iam::{ACCOUNT}:role/{p}-cli-role-{SUFFIX}",
            "CIRRUS_PRE_BATCH_LAMBDA_ARN": f"arn:aws:lambda:{arn}:function:{p}-pre-batch",
            "CIRRUS_POST_BATCH_LAMBDA_ARN": f"arn:aws:lambda:{arn}:function:{p}-post-batch",
        }


OLD = FilmDrop(
    project_name="myproject",
    environment="production",
    resource_prefix="fd-myproject-production-cirrus",
    payload_bucket="myproject-production-cirrus-payloads",
    payload_root_prefix="payloads/v2",
)
NEW = FilmDrop(
    project_name="42geo",
    environment="prod",
    resource_prefix="42geo-lion-prod-cirrus",
    payload_bucket=f"42geo-lion-prod-cirrus-payload-{SUFFIX}",
    payload_root_prefix="cirrus",
)


def test_the_deployments_are_ones_filmdrop_can_make() -> None:
    # FilmDrop's rules for what it names (modules/cirrus/inputs.tf; S3's bucket names)
    assert len(OLD.resource_prefix) == 30
    # (too long a bucket_prefix for Terraform to make its payload bucket: one passed in)
    assert len(f"{OLD.resource_prefix}-payload-") > 63 - len(SUFFIX)
    assert re.fullmatch(r"[0-9a-z][0-9a-z-]{0,20}[0-9a-z]", NEW.resource_prefix)
    assert NEW.resource_prefix[0].isdigit()
    for deployment in (OLD, NEW):
        buckets = (deployment.payload_bucket, deployment.parameters()["CIRRUS_DATA_BUCKET"])
        for bucket in buckets:
            assert re.fullmatch(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", bucket), bucket
    assert NEW.payload_bucket == f"{NEW.resource_prefix}-payload-{SUFFIX}"


@pytest.mark.parametrize("deployment", [OLD, NEW], ids=["before-2025-03", "today"])
def test_the_overrides_deploy_a_stack_cfn_lint_passes(
    template: dict[str, Any], tmp_path: Path, deployment: FilmDrop
) -> None:
    # GIVEN the deployment's parameters in SSM, as FilmDrop's Terraform writes them
    with mock_aws():
        ssm = boto3.client("ssm", region_name=REGION)
        path = f"/deployment/{deployment.name}/"
        pointer = json.dumps({"type": "parameter_store", "value": path})
        ssm.put_parameter(
            Name=f"/cirrus/deployments/{deployment.name}", Value=pointer, Type="String"
        )
        for key, value in deployment.parameters().items():
            ssm.put_parameter(Name=f"{path}{key}", Value=value, Type="String")
        # WHEN cirrus-params prints the overrides for a tracker named deptrack
        result = CliRunner().invoke(
            app,
            [
                "cirrus-params",
                deployment.name,
                "--json",
                "--prefix",
                "deptrack",
                "--region",
                REGION,
            ],
        )
    # THEN it names the deployment's resources
    assert result.exit_code == 0, result.output
    parameters: dict[str, str] = json.loads(result.stdout)["parameters"]
    assert parameters == {
        "CirrusPrefix": deployment.resource_prefix,
        "CirrusStateTableName": f"{deployment.resource_prefix}-state",
        "CirrusProcessQueueArn": deployment.parameters()["CIRRUS_PROCESS_QUEUE_ARN"],
        "CirrusWorkflowEventTopicArn": deployment.parameters()["CIRRUS_WORKFLOW_EVENT_TOPIC_ARN"],
        "CirrusPayloadBucketName": deployment.payload_bucket,
        "CirrusPayloadRootPrefix": deployment.payload_root_prefix,
    }
    # AND each value is within its parameter's pattern and lengths
    given = {"Prefix": "deptrack", **parameters}
    for key, value in given.items():
        declared = template["Parameters"][key]
        assert re.fullmatch(declared.get("AllowedPattern", ".*"), value), (key, value)
        assert declared.get("MinLength", 0) <= len(value) <= declared.get("MaxLength", 4096)
    # AND no rule refuses them, and the stack is in cirrus mode
    assert refusals(template, given) == []
    assert Stack(template, given).condition("CirrusMode")
    # AND the template SAM transforms with them lints clean, with them as the defaults
    transformed = transform(template, region=REGION, parameters=given)
    for key, value in given.items():
        transformed["Parameters"][key]["Default"] = value
    linted = tmp_path / "transformed.json"
    linted.write_text(json.dumps(transformed, indent=1))
    assert lint(linted) == []
