"""``cirrus-params`` warns when cirrus's payload bucket would keep forwarded payloads for good.

The tracker forwards a payload over one SQS message through
``{root}/tmp/deptrack-forwarded/`` in cirrus's payload bucket and never deletes it: a
lifecycle rule must. FilmDrop's Terraform writes one (``expire-tmp-objects``, prefix
``{payload_root_prefix}/tmp/``) only on a bucket it created, with
``payload_tmp_lifecycle_expiration_days`` above 0. The deployments here are written to
moto's SSM and S3 as FilmDrop writes them.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws
from typer.testing import CliRunner

from dependency_tracker_cli.__main__ import app
from dependency_tracker_cli.cirrus_lifecycle import LifecycleRule, expiry_warning
from tests.unit.cli.test_cirrus_params import NAME, REGION, filmdrop_variables, put_deployment

if TYPE_CHECKING:
    from collections.abc import Iterator

    from mypy_boto3_s3 import S3Client
    from mypy_boto3_ssm import SSMClient

BUCKET = "fd-lion-dev-cirrus-payload-20250312153540123400000001"


def filmdrop_rule(root: str = "cirrus", days: int = 10) -> dict[str, Any]:
    """modules/cirrus/base/s3.tf's rule on a payload bucket FilmDrop made."""
    return {
        "ID": "expire-tmp-objects",
        "Status": "Enabled",
        "Filter": {"Prefix": f"{root}/tmp/"},  # noqa: S108 (a key prefix in S3)
        "Expiration": {"Days": days},
    }


@pytest.fixture
def aws() -> Iterator[tuple[SSMClient, S3Client]]:
    with mock_aws():
        s3 = boto3.client("s3", region_name=REGION)
        s3.create_bucket(
            Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": "us-west-2"}
        )
        yield boto3.client("ssm", region_name=REGION), s3


def deploy(ssm: SSMClient, s3: S3Client, root: str, rules: list[dict[str, Any]]) -> None:
    variables = {
        **filmdrop_variables(),
        "CIRRUS_PAYLOAD_BUCKET": BUCKET,
        "CIRRUS_PAYLOAD_ROOT_PREFIX": root,
    }
    put_deployment(ssm, variables=variables)
    if rules:
        put_rules(s3, rules)


def put_rules(s3: S3Client, rules: list[Any]) -> None:
    s3.put_bucket_lifecycle_configuration(Bucket=BUCKET, LifecycleConfiguration={"Rules": rules})


def warned() -> tuple[list[str], str]:
    """The ``warnings`` of ``--json``, and what the plain command printed on stderr."""
    shown = CliRunner().invoke(app, ["cirrus-params", NAME, "--json", "--region", REGION])
    assert shown.exit_code == 0, shown.output
    plain = CliRunner().invoke(app, ["cirrus-params", NAME, "--region", REGION])
    assert plain.exit_code == 0, plain.output
    assert plain.stdout.startswith("sam deploy --parameter-overrides")
    found: list[str] = json.loads(shown.stdout)["warnings"]
    return found, " ".join(plain.stderr.split())


def test_a_bucket_without_rules_warns_with_the_command_that_adds_one(
    aws: tuple[SSMClient, S3Client],
) -> None:
    # GIVEN a payload bucket with no lifecycle configuration (passed in to FilmDrop)
    deploy(*aws, "cirrus", [])
    # WHEN cirrus-params reads the deployment
    found, stderr = warned()
    # THEN it still prints the overrides (exit 0), and warns that forwarded payloads stay
    (warning,) = found
    assert stderr.startswith("warning: no enabled lifecycle rule")
    assert " ".join(warning.split()) in stderr
    assert "cirrus/tmp/deptrack-forwarded/" in warning
    assert "would never expire" in warning
    # AND names the fix: FilmDrop's variable, or the exact command for this bucket
    assert "payload_tmp_lifecycle_expiration_days" in warning
    command = f"aws s3api put-bucket-lifecycle-configuration --bucket {BUCKET} "
    assert command in warning
    configuration = json.loads(warning.split("--lifecycle-configuration ")[1].strip("'"))
    assert configuration == {"Rules": [filmdrop_rule()]}


def test_filmdrop_s_own_rule_silences_the_warning(aws: tuple[SSMClient, S3Client]) -> None:
    # GIVEN FilmDrop's expire-tmp-objects rule on cirrus/tmp/
    deploy(*aws, "cirrus", [filmdrop_rule()])
    # THEN there is nothing to warn about
    assert warned() == ([], "")


def test_a_rule_on_another_prefix_warns_to_merge_the_rule(
    aws: tuple[SSMClient, S3Client],
) -> None:
    # GIVEN a bucket whose only rule expires another prefix
    other = {**filmdrop_rule(), "ID": "expire-logs", "Filter": {"Prefix": "logs/"}}
    deploy(*aws, "cirrus", [other])
    # THEN it warns, and says the put replaces the rules there (merge them)
    (warning,) = warned()[0]
    assert "cirrus/tmp/deptrack-forwarded/" in warning
    assert "add the rule" in warning
    assert "it replaces every rule" in warning
    assert "get-bucket-lifecycle-configuration" in warning


def test_the_rule_must_cover_the_deployment_s_own_root(aws: tuple[SSMClient, S3Client]) -> None:
    # GIVEN a deployment whose payload_root_prefix is payloads/v2, and a rule on cirrus/tmp/
    deploy(*aws, "payloads/v2", [filmdrop_rule("cirrus")])
    # THEN the rule does not count: the forwarded payloads are under payloads/v2/tmp/
    (warning,) = warned()[0]
    assert "payloads/v2/tmp/deptrack-forwarded/" in warning
    assert '"Prefix":"payloads/v2/tmp/"' in warning
    # AND FilmDrop's rule for that root does
    put_rules(aws[1], [filmdrop_rule("payloads/v2")])
    assert warned() == ([], "")


def test_a_bucket_it_cannot_read_is_a_warning_not_a_failure(
    aws: tuple[SSMClient, S3Client],
) -> None:
    # GIVEN a deployment whose bucket is not there (another account's, or a name it lost)
    deploy(*aws, "cirrus", [])
    aws[1].delete_bucket(Bucket=BUCKET)
    # THEN the overrides are printed and the warning says the check was not made
    (warning,) = warned()[0]
    assert warning.startswith(
        f"could not read the lifecycle rules of cirrus's payload bucket {BUCKET}"
    )
    assert "NoSuchBucket" in warning


def test_access_denied_names_the_permission_the_check_needs() -> None:
    # GIVEN a caller without s3:GetLifecycleConfiguration on cirrus's bucket
    s3 = boto3.client("s3", region_name=REGION)
    with Stubber(s3) as stub:
        stub.add_client_error(
            "get_bucket_lifecycle_configuration", "AccessDenied", http_status_code=403
        )
        # WHEN the expiry is checked THEN it is a warning naming the permission
        warning = expiry_warning(s3, BUCKET, "cirrus")
    assert warning is not None
    assert "AccessDenied: it needs s3:GetLifecycleConfiguration on the bucket" in warning


KEY_PREFIX = "cirrus/tmp/deptrack-forwarded/"


@pytest.mark.parametrize(
    ("rule", "expires"),
    [
        (filmdrop_rule(), True),
        ({**filmdrop_rule(), "Filter": {"Prefix": "cirrus/"}}, True),
        ({**filmdrop_rule(), "Filter": {"Prefix": KEY_PREFIX}}, True),
        ({**filmdrop_rule(), "Filter": {}}, True),
        ({**filmdrop_rule(), "Filter": {"And": {"Prefix": "cirrus/tmp/"}}}, True),
        ({"Status": "Enabled", "Prefix": "cirrus/tmp/", "Expiration": {"Days": 1}}, True),
        ({**filmdrop_rule(), "Status": "Disabled"}, False),
        ({**filmdrop_rule(), "Filter": {"Prefix": "cirrus/tmp/other/"}}, False),
        ({**filmdrop_rule(), "Expiration": {"ExpiredObjectDeleteMarker": True}}, False),
        (
            {
                "Status": "Enabled",
                "Filter": {"Prefix": "cirrus/tmp/"},
                "NoncurrentVersionExpiration": {"NoncurrentDays": 1},
            },
            False,
        ),
        ({**filmdrop_rule(), "Filter": {"Tag": {"Key": "k", "Value": "v"}}}, False),
        (
            {
                **filmdrop_rule(),
                "Filter": {"And": {"Prefix": "cirrus/", "Tags": [{"Key": "k", "Value": "v"}]}},
            },
            False,
        ),
        ({**filmdrop_rule(), "Filter": {"ObjectSizeGreaterThan": 1024}}, False),
    ],
)
def test_which_rules_expire_the_forwarded_payloads(rule: dict[str, Any], expires: bool) -> None:
    # An enabled rule that expires current objects, with a filter (or its legacy Prefix)
    # whose prefix starts the forwarded payloads' keys and no tag or size condition
    assert LifecycleRule.model_validate(rule).expires_all_under(KEY_PREFIX) is expires
