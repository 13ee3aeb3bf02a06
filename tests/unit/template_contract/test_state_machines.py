"""The state machines against their definitions, and the grants around them.

Every definition deployed under its managed name, ``${...}`` placeholders covered by a
substitution, rendered definitions that parse, each role allowing exactly its service
integrations, and the functions' grants on the parents and the payload bucket.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

import pytest
from moto.stepfunctions.parser.asl.parse.asl_parser import AmazonStateLanguageParser

from dependency_tracker.answers.parent import CALLBACK_OUTPUTS_PREFIX
from dependency_tracker.core import settings
from dependency_tracker.joins.member_list import JOIN_MEMBERS_PREFIX
from dependency_tracker.joins.results import RESULTS_FILE, RESULTS_KEY_PREFIX
from dependency_tracker.payloads.chaining import CHAINED_PREFIX
from dependency_tracker.payloads.results import RESULTS_PREFIX
from dependency_tracker.payloads.runs import LARGE_INPUT_PREFIX
from dependency_tracker.payloads.update_state import EXPRESS_OUTPUTS_PREFIX
from dependency_tracker_local import definitions
from tests.unit.template_contract import iam
from tests.unit.template_contract.cfn import ACCOUNT, REGION, ROOT, Stack, referenced_ids
from tests.unit.template_contract.functions import environment
from tests.unit.template_contract.parameters import OTHER_STACK
from tests.unit.template_contract.step_functions import (
    SFN_SERVICE_STATEMENTS,
    STATE_MACHINE,
    rendered_definition,
    state_machines,
)

if TYPE_CHECKING:
    from collections.abc import Iterator


def test_every_definition_is_deployed_under_its_managed_name(stack: Stack) -> None:
    deployed = state_machines(stack)
    discovered = definitions.discover()
    assert set(deployed) == set(discovered), "one state machine per stepfunctions/*.asl.json"
    prefix = stack.parameter("Prefix")
    for workflow, logical_id in deployed.items():
        properties = stack.resolved_properties(logical_id)
        assert (ROOT / properties["DefinitionUri"]).resolve() == discovered[workflow].resolve()
        assert properties["Name"] == f"{prefix}-{workflow}"
        # The local stack registers the same type (Express ones report their own end).
        assert properties.get("Type", "STANDARD") == definitions.state_machine_type(workflow)


@pytest.mark.parametrize("workflow", sorted(definitions.discover()))
def test_placeholders_are_covered_by_substitutions(stack: Stack, workflow: str) -> None:
    logical_id = state_machines(stack)[workflow]
    substitutions = stack.properties(logical_id)["DefinitionSubstitutions"]
    used = definitions.placeholders(definitions.discover()[workflow].read_text())
    assert used <= set(substitutions), f"no substitution for {sorted(used - set(substitutions))}"
    # the same keys the local stack fills, from the resources and parameters they name
    assert set(substitutions) == definitions.SUBSTITUTION_KEYS
    assert substitutions["DefaultTimeoutSeconds"] == {"Ref": "MaxWaitSeconds"}
    assert substitutions["DefaultMaxConcurrency"] == {"Ref": "DefaultMaxConcurrency"}
    assert substitutions["ProcessQueueUrl"] == {"Ref": "ProcessQueue"}
    assert substitutions["StateTableName"] == {"Ref": "StateTable"}
    assert substitutions["DependencyTableName"] == {"Ref": "DependencyTable"}
    assert substitutions["PayloadBucketName"] == {"Ref": "PayloadBucket"}
    assert substitutions["Prefix"] == {"Ref": "Prefix"}


@pytest.mark.parametrize("workflow", sorted(definitions.discover()))
def test_rendered_definitions_parse(stack: Stack, workflow: str) -> None:
    text = rendered_definition(stack, state_machines(stack)[workflow])
    assert not definitions.placeholders(text)
    json.loads(text)
    AmazonStateLanguageParser.parse(text)  # moto's ANTLR grammar of the States Language


def test_state_machines_log_and_trace_without_execution_data(stack: Stack) -> None:
    for logical_id in stack.of_type(STATE_MACHINE):
        properties = stack.resolved_properties(logical_id)
        assert properties["Tracing"] == {"Enabled": True}
        logging = properties["Logging"]
        assert logging["Level"] != "OFF"
        assert logging["IncludeExecutionData"] is False, "execution data holds task tokens"
        (destination,) = logging["Destinations"]
        group = destination["CloudWatchLogsLogGroup"]["LogGroupArn"]
        assert group.startswith(f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:/aws/vendedlogs/")
        assert stack.allowed(logical_id, "logs:CreateLogDelivery", "*")


def task_states(states: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every Task state, inside Map and Parallel states too."""
    for name, state in states.items():
        if state["Type"] == "Task":
            yield name, state
        for inner in (
            state.get("ItemProcessor"),
            state.get("Iterator"),
            *state.get("Branches", []),
        ):
            if inner:
                yield from task_states(inner["States"])


def integration_call(state: dict[str, Any]) -> tuple[str, str]:
    """IAM action and resource ARN of a service-integration Task state."""
    parameters = state["Parameters"]
    if state["Resource"] == "arn:aws:states:::aws-sdk:s3:putObject":
        # An Express workflow's output, named by a key under express-outputs/ (update-state
        # reads it back from there; test_express_outputs_are_written_where_update_state_reads)
        return "s3:PutObject", f"arn:aws:s3:::{parameters['Bucket']}/{EXPRESS_OUTPUTS_PREFIX}/*"
    found = re.fullmatch(
        r"arn:aws:states:::(?P<service>[a-z0-9-]+):(?P<api>[A-Za-z]+)"
        r"(\.(sync(:2)?|waitForTaskToken))?",
        state["Resource"],
    )
    assert found, f"unsupported task resource {state['Resource']}"
    service, api = found["service"], found["api"]
    action = f"{service}:{api[0].upper()}{api[1:]}"
    if service == "sqs":
        queue = parameters["QueueUrl"].rsplit("/", 1)[1]
        return action, f"arn:aws:sqs:{REGION}:{ACCOUNT}:{queue}"
    if service == "dynamodb":
        return action, f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{parameters['TableName']}"
    pytest.fail(f"teach integration_call the resource of {service} integrations")


@pytest.mark.parametrize("workflow", sorted(definitions.discover()))
def test_state_machine_policies_match_their_service_integrations(
    stack: Stack, workflow: str
) -> None:
    logical_id = state_machines(stack)[workflow]
    definition = json.loads(rendered_definition(stack, logical_id))
    calls = {integration_call(state) for _, state in task_states(definition["States"])}
    # every integration is allowed on exactly the resource it names ...
    for action, resource in calls:
        assert stack.allowed(logical_id, action, resource), (action, resource)
    # ... and the role allows nothing else (besides delivering its logs and traces)
    granted = {
        (action, resource)
        for statement in stack.statements(logical_id)
        if statement.sid not in SFN_SERVICE_STATEMENTS
        for action in statement.actions
        for resource in statement.resources
    }
    assert granted == calls


def test_parents_and_only_parents_may_be_answered(template: dict[str, Any]) -> None:
    stack = Stack(template, OTHER_STACK)
    (notify,) = [s for s in stack.statements("CallbackFunction") if s.sid == "NotifyParents"]
    assert set(notify.actions) == {"states:SendTaskSuccess", "states:SendTaskFailure"}
    for workflow, logical_id in state_machines(stack).items():
        text = definitions.discover()[workflow].read_text()
        is_parent = ".waitForTaskToken" in text
        arn = stack.physical(logical_id).ref
        assert notify.allows("states:SendTaskSuccess", arn) is is_parent, workflow
        assert (logical_id in referenced_ids(notify.raw["Resource"])) is is_parent


def test_extra_parameters_widen_only_what_they_name(template: dict[str, Any]) -> None:
    other_parent = f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:my-parent"
    other_bucket = "arn:aws:s3:::shared-payloads/incoming/*"
    before = Stack(template)
    after = Stack(
        template,
        {"ExtraParentStateMachineArns": other_parent, "ExtraPayloadReadArns": other_bucket},
    )
    assert not before.allowed("CallbackFunction", "states:SendTaskSuccess", other_parent)
    assert after.allowed("CallbackFunction", "states:SendTaskSuccess", other_parent)
    assert not before.allowed(
        "ProcessFunction", "s3:GetObject", "arn:aws:s3:::shared-payloads/incoming/p.json"
    )
    assert after.allowed(
        "ProcessFunction", "s3:GetObject", "arn:aws:s3:::shared-payloads/incoming/p.json"
    )
    assert not after.allowed(
        "ProcessFunction", "s3:GetObject", "arn:aws:s3:::shared-payloads/other"
    )
    parents = before.physical("WaitForDependenciesStateMachine").ref
    assert after.allowed("CallbackFunction", "states:SendTaskFailure", parents)


def test_process_role_reads_manifests_and_writes_only_join_member_lists(
    template: dict[str, Any],
) -> None:
    # GIVEN the stack, and the same stack told to read manifests from another bucket
    extra = "arn:aws:s3:::shared-manifests/joins-in/*"
    own = Stack(template)
    wider = Stack(template, {"ExtraPayloadReadArns": extra})
    bucket = own.arn_of("PayloadBucket")
    # THEN the process function reads manifests (and the member lists it wrote) in its bucket
    for key in ("manifests/ab12.jsonl", f"{JOIN_MEMBERS_PREFIX}/ab12/members.jsonl", "m.json"):
        assert own.allowed("ProcessFunction", "s3:GetObject", f"{bucket}/{key}"), key
    # AND in another bucket only under the ARNs ExtraPayloadReadArns names
    named = "arn:aws:s3:::shared-manifests/joins-in/m.jsonl"
    assert not own.allowed("ProcessFunction", "s3:GetObject", named)
    assert wider.allowed("ProcessFunction", "s3:GetObject", named)
    assert not wider.allowed(
        "ProcessFunction", "s3:GetObject", "arn:aws:s3:::shared-manifests/elsewhere/m.jsonl"
    )
    # AND of its writes, the one for join member lists is joins/* in its own bucket, no wider
    writes = {
        (grant.source, resource)
        for grant in iam.role_grants(wider)
        if grant.holder == "ProcessFunction" and "s3:PutObject" in grant.actions
        for resource in grant.resources
    }
    assert writes == {
        ("Policies/PassLargePayloadsByReference", f"{bucket}/{LARGE_INPUT_PREFIX}/*"),
        ("Policies/RecordRecoveredResults", f"{bucket}/{RESULTS_PREFIX}/*"),
        ("Policies/PassRecoveredChainBodiesByReference", f"{bucket}/{CHAINED_PREFIX}/*"),
        ("Policies/WriteJoinMemberLists", f"{bucket}/{JOIN_MEMBERS_PREFIX}/*"),
    }
    members = f"{bucket}/{JOIN_MEMBERS_PREFIX}/{'0' * 64}/members.jsonl"
    assert wider.allowed("ProcessFunction", "s3:PutObject", members)
    for resource in (
        f"{bucket}/manifests/ab12.jsonl",
        f"{bucket}/{JOIN_MEMBERS_PREFIX}",
        f"{bucket}/{JOIN_MEMBERS_PREFIX}x/members.jsonl",
        f"{bucket}/other/{JOIN_MEMBERS_PREFIX}/members.jsonl",
        named,
        f"arn:aws:s3:::shared-manifests/{JOIN_MEMBERS_PREFIX}/members.jsonl",
    ):
        assert not wider.allowed("ProcessFunction", "s3:PutObject", resource), resource


# A join's results manifest: joins/<sha256 of the join id>/results.jsonl, that file alone.
JOIN_RESULTS = f"{RESULTS_KEY_PREFIX}/*/{RESULTS_FILE}"


def test_bucket_writes_are_the_prefixes_the_code_writes(stack: Stack) -> None:
    # GIVEN the key prefixes under which each handler writes to the payload bucket
    bucket = stack.arn_of("PayloadBucket")
    expected = {
        # execution inputs too large to pass; member lists of large inline joins; results and
        # next steps of runs a lease found ended (recorded as update-state would)
        "ProcessFunction": {
            LARGE_INPUT_PREFIX,
            JOIN_MEMBERS_PREFIX,
            RESULTS_PREFIX,
            CHAINED_PREFIX,
        },
        "UpdateStateFunction": {RESULTS_PREFIX, CHAINED_PREFIX},  # results, next steps
        # outputs and summaries past a bound; decided joins' results manifests
        "CallbackFunction": {CALLBACK_OUTPUTS_PREFIX, JOIN_RESULTS},
    }
    for function, prefixes in expected.items():
        # THEN its role may write there and nowhere else in the bucket (or outside it)
        written = {
            resource
            for statement in stack.statements(function)
            if "s3:PutObject" in statement.actions
            for resource in statement.resources
        }
        assert written == {
            f"{bucket}/{prefix}" if prefix.endswith(RESULTS_FILE) else f"{bucket}/{prefix}/*"
            for prefix in prefixes
        }, function
        # AND the function is told which bucket that is
        variables = environment(stack, function)
        assert variables[settings.ENV_PAYLOAD_BUCKET] == stack.physical("PayloadBucket").ref
