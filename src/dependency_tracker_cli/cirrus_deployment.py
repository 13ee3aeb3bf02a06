"""A cirrus-geo deployment's names, read from SSM as cirrus's FilmDrop deployment writes them.

cirrus-geo's CLI finds a deployment by name: the SSM parameter
``/cirrus/deployments/{name}`` holds a pointer, ``{"type": "parameter_store", "value":
"/deployment/{name}/"}``, and the parameters under that path hold the deployment's
variables (``CIRRUS_PREFIX``, ``CIRRUS_STATE_DB``, ``CIRRUS_PROCESS_QUEUE_URL``, ...).
cirrus-geo 2.0's ``cirrus/management/deployment_pointer.py`` reads them so, FilmDrop's
Terraform (``modules/cirrus/param_store.tf``) and cirrus-geo's own
``cloudformation/cli/ssm_parameters.yaml`` write them. :func:`read_deployment` does the
same; :func:`template_parameters` maps them onto ``template.yaml``'s cirrus parameters,
refusing a value the template would refuse.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Literal

from botocore.exceptions import ClientError
from pydantic import BaseModel, ConfigDict, ValidationError

from dependency_tracker.core.errors import ConfigurationError, DependencyTrackerError

if TYPE_CHECKING:
    from mypy_boto3_ssm import SSMClient

DEPLOYMENTS_PREFIX = "/cirrus/deployments/"
# What the tracker needs of a deployment (cirrus's own CLI needs CIRRUS_BASE_WORKFLOW_ARN too).
REQUIRED = (
    "CIRRUS_PREFIX",
    "CIRRUS_STATE_DB",
    "CIRRUS_PROCESS_QUEUE_URL",
    "CIRRUS_WORKFLOW_EVENT_TOPIC_ARN",
    "CIRRUS_PAYLOAD_BUCKET",
)
# template.yaml's AllowedPattern of each parameter printed (tests/unit/cli compares them).
PATTERNS = {
    "CirrusPrefix": r"^$|^[a-zA-Z0-9][a-zA-Z0-9-]{1,62}$",
    "CirrusStateTableName": r"^$|^[a-zA-Z0-9_.-]{3,255}$",
    "CirrusProcessQueueArn": r"^$|^arn:aws[a-z-]*:sqs:[a-z0-9-]+:[0-9]{12}:[A-Za-z0-9_-]{1,80}$",
    "CirrusWorkflowEventTopicArn": (
        r"^$|^arn:aws[a-z-]*:sns:[a-z0-9-]+:[0-9]{12}:[A-Za-z0-9_-]{1,256}$"
    ),
    "CirrusPayloadBucketName": r"^$|^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$",
    "CirrusPayloadRootPrefix": r"^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$",
}
# Why the template refuses a value (its ConstraintDescription, shortened).
_RULES = {
    "CirrusPrefix": "2 to 63 letters, digits and hyphens, starting with a letter or digit "
    "(every resource_prefix FilmDrop makes, old and new)",
    "CirrusStateTableName": "a DynamoDB table name",
    "CirrusProcessQueueArn": "the ARN of a standard (not FIFO) SQS queue",
    "CirrusWorkflowEventTopicArn": "the ARN of a standard SNS topic",
    "CirrusPayloadBucketName": "an S3 bucket name",
    "CirrusPayloadRootPrefix": 'a key prefix of letters, digits, ".", "_" and "-", parts '
    'joined by "/", without leading or trailing "/"',
}
_QUEUE_URL = re.compile(r"^https?://(?P<host>[^/]+)/(?P<account>[0-9]{12})/(?P<name>[^/]+)/?$")
_REGION_IN_HOST = re.compile(r"^(?:sqs\.(?P<a>[a-z0-9-]+)\.|(?P<b>[a-z]{2}(?:-[a-z]+)+-[0-9])\.)")


class CirrusDeploymentNotFoundError(DependencyTrackerError):
    """No ``/cirrus/deployments/{name}`` parameter: exit 5, as other unknown names."""

    exit_code = 5

    def __init__(self, name: str, known: list[str]) -> None:
        listed = ", ".join(known) if known else "none"
        super().__init__(
            f"no cirrus deployment {name!r}: SSM parameter {DEPLOYMENTS_PREFIX}{name} "
            f"not found (deployments here: {listed})"
        )


class CirrusDeploymentError(DependencyTrackerError):
    """The deployment cannot make the template's cirrus mode: exit 2, a configuration error."""

    exit_code = ConfigurationError.exit_code

    def __init__(self, name: str, problem: str) -> None:
        super().__init__(f"cirrus deployment {name!r}: {problem}")


class Pointer(BaseModel):
    """The value of ``/cirrus/deployments/{name}``: where the deployment's variables are."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    type: Literal["parameter_store"]
    value: str


def deployment_names(ssm: SSMClient) -> list[str]:
    """Every deployment name under ``/cirrus/deployments/``."""
    return sorted(
        parameter["Name"].removeprefix(DEPLOYMENTS_PREFIX)
        for parameter in _parameters_by_path(ssm, DEPLOYMENTS_PREFIX, recursive=False)
    )


def read_deployment(ssm: SSMClient, name: str) -> dict[str, str]:
    """The deployment's variables, by name (``CIRRUS_PREFIX`` -> value), as cirrus reads them.

    Raises:
        CirrusDeploymentNotFoundError: No pointer parameter for ``name``.
        CirrusDeploymentError: The pointer is not ``parameter_store`` JSON.
    """
    try:
        text = ssm.get_parameter(Name=f"{DEPLOYMENTS_PREFIX}{name}")["Parameter"]["Value"]
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "ParameterNotFound":
            raise CirrusDeploymentNotFoundError(name, deployment_names(ssm)) from exc
        raise
    try:
        pointer = Pointer.model_validate(json.loads(text))
    except (ValueError, ValidationError) as exc:
        problem = (
            f"{DEPLOYMENTS_PREFIX}{name} is not a parameter_store pointer "
            f'({{"type": "parameter_store", "value": "/deployment/{name}/"}}): {text[:200]!r}'
        )
        raise CirrusDeploymentError(name, problem) from exc
    return {
        parameter["Name"].removeprefix(pointer.value): parameter["Value"]
        for parameter in _parameters_by_path(ssm, pointer.value, recursive=True)
    }


def template_parameters(
    name: str, variables: dict[str, str], *, region: str, prefix: str
) -> dict[str, str]:
    """``template.yaml``'s cirrus parameters for the deployment, in the template's order.

    ``region`` places a queue whose URL names none (a local endpoint's); ``prefix`` is the
    tracker's own ``Prefix``, which ``CirrusPrefix`` must not equal or extend.

    Raises:
        CirrusDeploymentError: A variable is missing, or a value the template would refuse.
    """
    missing = [key for key in REQUIRED if not variables.get(key)]
    if missing:
        raise CirrusDeploymentError(name, f"missing {', '.join(missing)} under its path")
    # cirrus writes CIRRUS_PREFIX as "{ResourcePrefix}-"; the template takes the ResourcePrefix
    cirrus_prefix = variables["CIRRUS_PREFIX"].removesuffix("-")
    parameters = {
        "CirrusPrefix": cirrus_prefix,
        "CirrusStateTableName": variables["CIRRUS_STATE_DB"],
        "CirrusProcessQueueArn": variables.get("CIRRUS_PROCESS_QUEUE_ARN")
        or _queue_arn(name, variables["CIRRUS_PROCESS_QUEUE_URL"], region),
        "CirrusWorkflowEventTopicArn": variables["CIRRUS_WORKFLOW_EVENT_TOPIC_ARN"],
        "CirrusPayloadBucketName": variables["CIRRUS_PAYLOAD_BUCKET"],
    }
    if variables.get("CIRRUS_PAYLOAD_ROOT_PREFIX"):
        parameters["CirrusPayloadRootPrefix"] = variables["CIRRUS_PAYLOAD_ROOT_PREFIX"]
    for key, value in parameters.items():
        if not re.fullmatch(PATTERNS[key], value) or not value:
            problem = (
                f"{key} {value!r} ({len(value)} characters) is refused by template.yaml: "
                f"{_RULES[key]}"
            )
            raise CirrusDeploymentError(name, problem)
    if cirrus_prefix == prefix or cirrus_prefix.startswith(f"{prefix}-"):
        problem = (
            f"CirrusPrefix {cirrus_prefix!r} overlaps the tracker's Prefix {prefix!r}: both "
            "stacks would take the names {prefix}-*; choose another --prefix"
        )
        raise CirrusDeploymentError(name, problem)
    return parameters


def _queue_arn(name: str, url: str, region: str) -> str:
    """The ARN of the queue at ``url`` (its region from the host, else ``region``)."""
    found = _QUEUE_URL.match(url)
    if found is None:
        problem = f"CIRRUS_PROCESS_QUEUE_URL {url!r} is not an SQS queue URL"
        raise CirrusDeploymentError(name, problem)
    in_host = _REGION_IN_HOST.match(found["host"])
    queue_region = (in_host["a"] or in_host["b"]) if in_host else region
    partition = (
        "aws-cn"
        if queue_region.startswith("cn-")
        else "aws-us-gov"
        if queue_region.startswith("us-gov-")
        else "aws"
    )
    return f"arn:{partition}:sqs:{queue_region}:{found['account']}:{found['name']}"


def _parameters_by_path(ssm: SSMClient, path: str, *, recursive: bool) -> list[dict[str, str]]:
    """Every parameter under ``path`` (``Name``, ``Value``), all pages."""
    found: list[dict[str, str]] = []
    for page in ssm.get_paginator("get_parameters_by_path").paginate(
        Path=path, Recursive=recursive, WithDecryption=True
    ):
        found.extend(
            {"Name": p["Name"], "Value": p["Value"]}
            for p in page["Parameters"]
            if "Name" in p and "Value" in p
        )
    return found
