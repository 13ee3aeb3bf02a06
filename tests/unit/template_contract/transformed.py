"""``template.yaml`` after the SAM transform, as CloudFormation receives it, offline.

CloudFormation runs ``AWS::Serverless-2016-10-31`` before it creates anything: the
functions become ``AWS::Lambda::Function`` resources with their event source
mappings, permissions, rules and invoke configs; the state machines become
``AWS::StepFunctions::StateMachine`` resources (with a role SAM builds only for one
that names none; this template names its own for every one).
:func:`transform` runs the same translator (``aws-sam-translator``, the library
behind the hosted transform and ``sam validate``) here, with no AWS call:

* the local ``CodeUri`` and ``DefinitionUri`` are replaced by S3 locations, as
  ``sam package`` replaces them before a deployment (the translator accepts only
  S3 locations, and reads neither);
* the region comes from an explicit boto3 session (no credentials, no request);
* managed policy names resolve through a fixed map instead of IAM's
  ``ListPolicies`` (the template names none, and with every ``Role`` given SAM
  attaches none either; the map serves a resource without its own role).

The result is plain JSON data that :class:`~tests.unit.template_contract.cfn.Stack`
reads like any template. ``scripts/sam_transform.py`` writes it to a file for
``cfn-lint`` (``make lint``): cfn-lint 1.x validates SAM resources against SAM's
schema but no longer runs the transform itself.
"""

from __future__ import annotations

import copy
import json
from functools import cache
from typing import TYPE_CHECKING, Any

import boto3
from samtranslator.parser.parser import Parser  # type: ignore[import-untyped]
from samtranslator.translator.translator import Translator  # type: ignore[import-untyped]

from tests.unit.template_contract.cfn import PARTITION, REGION, TEMPLATE_PATH, load_template
from tests.unit.template_contract.iam import MANAGED_POLICIES

if TYPE_CHECKING:
    from pathlib import Path

# Where `sam package` would have uploaded the code and the definitions; never read.
ARTIFACT_BUCKET = "deptrack-artifacts"
# SAM resource type → its property that names a local path `sam package` uploads.
_LOCAL_PATHS = {
    "AWS::Serverless::Function": "CodeUri",
    "AWS::Serverless::StateMachine": "DefinitionUri",
}
# Other properties `sam package` would upload; the transform here does not model them.
_UNMODELLED_PATHS = {
    "AWS::Serverless::LayerVersion": "ContentUri",
    "AWS::Serverless::Api": "DefinitionUri",
    "AWS::Serverless::HttpApi": "DefinitionUri",
    "AWS::Serverless::Application": "Location",
}


def packaged(template: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``template`` with its local paths replaced by S3 locations, as packaged.

    Raises:
        AssertionError: A resource uploads a local path this helper does not model.
    """
    result = copy.deepcopy(template)
    function_globals = result.get("Globals", {}).get("Function", {})
    if isinstance(function_globals.get("CodeUri"), str):
        function_globals["CodeUri"] = _s3_uri(function_globals["CodeUri"])
    for logical_id, resource in result["Resources"].items():
        kind = resource["Type"]
        if kind in _UNMODELLED_PATHS and _UNMODELLED_PATHS[kind] in resource.get("Properties", {}):
            msg = f"{logical_id}: teach transformed.packaged the {kind} upload"
            raise AssertionError(msg)
        key = _LOCAL_PATHS.get(kind)
        properties = resource.get("Properties", {})
        if key is not None and isinstance(properties.get(key), str):
            properties[key] = _s3_uri(properties[key])
    return result


def managed_policy_map(partition: str = PARTITION) -> dict[str, str]:
    """Managed policy name → ARN, for the policies SAM may attach (no IAM call)."""
    return {name: f"arn:{partition}:iam::aws:policy/{name}" for name in MANAGED_POLICIES}


def transform(
    template: dict[str, Any] | None = None,
    *,
    region: str = REGION,
    parameters: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The CloudFormation template SAM makes of ``template`` (``template.yaml`` by default).

    ``parameters`` are what a deployment passes; SAM itself resolves only a few
    properties with them (none this template uses), so the defaults serve.
    """
    source = load_template() if template is None else template
    policies = managed_policy_map()
    translator = Translator(
        None,
        Parser(),
        # A session only names the region (for ARNs SAM writes); it sends nothing.
        boto_session=boto3.session.Session(region_name=region),
    )
    result: dict[str, Any] = translator.translate(
        packaged(source),
        parameter_values=dict(parameters or {}),
        get_managed_policy_map=lambda: policies,
    )
    # Plain JSON data, like load_template's (the translator returns its own str subclasses).
    plain: dict[str, Any] = json.loads(json.dumps(result))
    return plain


@cache
def _transformed_text(path: Path) -> str:
    return json.dumps(transform(load_template(path)))


def transformed_template(path: Path = TEMPLATE_PATH) -> dict[str, Any]:
    """The transformed ``template.yaml``, computed once per process (a fresh copy each call)."""
    loaded: dict[str, Any] = json.loads(_transformed_text(path))
    return loaded


def _s3_uri(local: str) -> str:
    return f"s3://{ARTIFACT_BUCKET}/{local.strip('/')}"
