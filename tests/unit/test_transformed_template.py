"""Contract tests on the template as CloudFormation receives it: after the SAM transform.

The modules of ``template_contract`` read ``template.yaml`` as written and model what SAM
makes of it (``template_contract.cfn`` merges ``Globals``; ``template_contract.iam`` models
the roles SAM builds). Here the SAM translator itself transforms the template, offline
(``template_contract.transformed``), and the tests check what it generates: the
functions with their merged settings, that SAM builds no role (each state machine's role
is the template's, trusted only for that machine), the event source
mappings, the rule and its Lambda permission, the asynchronous invoke config, and that
the models in ``template_contract`` agree with it.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest

from dependency_tracker_local.filters import CALLBACK_STREAM_FILTER, update_state_event_pattern
from tests.unit.template_contract import iam
from tests.unit.template_contract.cfn import ACCOUNT, Stack, referenced_ids
from tests.unit.template_contract.functions import FUNCTIONS
from tests.unit.template_contract.lambda_service import (
    DESTINATION_ACTIONS,
    LAMBDA_SERVICE_STATEMENTS,
    LOG_WRITE_ACTIONS,
    SQS_POLL_ACTIONS,
    STREAM_READ_ACTIONS,
    XRAY_UPLOAD_ACTIONS,
    lambda_service_needs,
)
from tests.unit.template_contract.parameters import EVERYTHING_ON, OTHER_STACK
from tests.unit.template_contract.step_functions import STATE_MACHINE
from tests.unit.template_contract.transformed import transform

if TYPE_CHECKING:
    from pathlib import Path

LAMBDA_FUNCTION = "AWS::Lambda::Function"
SFN_STATE_MACHINE = "AWS::StepFunctions::StateMachine"
MAPPING = "AWS::Lambda::EventSourceMapping"
# What SAM adds beside the resources the template names, by type. A new kind (or one
# more of a kind) means SAM now builds something the tests below have not looked at.
GENERATED_COUNTS = {
    # process queue, join queue, status reports, dependency stream; cirrus events (cirrus mode)
    MAPPING: 5,
    # update-state's EventBridgeRule event, the sweeper's Schedule and Deadlines schedules
    "AWS::Events::Rule": 3,
    "AWS::Lambda::Permission": 3,  # those rules invoking their functions
    # update-state's retries and on-failure destination; the sweeper's (none: the next run)
    "AWS::Lambda::EventInvokeConfig": 2,
    # no AWS::IAM::Role: every function and state machine brings its own
}
# Settings SAM copies from a function (with Globals merged) to AWS::Lambda::Function.
COPIED_SETTINGS = (
    "FunctionName",
    "Handler",
    "Runtime",
    "Architectures",
    "MemorySize",
    "Timeout",
    "Environment",
    "LoggingConfig",
    "Role",
    "Description",
)
PARAMETER_SETS = [
    pytest.param({}, id="defaults"),
    pytest.param(EVERYTHING_ON, id="everything-on"),
    pytest.param(
        {**OTHER_STACK, "ProcessBatchSize": "50", "ProcessBatchingWindowSeconds": "5"},
        id="other-stack",
    ),
]


def mappings(stack: Stack, function: str) -> list[dict[str, Any]]:
    """Resolved properties of the event source mappings SAM generated for ``function``."""
    return [
        stack.resolved_properties(logical_id)
        for logical_id in stack.of_type(MAPPING)
        if referenced_ids(stack.resources[logical_id]["Properties"]["FunctionName"]) == {function}
    ]


def mapping_from(stack: Stack, function: str, source: str) -> dict[str, Any]:
    (found,) = [m for m in mappings(stack, function) if m["EventSourceArn"] == source]
    return found


def role_holders(stack: Stack) -> dict[str, str]:
    """Role logical id → the function or state machine that runs with it."""
    holders = {}
    for kind, key in ((LAMBDA_FUNCTION, "Role"), (SFN_STATE_MACHINE, "RoleArn")):
        for logical_id in stack.of_type(kind):
            (role,) = referenced_ids(stack.resources[logical_id]["Properties"][key])
            assert role not in holders, f"{role} is shared"
            holders[role] = logical_id
    return holders


# ---------------------------------------------------------------------- the transform


def test_transform_replaces_every_sam_resource_and_keeps_the_rest(
    template: dict[str, Any], transformed: dict[str, Any]
) -> None:
    resources = transformed["Resources"]
    assert "Transform" not in transformed
    assert "Globals" not in transformed
    assert not [r for r in resources.values() if r["Type"].startswith("AWS::Serverless::")]
    for logical_id, resource in template["Resources"].items():
        kind = resource["Type"]
        if kind == "AWS::Serverless::Function":
            assert resources[logical_id]["Type"] == LAMBDA_FUNCTION
        elif kind == STATE_MACHINE:
            assert resources[logical_id]["Type"] == SFN_STATE_MACHINE
        else:
            # SAM leaves the template's own resources exactly as written
            assert resources[logical_id] == resource, logical_id
    # the sections CloudFormation evaluates pass through unchanged
    for section in ("Parameters", "Conditions", "Outputs", "Rules", "Metadata"):
        assert transformed.get(section) == template.get(section), section
    added = {name: r["Type"] for name, r in resources.items() if name not in template["Resources"]}
    counts = {kind: list(added.values()).count(kind) for kind in set(added.values())}
    assert counts == GENERATED_COUNTS, sorted(added.items())


@pytest.mark.parametrize("parameters", PARAMETER_SETS)
@pytest.mark.parametrize("function", FUNCTIONS)
def test_functions_get_the_settings_the_globals_model_gives(
    template: dict[str, Any], transformed: dict[str, Any], function: str, parameters: dict[str, str]
) -> None:
    # GIVEN the function as the contract tests read it (Globals merged by template_contract.cfn)
    modelled = Stack(template, parameters).resolved_properties(function)
    # WHEN SAM builds the Lambda function
    built = Stack(transformed, parameters).resolved_properties(function)
    # THEN it has exactly those settings: what every other contract test checks is deployed
    for name in COPIED_SETTINGS:
        assert built.get(name) == modelled.get(name), name
    assert built["TracingConfig"] == {"Mode": modelled["Tracing"]}
    assert built["Code"]["S3Bucket"], "packaged code"


def test_state_machines_keep_name_type_substitutions_logging_and_tracing(
    template: dict[str, Any], transformed: dict[str, Any]
) -> None:
    source, built = Stack(template), Stack(transformed)
    machines = source.of_type(STATE_MACHINE)
    assert sorted(machines) == sorted(built.of_type(SFN_STATE_MACHINE))
    for logical_id in machines:
        written = source.resolved_properties(logical_id)
        deployed = built.resolved_properties(logical_id)
        assert deployed["StateMachineName"] == written["Name"]
        assert deployed["StateMachineType"] == written["Type"]
        assert deployed["DefinitionSubstitutions"] == written["DefinitionSubstitutions"]
        assert deployed["DefinitionS3Location"]["Key"] == written["DefinitionUri"]
        assert deployed["LoggingConfiguration"] == written["Logging"]
        assert deployed["LoggingConfiguration"]["IncludeExecutionData"] is False
        assert deployed["TracingConfiguration"] == {"Enabled": True}
        assert built.physical(logical_id).ref == source.physical(logical_id).ref


# ---------------------------------------------------------------------- roles


@pytest.mark.parametrize("parameters", PARAMETER_SETS)
def test_sam_builds_no_role_and_each_state_machine_trusts_only_itself(
    template: dict[str, Any], transformed: dict[str, Any], parameters: dict[str, str]
) -> None:
    # GIVEN the transformed template, deployed with these parameters in another region
    stack = Stack(transformed, parameters, region="eu-west-1")
    holders = role_holders(stack)
    own_roles = set(Stack(template).of_type("AWS::IAM::Role"))
    # THEN every function and every state machine runs with its own role from the
    # template, each used by one of them; SAM made none
    assert set(holders) == own_roles == set(stack.of_type("AWS::IAM::Role"))
    functions = stack.of_type(LAMBDA_FUNCTION)  # FUNCTIONS, and cirrus mode's cirrus-events
    assert sorted(holders.values()) == sorted([*functions, *stack.of_type(SFN_STATE_MACHINE)]), (
        "a role nobody uses, or a function or state machine without its own"
    )
    for role, machine in holders.items():
        if machine in functions:
            continue
        properties = stack.resolved_properties(role)
        # AND Step Functions may assume a state machine's role only for that state
        # machine, by the ARN CloudFormation gives it, in this account (confused deputy)
        assert properties["AssumeRolePolicyDocument"]["Statement"] == [
            {
                "Effect": "Allow",
                "Principal": {"Service": "states.amazonaws.com"},
                "Action": "sts:AssumeRole",
                "Condition": {
                    "StringEquals": {"aws:SourceAccount": ACCOUNT},
                    "ArnEquals": {"aws:SourceArn": stack.physical(machine).ref},
                },
            }
        ], machine
        assert "PermissionsBoundary" not in properties
        assert "ManagedPolicyArns" not in properties


@pytest.mark.parametrize("parameters", PARAMETER_SETS)
def test_modelled_grants_are_the_grants_sam_writes(
    template: dict[str, Any], transformed: dict[str, Any], parameters: dict[str, str]
) -> None:
    # GIVEN every grant template_contract.iam models (what the IAM contract tests read)
    modelled = {
        (grant.holder, grant.effect, action, resource)
        for grant in iam.role_grants(Stack(template, parameters))
        for action in grant.actions
        for resource in grant.resources
    }
    # WHEN the roles of the transformed template are read, statement by statement
    built = Stack(transformed, parameters)
    holders = role_holders(built)
    written = {
        (holders[grant.holder], grant.effect, action, resource)
        for grant in iam.role_grants(built)
        for action in grant.actions
        for resource in grant.resources
    }
    # THEN they are the same: no grant SAM adds that the model misses, none the other way
    assert sorted(written - modelled) == []
    assert sorted(modelled - written) == []
    # AND SAM attached exactly the managed policies the model names
    managed = {
        (holders[g.holder], g.source) for g in iam.role_grants(built) if g.source.startswith("man")
    }
    assert managed == {
        (g.holder, g.source) for g in iam.role_grants(Stack(template, parameters)) if g.sam_managed
    }


# ---------------------------------------------------------------------- event sources


@pytest.mark.parametrize("parameters", PARAMETER_SETS)
def test_process_queue_mapping(transformed: dict[str, Any], parameters: dict[str, str]) -> None:
    stack = Stack(transformed, parameters)
    assert len(mappings(stack, "ProcessFunction")) == 2, "the process queue and the join queue"
    mapping = mapping_from(stack, "ProcessFunction", stack.arn_of("ProcessQueue"))
    # the parameters reach the mapping as given (CloudFormation passes them as strings)
    assert mapping["BatchSize"] == stack.parameter("ProcessBatchSize")
    assert mapping["MaximumBatchingWindowInSeconds"] == stack.parameter(
        "ProcessBatchingWindowSeconds"
    )
    assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    # every message reaches the handler (it records invalid ones); failures redrive to the DLQ
    assert "FilterCriteria" not in mapping
    assert "DestinationConfig" not in mapping
    assert mapping.get("Enabled", True) is True


def test_join_queue_mapping(transformed: dict[str, Any]) -> None:
    stack = Stack(transformed)
    mapping = mapping_from(stack, "ProcessFunction", stack.arn_of("JoinQueue"))
    # one chunk per invocation: its work is bounded by JoinChunkSize, not ProcessBatchSize
    assert mapping["BatchSize"] == 1
    assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert mapping["ScalingConfig"] == {"MaximumConcurrency": stack.parameter("JoinMaxConcurrency")}
    assert "FilterCriteria" not in mapping


def test_status_report_mapping(transformed: dict[str, Any]) -> None:
    stack = Stack(transformed)
    mapping = mapping_from(stack, "UpdateStateFunction", stack.arn_of("StatusReportQueue"))
    assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    # AWS: an SQS batch over 10 needs a batching window of at least 1 s
    window = int(mapping.get("MaximumBatchingWindowInSeconds", 0))
    assert int(mapping["BatchSize"]) <= 10 or window >= 1
    assert "FilterCriteria" not in mapping
    assert len(mappings(stack, "UpdateStateFunction")) == 1, "its other event is pushed"


def test_dependency_stream_mapping(transformed: dict[str, Any]) -> None:
    stack = Stack(transformed)
    stream = stack.physical("DependencyTable").attributes["StreamArn"]
    (mapping,) = mappings(stack, "CallbackFunction")
    assert mapping["EventSourceArn"] == stream
    assert mapping["StartingPosition"] == "TRIM_HORIZON", "rows written before it was created"
    assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert mapping["BisectBatchOnFunctionError"] is True
    assert 0 <= mapping["MaximumRetryAttempts"] <= 100
    # SAM keeps only the destination's ARN (Lambda infers the type from it)
    assert mapping["DestinationConfig"] == {
        "OnFailure": {"Destination": stack.arn_of("CallbackFailureQueue")}
    }
    (only,) = mapping["FilterCriteria"]["Filters"]
    assert json.loads(only["Pattern"]) == CALLBACK_STREAM_FILTER


def test_update_state_rule_permission_and_invoke_config(transformed: dict[str, Any]) -> None:
    stack = Stack(transformed, OTHER_STACK, region="eu-west-1")
    # GIVEN the rule SAM made of the EventBridgeRule event (the other is the sweeper's
    # schedule, test_the_sweeper_runs_every_five_minutes_once_at_a_time)
    (rule_id,) = [
        r for r in stack.of_type("AWS::Events::Rule") if "EventPattern" in stack.properties(r)
    ]
    rule = stack.resolved_properties(rule_id)
    prefix = f"arn:aws:states:eu-west-1:{ACCOUNT}:stateMachine:pipeline-"
    assert rule["EventPattern"] == update_state_event_pattern(prefix)
    (target,) = rule["Targets"]
    assert target["Arn"] == stack.arn_of("UpdateStateFunction")
    assert target["DeadLetterConfig"] == {"Arn": stack.arn_of("UpdateStateDlq")}
    assert 0 < target["RetryPolicy"]["MaximumRetryAttempts"] <= 185
    # THEN update-state's only resource policy lets exactly that rule invoke it
    (permission_id,) = [
        p
        for p in stack.of_type("AWS::Lambda::Permission")
        if stack.resolved_properties(p)["FunctionName"] == stack.physical("UpdateStateFunction").ref
    ]
    permission = stack.resolved_properties(permission_id)
    assert permission == {
        "Action": "lambda:InvokeFunction",
        "FunctionName": stack.physical("UpdateStateFunction").ref,
        "Principal": "events.amazonaws.com",
        "SourceArn": stack.arn_of(rule_id),
    }
    # AND the DLQ admits the same rule, by the ARN CloudFormation gives it
    statements = stack.resolved_properties("UpdateStateDlqPolicy")["PolicyDocument"]["Statement"]
    (allow,) = [s for s in statements if s["Effect"] == "Allow"]  # beside the TLS-only deny
    assert allow["Condition"] == {"ArnEquals": {"aws:SourceArn": stack.arn_of(rule_id)}}
    # AND errors of the function itself go, after Lambda's retries, to the same DLQ
    (config_id,) = [
        c
        for c in stack.of_type("AWS::Lambda::EventInvokeConfig")
        if stack.resolved_properties(c)["FunctionName"] == stack.physical("UpdateStateFunction").ref
    ]
    config = stack.resolved_properties(config_id)
    assert config["Qualifier"] == "$LATEST"
    assert config["MaximumRetryAttempts"] == 2
    assert config["DestinationConfig"] == {
        "OnFailure": {"Destination": stack.arn_of("UpdateStateDlq")}
    }


# ---------------------------------------------------------------------- Lambda's own grants


def deployed_service_needs(stack: Stack, function: str) -> set[tuple[str, str]]:
    """(action, resource) pairs Lambda needs from the role, read from the transformed template.

    The same derivation as ``template_contract.lambda_service.lambda_service_needs``, but from what
    CloudFormation creates: the function's log group and tracing mode, the event source
    mappings naming it (queue or stream, on-failure destination) and its invoke config.
    """
    properties = stack.resolved_properties(function)
    group = stack.resources[function]["Properties"]["LoggingConfig"]["LogGroup"]
    (log_group,) = referenced_ids(group)
    needs = {(action, stack.arn_of(log_group)) for action in LOG_WRITE_ACTIONS}
    if properties.get("TracingConfig", {}).get("Mode") == "Active":
        needs |= {(action, "*") for action in XRAY_UPLOAD_ACTIONS}
    destinations = []
    for mapping in mappings(stack, function):
        source = str(mapping["EventSourceArn"])
        service = source.split(":")[2]
        if service == "sqs":
            needs |= {(action, source) for action in SQS_POLL_ACTIONS}
        elif service == "dynamodb" and "/stream/" in source:
            needs |= {(action, source) for action in STREAM_READ_ACTIONS}
            needs.add(("dynamodb:ListStreams", "*"))
        else:
            pytest.fail(f"{function}: teach deployed_service_needs {source}")
        destinations.append(mapping.get("DestinationConfig", {}).get("OnFailure"))
    for config_id in stack.of_type("AWS::Lambda::EventInvokeConfig"):
        config = stack.resources[config_id]["Properties"]
        if referenced_ids(config["FunctionName"]) == {function}:
            resolved = stack.resolved_properties(config_id)["DestinationConfig"]
            destinations += [resolved.get(outcome) for outcome in ("OnSuccess", "OnFailure")]
    for destination in filter(None, destinations):
        arn = str(destination["Destination"])
        kind = {"sqs": "SQS"}[arn.split(":")[2]]
        needs.add((DESTINATION_ACTIONS[kind], arn))
    return needs


@pytest.mark.parametrize("parameters", PARAMETER_SETS)
@pytest.mark.parametrize("function", FUNCTIONS)
def test_lambda_service_grants_match_what_the_transformed_template_creates(
    template: dict[str, Any], transformed: dict[str, Any], function: str, parameters: dict[str, str]
) -> None:
    # GIVEN what Lambda needs, read from the resources CloudFormation creates
    built = Stack(transformed, parameters)
    needs = deployed_service_needs(built, function)
    # THEN the derivation lambda_service_needs makes from the SAM events finds the same
    assert needs == lambda_service_needs(Stack(template, parameters), function)
    # AND the role's Lambda-service statements grant exactly that
    statements = {s.sid: s for s in built.statements(function)}
    granted = {
        (action, resource)
        for sid in LAMBDA_SERVICE_STATEMENTS[function]
        for action in statements[sid].actions
        for resource in statements[sid].resources
    }
    assert granted == needs


# ---------------------------------------------------------------------- linting


def test_cfn_lint_reports_no_errors_on_the_transformed_template(
    transformed: dict[str, Any], tmp_path: Path
) -> None:
    from cfnlint.api import lint_file  # noqa: PLC0415  (slow import, only here)

    path = tmp_path / "transformed.json"
    path.write_text(json.dumps(transformed, indent=1))
    found = lint_file(path)
    assert [f"{m.rule.id} line {m.linenumber}: {m.message}" for m in found] == []


def test_transform_makes_no_aws_call(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        pytest.fail(f"the transform called AWS: {args[1:2]}")

    # every boto3 client call goes through _make_api_call; no credentials are needed either
    monkeypatch.setattr("botocore.client.BaseClient._make_api_call", refuse)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_REGION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    result = transform()
    # SAM attached no managed policy: every role is the template's, with inline statements
    arns = {
        str(arn)
        for resource in result["Resources"].values()
        if resource["Type"] == "AWS::IAM::Role"
        for arn in resource["Properties"].get("ManagedPolicyArns", [])
    }
    assert arns == set()
    assert result["Resources"]


def test_the_sweeper_runs_every_five_minutes_and_its_deadlines_every_minute(
    transformed: dict[str, Any],
) -> None:
    stack = Stack(transformed, OTHER_STACK, region="eu-west-1")
    # GIVEN the rules SAM made of the sweeper's two Schedule events
    rules = {
        stack.resolved_properties(r)["ScheduleExpression"]: r
        for r in stack.of_type("AWS::Events::Rule")
        if "ScheduleExpression" in stack.properties(r)
    }
    # THEN one invokes the sweeper every five minutes with the scheduled event, the other
    # every minute with {"deadlines": true}, and only those rules may
    assert set(rules) == {"rate(5 minutes)", "rate(1 minute)"}
    sweep = stack.resolved_properties(rules["rate(5 minutes)"])
    deadlines = stack.resolved_properties(rules["rate(1 minute)"])
    (target,) = sweep["Targets"]
    assert target["Arn"] == stack.arn_of("SweeperFunction")
    assert "Input" not in target
    (target,) = deadlines["Targets"]
    assert target["Arn"] == stack.arn_of("SweeperFunction")
    assert json.loads(target["Input"]) == {"deadlines": True}
    permissions = [
        stack.resolved_properties(p)
        for p in stack.of_type("AWS::Lambda::Permission")
        if stack.resolved_properties(p)["FunctionName"] == stack.physical("SweeperFunction").ref
    ]
    assert sorted((p["Principal"], p["SourceArn"]) for p in permissions) == sorted(
        ("events.amazonaws.com", stack.arn_of(rule)) for rule in rules.values()
    )
    # AND a failed run is not retried (the next run is the retry)
    (config,) = [
        stack.resolved_properties(c)
        for c in stack.of_type("AWS::Lambda::EventInvokeConfig")
        if stack.resolved_properties(c)["FunctionName"] == stack.physical("SweeperFunction").ref
    ]
    assert config["MaximumRetryAttempts"] == 0
    # AND it reserves no concurrency (template_contract/test_deployable.py says why)
    assert "ReservedConcurrentExecutions" not in stack.resolved_properties("SweeperFunction")
