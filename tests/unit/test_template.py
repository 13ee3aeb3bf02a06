"""Contract tests: ``template.yaml`` against the code it deploys, offline.

What a deployment would otherwise find out late: handler paths that do not
import, settings a function lacks, ``${...}`` placeholders without a
substitution, definitions that do not parse, IAM statements that miss (or
exceed) the calls the code makes, and event filters that differ from the ones
local mode applies. The template is read with cfn-lint's decoder and its
intrinsic functions are resolved for one account and region
(``template_contract.cfn``).

The security checks also cover the grants SAM adds to the roles it generates
(``template_contract.iam``) and hold docs/security.md's tables to the template
(``template_contract.markdown``). The template's ``Rules`` are evaluated for given
parameter values (``template_contract.rules``). ``test_transformed_template.py`` reads
the template after the SAM transform and holds these models to it.
"""

from __future__ import annotations

import contextlib
import fnmatch
import importlib.metadata
import json
import os
import re
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from moto import mock_aws
from moto.stepfunctions.parser.asl.parse.asl_parser import AmazonStateLanguageParser
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from dependency_tracker import clients, definitions, limits, observability, settings
from dependency_tracker.errors import ConfigurationError
from dependency_tracker.filters import CALLBACK_STREAM_FILTER, matches, update_state_event_pattern
from dependency_tracker.flows.chaining import CHAINED_PREFIX
from dependency_tracker.flows.joins.registration import JOIN_MEMBERS_PREFIX
from dependency_tracker.flows.results import RESULTS_PREFIX
from dependency_tracker.flows.runs import LARGE_INPUT_PREFIX
from dependency_tracker.flows.update_state import EXPRESS_OUTPUTS_PREFIX
from dependency_tracker.handlers import callback, cirrus_events, process, sweeper, update_state
from dependency_tracker.local.cirrus import CirrusDeployment
from dependency_tracker.local.context import LocalContext
from dependency_tracker.local.events import status_change_event
from dependency_tracker.local.pumps import ExecutionPump, SqsPump, StreamPump, scheduled_event
from dependency_tracker.models import PayloadState, ProcessPayload
from dependency_tracker.models.cirrus import cirrus_key
from dependency_tracker.models.outputs import CALLBACK_OUTPUTS_PREFIX
from dependency_tracker.stores import StateTable
from dependency_tracker.stores import schema as table_schema
from dependency_tracker.stores.sweeps import CURSOR_KEY, SweepCursor
from tests.artifact.pins import installed_closure
from tests.conftest import load_event, payload, wait_until
from tests.unit.handlers.conftest import sqs_event
from tests.unit.template_contract import iam, markdown
from tests.unit.template_contract import rules as template_rules
from tests.unit.template_contract.cfn import (
    ACCOUNT,
    LOG_DELIVERY_ACTIONS,
    REGION,
    ROOT,
    TEMPLATE_PATH,
    Stack,
    referenced_ids,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

FUNCTIONS = ("ProcessFunction", "UpdateStateFunction", "CallbackFunction", "SweeperFunction")
CIRRUS_EVENTS_FUNCTION = "CirrusEventsFunction"  # cirrus mode only (CirrusPrefix set)
HANDLERS: dict[str, Callable[..., Any]] = {
    "ProcessFunction": process.lambda_handler,
    "UpdateStateFunction": update_state.lambda_handler,
    "CallbackFunction": callback.lambda_handler,
    "SweeperFunction": sweeper.lambda_handler,
    "CirrusEventsFunction": cirrus_events.lambda_handler,  # cirrus mode only
}
POWERTOOLS_VARIABLES = {
    "POWERTOOLS_SERVICE_NAME",
    "POWERTOOLS_LOG_LEVEL",
    "POWERTOOLS_METRICS_NAMESPACE",
}
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
STATE_MACHINE = "AWS::Serverless::StateMachine"
OTHER_STACK = {"Prefix": "pipeline"}
# What Step Functions itself does with a state machine's role, by Sid: deliver the
# execution logs (no resource-level permissions) and upload X-Ray traces ("IAM policies
# for AWS X-Ray", Step Functions developer guide), both on "*".
SFN_XRAY_ACTIONS = frozenset(
    {
        "xray:PutTraceSegments",
        "xray:PutTelemetryRecords",
        "xray:GetSamplingRules",
        "xray:GetSamplingTargets",
    }
)
SFN_SERVICE_STATEMENTS = {
    "DeliverExecutionLogs": LOG_DELIVERY_ACTIONS,
    "UploadTraces": SFN_XRAY_ACTIONS,
}
# Where the process flow writes a large inline join's member list
# (joins/<sha256 of join_id>/<sha256 of token>/members.jsonl).


@pytest.fixture
def stack(template: dict[str, Any]) -> Stack:
    return Stack(template)


def setting_variables(function: str | None = None) -> set[str]:
    """Every environment variable ``settings.py`` reads (its ``ENV_*`` names) for ``function``.

    The ``DEPTRACK_SWEEPER_*`` variables are read by the sweeper alone, and
    ``settings.PROCESS_VARIABLES`` by the process function alone.
    """
    names = {value for name, value in vars(settings).items() if name.startswith("ENV_")}
    if function is None:
        return names
    if function != "ProcessFunction":
        names -= set(settings.PROCESS_VARIABLES)
    if function == "SweeperFunction":
        return names
    return names - {variable for variable, _, _ in settings.SWEEPER_VARIABLES}


def environment(stack: Stack, function: str) -> dict[str, str]:
    variables = stack.resolved_properties(function).get("Environment", {}).get("Variables", {})
    return {str(name): str(value) for name, value in variables.items()}


def event_properties(
    stack: Stack, function: str, kind: str, name: str | None = None
) -> dict[str, Any]:
    """The properties of ``function``'s one ``kind`` event (or of the one named ``name``)."""
    events = stack.resolved_properties(function)["Events"].items()
    found = [e["Properties"] for n, e in events if e["Type"] == kind and name in (None, n)]
    assert len(found) == 1, f"{function} needs exactly one {kind} event {name or ''}"
    properties: dict[str, Any] = found[0]
    return properties


def unresolved_event(
    stack: Stack, function: str, kind: str, name: str | None = None
) -> dict[str, Any]:
    events = stack.properties(function)["Events"].items()
    (found,) = (e["Properties"] for n, e in events if e["Type"] == kind and name in (None, n))
    properties: dict[str, Any] = found
    return properties


def stream_filter(stack: Stack) -> dict[str, Any]:
    """The callback mapping's FilterCriteria pattern, parsed."""
    filters = event_properties(stack, "CallbackFunction", "DynamoDB")["FilterCriteria"]["Filters"]
    assert len(filters) == 1, "one filter: Lambda ORs several, which would widen it"
    pattern: dict[str, Any] = json.loads(filters[0]["Pattern"])
    return pattern


def state_machines(stack: Stack) -> dict[str, str]:
    """Workflow name (the definition file's stem) → logical id of its state machine."""
    found = {}
    for logical_id in stack.of_type(STATE_MACHINE):
        uri = stack.properties(logical_id)["DefinitionUri"]
        found[str(uri).removeprefix("stepfunctions/").removesuffix(definitions.SUFFIX)] = logical_id
    return found


def rendered_definition(stack: Stack, logical_id: str) -> str:
    properties = stack.resolved_properties(logical_id)
    substitutions = {k: str(v) for k, v in properties["DefinitionSubstitutions"].items()}
    return definitions.render(ROOT / properties["DefinitionUri"], substitutions)


# ---------------------------------------------------------------------- template hygiene


def test_cfn_lint_reports_no_errors() -> None:
    from cfnlint.api import lint_file  # noqa: PLC0415  (slow import, only here)

    found = lint_file(TEMPLATE_PATH)
    errors = [f"{m.rule.id} line {m.linenumber}: {m.message}" for m in found]
    assert [e for e in errors if e.startswith("E")] == []


# ---------------------------------------------------------------------- functions and code


def test_handlers_import_from_code_uri_and_need_only_the_runtime_dependencies(
    stack: Stack,
) -> None:
    # GIVEN the handler paths and the folder SAM packages
    handlers = {f: str(stack.properties(f)["Handler"]) for f in FUNCTIONS}
    code_uri = {ROOT / str(stack.properties(f)["CodeUri"]) for f in FUNCTIONS}
    assert len(code_uri) == 1
    (source,) = code_uri
    for path in handlers.values():
        assert (source / path.rpartition(".")[0].replace(".", "/")).with_suffix(".py").is_file()
    assert handlers == {f: f"{HANDLERS[f].__module__}.{HANDLERS[f].__name__}" for f in FUNCTIONS}, (
        "the template must deploy the handlers the local stack runs"
    )
    # WHEN a fresh interpreter imports them from there, with no tracker settings and
    # with every installed library that src/requirements.txt does not bring hidden
    # (as in the Lambda package: no moto, typer, rich, PyYAML, ...)
    shipped = installed_closure(runtime_requirements())
    hidden = sorted(
        module
        for module, names in importlib.metadata.packages_distributions().items()
        if not {canonicalize_name(name) for name in names} & shipped
        and module != "dependency_tracker"
    )
    assert "moto" in hidden
    assert "pydantic" not in hidden
    script = (
        "import importlib, importlib.abc, json, sys\n"
        "hidden = set(json.loads(sys.argv[1]))\n"
        "class NotShipped(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.partition('.')[0] in hidden:\n"
        "            raise ModuleNotFoundError(f'{name} is not shipped', name=name)\n"
        "sys.meta_path.insert(0, NotShipped())\n"
        "found = {}\n"
        "for path in sys.argv[2:]:\n"
        "    module, _, name = path.rpartition('.')\n"
        "    loaded = importlib.import_module(module)\n"
        "    found[path] = [callable(getattr(loaded, name)), loaded.__file__]\n"
        "print(json.dumps(found))\n"
    )
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("DEPTRACK_", "AWS_"))}
    result = subprocess.run(  # noqa: S603  (our own interpreter and script)
        [sys.executable, "-c", script, json.dumps(hidden), *handlers.values()],
        cwd=source,
        env=clean,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    # THEN each imports, is callable and comes from the packaged folder
    assert result.returncode == 0, result.stderr[-2000:]
    for path, (is_callable, filename) in json.loads(result.stdout).items():
        assert is_callable, path
        assert filename.startswith(str(source)), filename


def runtime_requirements() -> list[Requirement]:
    lines = (ROOT / "src" / "requirements.txt").read_text().splitlines()
    return [Requirement(line) for line in (raw.partition("#")[0].strip() for raw in lines) if line]


def test_runtime_requirements_pin_each_project_dependency() -> None:
    # src/requirements.txt pins exact versions (tests/artifact/test_pins.py holds them to
    # constraints.txt); each must sit inside the range pyproject.toml gives library users
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = {canonicalize_name(r.name): r.specifier for r in runtime_requirements()}
    for spec in project["dependencies"]:
        dependency = Requirement(spec)
        (pin,) = pins[canonicalize_name(dependency.name)]
        assert dependency.specifier.contains(pin.version), (spec, str(pin))


@pytest.mark.parametrize("function", FUNCTIONS)
def test_every_variable_the_code_reads_is_set(stack: Stack, function: str) -> None:
    # the DEPTRACK_CIRRUS_* variables are set in cirrus mode only (template_contract/
    # test_cirrus_mode.py); absent, the code runs in normal mode
    optional = {name for name in setting_variables() if name.startswith("DEPTRACK_CIRRUS_")}
    required = setting_variables(function) - optional | POWERTOOLS_VARIABLES
    missing = required - set(environment(stack, function))
    assert not missing, f"{function} lacks {sorted(missing)}"


@pytest.mark.parametrize("region", [REGION, "eu-central-1"])
@pytest.mark.parametrize("function", FUNCTIONS)
def test_settings_built_from_the_template_point_at_the_stack(
    template: dict[str, Any], monkeypatch: pytest.MonkeyPatch, function: str, region: str
) -> None:
    # GIVEN the function's environment exactly as the template sets it (another prefix too)
    stack = Stack(template, OTHER_STACK, region=region)
    for name in setting_variables() | POWERTOOLS_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in environment(stack, function).items():
        monkeypatch.setenv(name, value)
    # WHEN the code reads its settings
    built = settings.Settings.from_env()
    # THEN they name this stack's tables and its managed state machines
    assert built.state_table == stack.physical("StateTable").ref
    assert built.dependency_table == stack.physical("DependencyTable").ref
    assert built.prefix == "pipeline"
    assert built.waiter_retention_days == int(str(stack.parameter("WaiterRetentionDays")))
    for workflow, logical_id in state_machines(stack).items():
        assert built.state_machine_arn(workflow) == stack.physical(logical_id).ref
        assert built.workflow_of(stack.physical(logical_id).attributes["Name"]) == workflow
    assert settings.metrics_namespace() == os.environ["POWERTOOLS_METRICS_NAMESPACE"]
    assert os.environ["POWERTOOLS_SERVICE_NAME"] == observability.SERVICE
    assert os.environ["POWERTOOLS_LOG_LEVEL"] == stack.parameter("LogLevel")


def test_functions_are_python_arm64_with_partial_batch_failures(stack: Stack) -> None:
    for function in FUNCTIONS:
        properties = stack.resolved_properties(function)
        assert properties["Runtime"] == "python3.13"
        assert properties["Architectures"] == ["arm64"]
    for function, kind, name in (
        ("ProcessFunction", "SQS", "ProcessQueue"),
        ("ProcessFunction", "SQS", "JoinQueue"),
        ("CallbackFunction", "DynamoDB", None),
    ):
        assert event_properties(stack, function, kind, name)["FunctionResponseTypes"] == [
            "ReportBatchItemFailures"
        ]


# ---------------------------------------------------------------------- state machines


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


def test_bucket_writes_are_the_prefixes_the_code_writes(stack: Stack) -> None:
    # GIVEN the key prefixes under which each handler writes to the payload bucket
    bucket = stack.arn_of("PayloadBucket")
    expected = {
        # execution inputs too large to pass; member lists of large inline joins; results of
        # runs a lease found ended (recorded as update-state would)
        "ProcessFunction": {LARGE_INPUT_PREFIX, JOIN_MEMBERS_PREFIX, RESULTS_PREFIX},
        "UpdateStateFunction": {RESULTS_PREFIX, CHAINED_PREFIX},  # results, next steps
        "CallbackFunction": {CALLBACK_OUTPUTS_PREFIX},  # outputs and summaries past a bound
    }
    for function, prefixes in expected.items():
        # THEN its role may write there and nowhere else in the bucket (or outside it)
        written = {
            resource
            for statement in stack.statements(function)
            if "s3:PutObject" in statement.actions
            for resource in statement.resources
        }
        assert written == {f"{bucket}/{prefix}/*" for prefix in prefixes}, function
        # AND the function is told which bucket that is
        variables = environment(stack, function)
        assert variables[settings.ENV_PAYLOAD_BUCKET] == stack.physical("PayloadBucket").ref


# ---------------------------------------------------------------------- storage and queues


def test_tables_match_the_schema_the_code_uses(stack: Stack) -> None:
    for logical_id, build in (
        ("StateTable", table_schema.state_table_definition),
        ("DependencyTable", table_schema.dependency_table_definition),
    ):
        properties = stack.resolved_properties(logical_id)
        expected = build(properties["TableName"])
        for key in ("KeySchema", "BillingMode"):
            assert properties[key] == expected[key], (logical_id, key)
        assert sorted(properties["AttributeDefinitions"], key=str) == sorted(
            expected["AttributeDefinitions"], key=str
        )
        assert properties["TimeToLiveSpecification"] == {
            "AttributeName": table_schema.TTL_ATTRIBUTE,
            "Enabled": True,
        }
        assert properties["PointInTimeRecoverySpecification"] == {
            "PointInTimeRecoveryEnabled": True
        }
        assert properties["SSESpecification"]["SSEEnabled"] is True
        stream = expected.get("StreamSpecification")
        if stream:
            assert properties["StreamSpecification"] == {"StreamViewType": stream["StreamViewType"]}
        else:
            assert "StreamSpecification" not in properties
    # the names the local stack uses for the same prefix
    assert stack.physical("StateTable").ref == f"{stack.parameter('Prefix')}-state"
    assert stack.physical("DependencyTable").ref == f"{stack.parameter('Prefix')}-dependencies"


def test_process_queue_redrives_and_outlasts_the_function(
    stack: Stack, transformed: dict[str, Any]
) -> None:
    queue = stack.resolved_properties("ProcessQueue")
    # the timeout the deployed function gets (Globals merged by SAM itself), and the
    # longest window the parameters and Rules admit (Lambda allows up to 300 s)
    timeout = int(Stack(transformed).resolved_properties("ProcessFunction")["Timeout"])
    windows = [w for w in range(301) if admitted(stack.template, "1", str(w))]
    assert windows == list(range(61))
    # AWS: visibility timeout >= 6 x the function timeout (+ the batching window)
    assert int(queue["VisibilityTimeout"]) >= 6 * timeout + max(windows)
    assert queue["RedrivePolicy"] == {
        "deadLetterTargetArn": stack.arn_of("ProcessDlq"),
        "maxReceiveCount": stack.parameter("ProcessMaxReceiveCount"),
    }
    # the function knows which receive is the last, to answer the parent before the DLQ
    variables = environment(stack, "ProcessFunction")
    assert (
        variables[settings.ENV_PROCESS_MAX_RECEIVE_COUNT]
        == queue["RedrivePolicy"]["maxReceiveCount"]
    )
    mapping = unresolved_event(stack, "ProcessFunction", "SQS", "ProcessQueue")
    assert mapping["Queue"] == {"Fn::GetAtt": ["ProcessQueue", "Arn"]}
    assert mapping["BatchSize"] == {"Ref": "ProcessBatchSize"}
    assert mapping["MaximumBatchingWindowInSeconds"] == {"Ref": "ProcessBatchingWindowSeconds"}


def test_the_join_queue_hands_the_process_function_one_chunk_at_a_time(stack: Stack) -> None:
    """Each invocation registers one chunk, whatever ProcessBatchSize; failures reach the DLQ."""
    mapping = unresolved_event(stack, "ProcessFunction", "SQS", "JoinQueue")
    assert mapping["Queue"] == {"Fn::GetAtt": ["JoinQueue", "Arn"]}
    assert mapping["BatchSize"] == 1
    assert "MaximumBatchingWindowInSeconds" not in mapping
    assert mapping["ScalingConfig"] == {"MaximumConcurrency": {"Ref": "JoinMaxConcurrency"}}
    queue = stack.resolved_properties("JoinQueue")
    timeout = int(stack.resolved_properties("ProcessFunction").get("Timeout", 60))
    assert int(queue["VisibilityTimeout"]) >= 6 * timeout
    # the same receive count as the process queue: the handler's last-receive rule holds
    assert queue["RedrivePolicy"] == {
        "deadLetterTargetArn": stack.arn_of("ProcessDlq"),
        "maxReceiveCount": stack.parameter("ProcessMaxReceiveCount"),
    }
    join_queue_url = stack.physical("JoinQueue").ref
    assert environment(stack, "ProcessFunction")[settings.ENV_JOIN_QUEUE_URL] == join_queue_url


def test_queues_take_the_message_size_the_tracker_sizes_for(stack: Stack) -> None:
    """The queues the handlers write to have the maximum the embedded stack's queues have."""
    for name in ("ProcessQueue", "JoinQueue", "StatusReportQueue"):
        size = stack.resolved_properties(name)["MaximumMessageSize"]
        assert int(size) == limits.SQS_DEFAULT_MAX_MESSAGE_BYTES, name


def test_status_report_queue_outlasts_update_state(
    stack: Stack, transformed: dict[str, Any]
) -> None:
    queue = stack.resolved_properties("StatusReportQueue")
    timeout = int(Stack(transformed).resolved_properties("UpdateStateFunction")["Timeout"])
    mapping = unresolved_event(stack, "UpdateStateFunction", "SQS")
    window = int(mapping.get("MaximumBatchingWindowInSeconds", 0))
    assert int(queue["VisibilityTimeout"]) >= 6 * timeout + window


# ---------------------------------------------------------------------- batch settings (Rules)

# AWS: an SQS event source mapping takes BatchSize 1 to 10,000 and a batching window of 0
# to 300 s, and a batch over 10 needs a window of at least 1 s (Lambda API reference,
# MaximumBatchingWindowInSeconds; "Lambda parameters for Amazon SQS event source mappings").
SQS_MAX_BATCH = 10_000
SQS_MAX_WINDOW = 300
SQS_UNWINDOWED_MAX_BATCH = 10
# The process function's batch bound (docs/deploy.md, "Batch settings"): each message costs
# at most its worst path's AWS calls at the latencies bench/prices.json assumes, plus the
# per-invocation overhead it assumes; TAIL_FACTOR covers slow calls and the SDK's retries
# (standard mode: up to 3 attempts); a full batch may use BATCH_SHARE of the timeout, the
# rest is for a cold start and a join message in the same batch (a 1,000-member join needs
# about 40 s: docs/performance.md).
PROCESS_WORST_MESSAGE_CALLS = {
    # a {"url"} payload read; a large execution input written by reference
    "s3": 2,
    # waiter PutItem, cycle-check edge PutItem and Query, state GetItem, claim PutItem,
    # start UpdateItem
    "dynamodb": 6,
    "stepfunctions": 1,  # StartExecution
}
CALLBACK_WORST_RECORD_CALLS = {
    # row GetItem, member UpdateItem, join decision UpdateItem, notified UpdateItem
    "dynamodb": 4,
    "stepfunctions": 1,  # SendTaskSuccess / SendTaskFailure
    "s3": 1,  # an output past the callback bound, stored by reference
}
# Per status report, before its waiters (each waiter adds one conditional UpdateItem).
STATUS_REPORT_CALLS = {
    "stepfunctions": 1,  # DescribeExecution of a large input
    "dynamodb": 3,  # state GetItem and UpdateItem, waiters Query
    "s3": 3,  # payload read, result and chained body written by reference
    "sqs": 1,  # the next chain step
}
TAIL_FACTOR = 3
BATCH_SHARE = 0.5
PRICES = ROOT / "bench" / "prices.json"


def admitted(template: dict[str, Any], batch: str, window: str) -> bool:
    """Whether the parameter constraints and the Rules let a stack have these batch settings."""
    parameters = template["Parameters"]
    for name, value in (("ProcessBatchSize", batch), ("ProcessBatchingWindowSeconds", window)):
        spec = parameters[name]
        if not spec["MinValue"] <= float(value) <= spec["MaxValue"]:
            return False  # CloudFormation refuses it before the Rules
    values = {"ProcessBatchSize": batch, "ProcessBatchingWindowSeconds": window}
    return not template_rules.refusals(template, values)


def worst_item_ms(calls: dict[str, int]) -> int:
    """Milliseconds one batch item may take: its calls at the assumed latencies, with margin."""
    assumptions = json.loads(PRICES.read_text())["assumptions"]
    latency = assumptions["aws_call_latency_ms"]["value"]
    overhead = int(assumptions["lambda_invocation_overhead_ms"]["value"])
    return TAIL_FACTOR * (sum(int(latency[service]) * n for service, n in calls.items()) + overhead)


def test_batch_rules_are_declared_with_their_reasons(template: dict[str, Any]) -> None:
    rules = template["Rules"]
    assert set(rules) >= {"ProcessBatchSettings", "ProcessBatchOverTenNeedsWindow"}
    for name, rule in rules.items():
        assert rule["Assertions"], name
        for assertion in rule["Assertions"]:
            description = assertion["AssertDescription"]
            # the refusal names the parameter it is about and says why
            assert re.search(r"\bProcess\w+", description), (name, description)
            assert len(description) > 60, (name, description)
            assert referenced_ids(assertion["Assert"]) <= set(template["Parameters"])
    # the window rule applies exactly above 10
    condition = rules["ProcessBatchOverTenNeedsWindow"]["RuleCondition"]
    assert referenced_ids(condition) == {"ProcessBatchSize"}


@pytest.mark.parametrize(
    ("batch", "window", "refused_by"),
    [
        pytest.param("10", "0", set(), id="10-without-window"),
        pytest.param("11", "0", {"ProcessBatchOverTenNeedsWindow"}, id="11-without-window"),
        pytest.param("11", "1", set(), id="11-with-1s"),
        pytest.param("100", "0", {"ProcessBatchOverTenNeedsWindow"}, id="100-without-window"),
        pytest.param("100", "60", set(), id="cap-with-largest-window"),
        pytest.param("101", "1", {"ProcessBatchSettings"}, id="over-the-cap"),
        pytest.param("10000", "60", {"ProcessBatchSettings"}, id="aws-maximum"),
        pytest.param("1", "0", set(), id="smallest"),
        # 0 is "not 1 to 10" too: both rules refuse it
        pytest.param(
            "0", "0", {"ProcessBatchSettings", "ProcessBatchOverTenNeedsWindow"}, id="zero"
        ),
        pytest.param("10.5", "1", {"ProcessBatchSettings"}, id="not-whole"),
        pytest.param("10", "61", {"ProcessBatchSettings"}, id="window-over-60"),
        pytest.param("20", "0.5", {"ProcessBatchSettings"}, id="window-not-whole"),
    ],
)
def test_batch_rules_at_their_boundaries(
    template: dict[str, Any], batch: str, window: str, refused_by: set[str]
) -> None:
    values = {"ProcessBatchSize": batch, "ProcessBatchingWindowSeconds": window}
    assert template_rules.refused_rules(template, values) == refused_by


def test_rules_admit_exactly_what_lambda_accepts_and_the_function_can_finish(
    template: dict[str, Any],
) -> None:
    cap = int(template["Parameters"]["ProcessBatchSize"]["MaxValue"])
    # every whole batch size and window Lambda itself takes (batch sizes sampled past 200)
    batches = [*range(1, 201), 500, 1_000, 5_000, SQS_MAX_BATCH]
    for batch in batches:
        for window in range(SQS_MAX_WINDOW + 1):
            lambda_accepts = batch <= SQS_UNWINDOWED_MAX_BATCH or window >= 1
            expected = lambda_accepts and batch <= cap and window <= 60
            assert admitted(template, str(batch), str(window)) is expected, (batch, window)
    # the defaults deploy
    assert template_rules.refusals(template, {}) == []


def test_process_batch_cap_is_what_the_function_finishes_in_its_timeout(
    template: dict[str, Any], transformed: dict[str, Any]
) -> None:
    timeout_ms = 1000 * int(Stack(transformed).resolved_properties("ProcessFunction")["Timeout"])
    per_message = worst_item_ms(PROCESS_WORST_MESSAGE_CALLS)
    assert per_message == 300, "docs/deploy.md states 0.3 s per message"
    # the cap is the largest batch whose worst case fits the share of the timeout
    cap = int(template["Parameters"]["ProcessBatchSize"]["MaxValue"])
    assert cap == int(timeout_ms * BATCH_SHARE) // per_message
    assert cap <= SQS_MAX_BATCH
    # docs/deploy.md states the bound and the estimate behind it
    deploy = (ROOT / "docs" / "deploy.md").read_text(encoding="utf-8")
    (row,) = [r for r in markdown.table_rows(deploy) if "ProcessBatchSize" in r[0]]
    assert f"1 to {cap} messages" in " ".join(row)
    assert "0.3 s per message" in markdown.section(deploy, "Batch settings")


@pytest.mark.parametrize(
    ("function", "source", "calls"),
    [
        pytest.param("CallbackFunction", "DependencyTable", CALLBACK_WORST_RECORD_CALLS, id="cb"),
        pytest.param("UpdateStateFunction", "StatusReportQueue", STATUS_REPORT_CALLS, id="us"),
    ],
)
def test_fixed_batches_fit_their_function_timeout(
    transformed: dict[str, Any], function: str, source: str, calls: dict[str, int]
) -> None:
    built = Stack(transformed)
    timeout_ms = 1000 * int(built.resolved_properties(function)["Timeout"])
    arns = {built.arn_of(source), built.physical(source).attributes.get("StreamArn")}
    (mapping,) = [
        built.resolved_properties(m)
        for m in built.of_type("AWS::Lambda::EventSourceMapping")
        if built.resolved_properties(m)["EventSourceArn"] in arns
    ]
    assert int(mapping["BatchSize"]) * worst_item_ms(calls) <= timeout_ms * BATCH_SHARE


# ---------------------------------------------------------------------- security, as documented

SECURITY_DOC = ROOT / "docs" / "security.md"
# Parameter values under which every conditional resource and statement exists.
ALARM_KEY = f"arn:aws:kms:{REGION}:{ACCOUNT}:key/1234abcd-12ab-34cd-56ef-1234567890ab"
EVERYTHING_ON = {
    "ExtraParentStateMachineArns": f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:my-parent",
    "ExtraPayloadReadArns": "arn:aws:s3:::shared-payloads/incoming/*",
    "AlarmEmail": "ops@example.com",
    "AlarmTopicKmsKeyArn": ALARM_KEY,
    "CirrusPrefix": "cirrus",
    "DeployExamples": "true",
}
# The only actions any role may hold on Resource "*": each is one AWS offers no narrower
# resource for (no resource-level permissions). Every entry must have its row in
# docs/security.md, answered "Yes".
STAR_RESOURCE_ACTIONS = frozenset(
    {
        # every role's UploadTraces (the state machines' also read sampling rules)
        *SFN_XRAY_ACTIONS,
        # the callback function's ListStreams (its stream's event source mapping)
        "dynamodb:ListStreams",
    }
    # Step Functions log delivery (the state machines' DeliverExecutionLogs)
    | LOG_DELIVERY_ACTIONS
)
# The statements of each function's role that Lambda uses, not the handler: the event
# source mapping's polling, log delivery to the function's own log group, failure
# destinations and X-Ray. The handlers cannot exercise them offline, so the dynamic IAM
# test leaves exactly these Sids out of its "every grant is used" check, and
# test_lambda_service_statements_grant_exactly_what_lambda_needs holds each of them to
# the actions and resources the function's own configuration calls for.
LAMBDA_SERVICE_STATEMENTS: dict[str, frozenset[str]] = {
    "ProcessFunction": frozenset({"WriteOwnLogs", "PollProcessQueue", "UploadTraces"}),
    "UpdateStateFunction": frozenset(
        {"WriteOwnLogs", "PollStatusReports", "DeliverFailedInvocations", "UploadTraces"}
    ),
    "CallbackFunction": frozenset(
        {
            "WriteOwnLogs",
            "ReadDependencyStream",
            "ListStreams",
            "DeliverFailedBatches",
            "UploadTraces",
        }
    ),
    "SweeperFunction": frozenset({"WriteOwnLogs", "UploadTraces"}),
    # cirrus mode only (template_contract/test_cirrus_mode.py holds them to what Lambda needs)
    CIRRUS_EVENTS_FUNCTION: frozenset({"WriteOwnLogs", "PollCirrusEvents", "UploadTraces"}),
}
# What Lambda does with a function's role, per feature (Lambda developer guide: with-sqs,
# with-ddb, services-xray; AWS::Lambda::EventSourceMapping / EventInvokeConfig OnFailure).
LOG_WRITE_ACTIONS = ("logs:CreateLogStream", "logs:PutLogEvents")
SQS_POLL_ACTIONS = ("sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes")
STREAM_READ_ACTIONS = (
    "dynamodb:DescribeStream",
    "dynamodb:GetRecords",
    "dynamodb:GetShardIterator",
)
XRAY_UPLOAD_ACTIONS = ("xray:PutTraceSegments", "xray:PutTelemetryRecords")
DESTINATION_ACTIONS = {"SQS": "sqs:SendMessage"}
# Resource types that keep data, with what makes each encrypted at rest.
ENCRYPTED_AT_REST: dict[str, Callable[[dict[str, Any]], bool]] = {
    "AWS::SQS::Queue": lambda p: p.get("SqsManagedSseEnabled") is True or "KmsMasterKeyId" in p,
    "AWS::DynamoDB::Table": lambda p: p.get("SSESpecification", {}).get("SSEEnabled") is True,
    "AWS::S3::Bucket": lambda p: all(
        rule["ServerSideEncryptionByDefault"]["SSEAlgorithm"] in {"AES256", "aws:kms"}
        for rule in p["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    ),
    "AWS::SNS::Topic": lambda p: "KmsMasterKeyId" in p,
    # CloudWatch Logs encrypts every log group at rest; a KmsKeyId only changes the key.
    "AWS::Logs::LogGroup": lambda p: int(p["RetentionInDays"]) > 0,
}
# Data stores deliberately left without SSE; docs/security.md names each and says why.
# (The alarm topic is encrypted when AlarmTopicKmsKeyArn is given, as in EVERYTHING_ON;
# test_alarm_topic_is_encrypted_with_the_key_given checks it without one too.)
UNENCRYPTED_BY_DESIGN: set[str] = set()
# Resource types that keep no data of their own (or whose service always encrypts it).
NO_DATA_AT_REST = {
    "AWS::Serverless::Function",  # code and resource names; Lambda encrypts both
    "AWS::IAM::Role",
    "AWS::Serverless::StateMachine",  # execution history: Step Functions encrypts it
    "AWS::SQS::QueuePolicy",
    "AWS::S3::BucketPolicy",
    "AWS::CloudWatch::Alarm",
    "AWS::SNS::Subscription",  # cirrus mode: a topic's delivery to the cirrus-events queue
}


def security_doc(title: str) -> str:
    return markdown.section(SECURITY_DOC.read_text(encoding="utf-8"), title)


def grant_stacks(template: dict[str, Any]) -> list[Stack]:
    return [Stack(template), Stack(template, EVERYTHING_ON)]


def test_every_grant_names_each_action(template: dict[str, Any]) -> None:
    for stack in grant_stacks(template):
        grants = iam.role_grants(stack)
        holders = {grant.holder for grant in grants}
        machines = stack.of_type(STATE_MACHINE)
        conditions = {m: stack.resources[m].get("Condition") for m in machines}
        deployed = {m for m, c in conditions.items() if c is None or stack.condition(c)}
        assert holders >= {*FUNCTIONS, *deployed}
        for grant in grants:
            where = (grant.holder, grant.source)
            assert grant.effect == "Allow", where
            assert not {"NotAction", "NotResource", "NotPrincipal"} & set(grant.raw), where
            assert grant.actions, where
            assert grant.resources, where
            # no "*", no "dynamodb:*", no "dynamodb:Get*": one API action each
            assert [a for a in grant.actions if not iam.is_named_action(a)] == [], where


def test_star_resources_are_the_documented_allow_list(template: dict[str, Any]) -> None:
    star: dict[str, set[iam.Grant]] = {}
    for stack in grant_stacks(template):
        for grant in iam.role_grants(stack):
            if "*" in grant.resources:
                for action in grant.actions:
                    star.setdefault(action, set()).add(grant)
    # GIVEN every action some role holds on Resource "*"
    # THEN it is one of the allow-list (actions AWS offers no narrower resource for),
    # and every entry is still needed
    assert sorted(set(star) - STAR_RESOURCE_ACTIONS) == [], "a new wildcard resource"
    assert sorted(STAR_RESOURCE_ACTIONS - set(star)) == [], "a stale allow-list entry"
    # AND each entry has one row in docs/security.md, saying that AWS requires "*" and why
    rows = markdown.table_rows(security_doc("Wildcard resources"))
    for action in STAR_RESOURCE_ACTIONS:
        found = [row for row in rows if action in markdown.code_spans(" ".join(row))]
        assert len(found) == 1, f"docs/security.md needs one row for {action}"
        *_, answer, reason = found[0]
        assert answer.lower().startswith("yes"), action
        assert len(reason) > 20, f"say why {action} is on *"


def lambda_service_needs(stack: Stack, function: str) -> set[tuple[str, str]]:
    """(action, resource) pairs Lambda itself needs from the function's role."""
    properties = stack.resolved_properties(function)
    raw = stack.properties(function)
    (log_group,) = referenced_ids(raw["LoggingConfig"]["LogGroup"])
    assert stack.resources[log_group]["Type"] == "AWS::Logs::LogGroup", "its own log group"
    needs = {(action, stack.arn_of(log_group)) for action in LOG_WRITE_ACTIONS}
    if properties.get("Tracing") == "Active":
        needs |= {(action, "*") for action in XRAY_UPLOAD_ACTIONS}
    destinations = [
        properties.get("EventInvokeConfig", {}).get("DestinationConfig", {}).get(outcome)
        for outcome in ("OnSuccess", "OnFailure")
    ]
    for event in properties["Events"].values():
        source = event["Properties"]
        if event["Type"] == "SQS":
            needs |= {(action, source["Queue"]) for action in SQS_POLL_ACTIONS}
        elif event["Type"] == "DynamoDB":
            needs |= {(action, source["Stream"]) for action in STREAM_READ_ACTIONS}
            needs.add(("dynamodb:ListStreams", "*"))
            destinations.append(source.get("DestinationConfig", {}).get("OnFailure"))
        elif event["Type"] not in ("EventBridgeRule", "Schedule"):
            # EventBridgeRule and Schedule push: a resource policy on the function, no grant
            pytest.fail(f"{function}: teach lambda_service_needs the {event['Type']} event")
    assert "DeadLetterQueue" not in properties, "teach lambda_service_needs DeadLetterQueue"
    for destination in filter(None, destinations):
        needs.add((DESTINATION_ACTIONS[destination["Type"]], destination["Destination"]))
    return needs


@pytest.mark.parametrize("function", FUNCTIONS)
def test_lambda_service_statements_grant_exactly_what_lambda_needs(
    template: dict[str, Any], function: str
) -> None:
    for stack in grant_stacks(template):
        # GIVEN the function's explicit role: SAM adds nothing to it (no managed policy,
        # no event-source or destination statement), so the role must hold it all
        iam.assert_own_lambda_role(stack, function)
        assert "Policies" not in stack.properties(function)
        statements = {s.sid: s for s in stack.statements(function)}
        names = LAMBDA_SERVICE_STATEMENTS[function]
        assert names <= set(statements), sorted(names - set(statements))
        # WHEN the Lambda-service statements are read, pair by pair
        granted = [
            (action, resource)
            for sid in names
            for action in statements[sid].actions
            for resource in statements[sid].resources
        ]
        # THEN they grant exactly what its log group, tracing, event sources and failure
        # destinations need, each on that resource (only X-Ray and ListStreams on "*")
        assert len(granted) == len(set(granted)), "a pair granted twice"
        assert set(granted) == lambda_service_needs(stack, function)
        # AND nothing else in the role writes logs or reads an event source: the handler
        # statements hold only calls the code makes (the dynamic IAM test)
        service_actions = {
            *LOG_WRITE_ACTIONS,
            *SQS_POLL_ACTIONS,
            *STREAM_READ_ACTIONS,
            *XRAY_UPLOAD_ACTIONS,
            "dynamodb:ListStreams",
            "logs:CreateLogGroup",
        }
        code = [s for sid, s in statements.items() if sid not in names]
        assert not [(s.sid, a) for s in code for a in s.actions if a in service_actions]


def test_scoped_resources_stay_inside_the_stack(template: dict[str, Any]) -> None:
    stack = Stack(template, OTHER_STACK)
    prefix = f"{stack.parameter('Prefix')}-"
    outside = []
    for grant in iam.role_grants(stack):
        for resource in grant.resources:
            if resource == "*":
                continue  # test_star_resources_are_the_documented_allow_list
            fixed = re.split(r"[*?]", resource, maxsplit=1)[0]
            if prefix not in fixed:
                outside.append((grant.holder, grant.source, resource))
    # every ARN names this stack's resources before any wildcard in it
    assert outside == []


def test_docs_list_every_statement_of_every_role(template: dict[str, Any]) -> None:
    stack = Stack(template, EVERYTHING_ON)
    grants = iam.role_grants(stack)
    ids = set(stack.resources)

    def parse(rows: list[list[str]]) -> dict[str, tuple[set[str], set[str]]]:
        """Source (first code span of the first cell) → (roles, actions) of each row."""
        return {
            markdown.code_spans(source)[0]: (
                {span for span in markdown.code_spans(roles) if span in ids},
                {span for span in markdown.code_spans(actions) if iam.is_named_action(span)},
            )
            for source, roles, actions, *_ in rows
        }

    # the template's own statements: one row per holder and Sid, with exactly its actions
    own = markdown.table_rows(security_doc("Statements in the template"))
    documented = {}
    for row in own:
        (holder,) = markdown.code_spans(row[0])
        (sid,) = markdown.code_spans(row[1])
        documented[holder, sid] = {s for s in markdown.code_spans(row[2]) if iam.is_named_action(s)}
    expected = {
        (grant.holder, grant.source.removeprefix("Policies/")): set(grant.actions)
        for grant in grants
        if grant.source.startswith("Policies/")
    }
    assert documented == expected
    # what SAM adds: one row per managed policy or destination, naming its holders and actions
    added: dict[str, tuple[set[str], set[str]]] = {}
    for grant in grants:
        if not grant.source.startswith("Policies/"):
            source = grant.source.removeprefix("managed/")
            holders, actions = added.setdefault(source, (set(), set()))
            holders.add(grant.holder)
            actions.update(grant.actions)
    assert parse(markdown.table_rows(security_doc("Added by SAM"))) == added


def test_resource_policies_grant_named_actions_and_the_bucket_refuses_plain_http(
    stack: Stack,
) -> None:
    statements = iam.resource_policy_statements(stack)
    for logical_id, statement in statements:
        if statement["Effect"] == "Deny":
            continue  # a deny may be as wide as it likes
        actions = (
            statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        )
        assert all(iam.is_named_action(a) for a in actions), logical_id
        assert statement["Principal"] not in ("*", {"AWS": "*"}), logical_id
        assert "Condition" in statement, f"{logical_id}: scope a service principal to its source"
    # GIVEN the payload bucket
    bucket = stack.physical("PayloadBucket")
    arn = bucket.attributes["Arn"]
    policies = [
        stack.resolved_properties(p)
        for p in stack.of_type("AWS::S3::BucketPolicy")
        if stack.resolved_properties(p)["Bucket"] == bucket.ref
    ]
    (policy,) = policies
    # THEN every request over plain HTTP is denied, on the bucket and on each object
    assert {
        "Effect": "Deny",
        "Principal": "*",
        "Action": "s3:*",
        "Resource": [arn, f"{arn}/*"],
        "Condition": {"Bool": {"aws:SecureTransport": "false"}},
    } in [{k: v for k, v in s.items() if k != "Sid"} for s in policy["PolicyDocument"]["Statement"]]
    # AND nothing about it is public
    properties = stack.resolved_properties("PayloadBucket")
    assert set(properties["PublicAccessBlockConfiguration"].values()) == {True}
    assert len(properties["PublicAccessBlockConfiguration"]) == 4
    assert properties["OwnershipControls"] == {
        "Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]
    }
    assert properties["LifecycleConfiguration"]["Rules"]


def test_every_data_store_is_encrypted_at_rest(template: dict[str, Any]) -> None:
    stack = Stack(template, EVERYTHING_ON)
    doc = security_doc("Data at rest")
    kinds = {resource["Type"] for resource in stack.resources.values()}
    assert sorted(kinds - set(ENCRYPTED_AT_REST) - NO_DATA_AT_REST) == [], (
        "classify the new resource type: does it keep data, and how is it encrypted?"
    )
    for kind, encrypted in ENCRYPTED_AT_REST.items():
        for logical_id in stack.of_type(kind):
            # each store is named in docs/security.md, with its encryption
            assert f"`{logical_id}`" in doc, f"docs/security.md, Data at rest: {logical_id}"
            properties = stack.resolved_properties(logical_id)
            if logical_id in UNENCRYPTED_BY_DESIGN:
                assert not encrypted(properties), f"{logical_id} is encrypted now: update the doc"
            else:
                assert encrypted(properties), logical_id
    assert stack.of_type("AWS::SQS::Queue")
    assert stack.of_type("AWS::DynamoDB::Table")
    assert stack.of_type("AWS::S3::Bucket")


# ---------------------------------------------------------------------- hardening (issue 18)

DEPLOY_DOC = ROOT / "docs" / "deploy.md"
# Prefixes a reviewer would try: each pair where one is the other plus "-" and more is
# what a separator-admitting pattern let overlap ("deptrack" reaching "deptrack-b-*").
CANDIDATE_PREFIXES = (
    "deptrack",
    "deptrack-b",
    "deptrackb",
    "deptrack2",
    "d",
    "de",
    "a-b",
    "pipeline",
    "p" * 20,
    "p" * 19,
)
# ARNs a stack names but does not own by design: IAM (CloudFormation names the roles
# from the stack name; the tests' Stack gives every stack the same made-up role names)
# and AWS-managed policies. User-given ARNs (Extra*, keys, topics) are left unset.
SHARED_ARN = re.compile(r"^arn:[a-z-]+:iam::")
TEMPLATES = ("template", "transformed")


def document(name: str, template: dict[str, Any], transformed: dict[str, Any]) -> dict[str, Any]:
    return template if name == "template" else transformed


def prefix_pattern(template: dict[str, Any]) -> str:
    pattern: str = template["Parameters"]["Prefix"]["AllowedPattern"]
    return pattern


def admitted_prefixes(template: dict[str, Any]) -> list[str]:
    return [p for p in CANDIDATE_PREFIXES if re.fullmatch(prefix_pattern(template), p)]


def arn_strings(value: Any) -> Iterator[str]:
    """Every ARN (or ARN pattern) in resolved data; EventBridge prefixes as ``prefix*``."""
    if isinstance(value, dict):
        if set(value) == {"prefix"} and isinstance(value["prefix"], str):
            yield f"{value['prefix']}*"
            return
        for item in value.values():
            yield from arn_strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from arn_strings(item)
    elif isinstance(value, str):
        if value.startswith("arn:"):
            yield value
        elif value.lstrip().startswith("{"):  # an event pattern or filter kept as JSON text
            with contextlib.suppress(ValueError):
                yield from arn_strings(json.loads(value))


def stack_arns(stack: Stack) -> tuple[set[str], set[str]]:
    """(what the stack grants or matches, the names it owns) as ARNs or ARN patterns.

    The first: every ARN in its deployed resources' resolved properties (IAM statements,
    trust and resource-policy conditions, rule patterns, permissions, mappings,
    environment). The second: the same plus each resource's own ARN attributes.
    """
    used: set[str] = set()
    owned: set[str] = set()
    for logical_id, resource in stack.resources.items():
        condition = resource.get("Condition")
        if condition is not None and not stack.condition(condition):
            continue
        used.update(arn_strings(stack.resolved_properties(logical_id)))
        physical = stack.physical(logical_id)
        owned.update(v for v in (physical.ref, *physical.attributes.values()) if "arn:" in v[:4])
    used = {arn for arn in used if not SHARED_ARN.match(arn)}
    owned = {arn for arn in owned if not SHARED_ARN.match(arn)} | used
    return used, owned


def may_overlap(first: str, second: str) -> bool:
    """Whether some ARN could match both IAM-style patterns (``*``, ``?``); never misses one.

    Two patterns can share a match only if the literal text before the first wildcard of
    one starts the other's; a literal matches a pattern as IAM matches it.
    """
    fixed = [re.split(r"[*?]", arn, maxsplit=1)[0] for arn in (first, second)]
    wild = [fixed[0] != first, fixed[1] != second]
    if not any(wild):
        return first == second
    if not all(wild):
        literal, pattern = (first, second) if wild[1] else (second, first)
        return fnmatch.fnmatchcase(literal, pattern)
    return fixed[0].startswith(fixed[1]) or fixed[1].startswith(fixed[0])


def test_prefix_pattern_is_the_code_s_and_has_no_separator(
    template: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN the template's Prefix pattern
    pattern = prefix_pattern(template)
    # THEN it is the one the code validates against
    assert pattern == settings.PREFIX_PATTERN
    # AND no character it admits after the first is the separator "-" (or anything but
    # a lower-case letter or digit): "{p}-" then never starts "{q}-" for another prefix q
    admitted_tails = {chr(c) for c in range(32, 127) if re.fullmatch(pattern, f"a{chr(c)}")}
    assert admitted_tails == set("abcdefghijklmnopqrstuvwxyz0123456789")
    assert re.fullmatch(pattern, "a" * 20)
    assert not re.fullmatch(pattern, "a" * 21)
    # AND the code refuses a prefix the template refuses
    monkeypatch.setenv(settings.ENV_STATE_TABLE, "t")
    monkeypatch.setenv(settings.ENV_DEPENDENCY_TABLE, "d")
    monkeypatch.setenv(settings.ENV_WORKFLOW_ARN_PREFIX, "arn:aws:states:::stateMachine:x-")
    monkeypatch.setenv(settings.ENV_PREFIX, "deptrack-b")
    with pytest.raises(ConfigurationError):
        settings.Settings.from_env()
    monkeypatch.setenv(settings.ENV_PREFIX, "deptrackb")
    assert settings.Settings.from_env().prefix == "deptrackb"


@pytest.mark.parametrize("name", TEMPLATES)
def test_no_two_prefixes_reach_each_others_names(
    template: dict[str, Any], transformed: dict[str, Any], name: str
) -> None:
    # GIVEN two stacks in one account and region, for every pair of admitted prefixes
    doc = document(name, template, transformed)
    prefixes = admitted_prefixes(template)
    assert len(prefixes) >= 6
    arns = {
        p: stack_arns(Stack(doc, {"Prefix": p, "AlarmEmail": "ops@example.com"})) for p in prefixes
    }
    crossings = [
        (mine, theirs, pattern, name_)
        for mine in prefixes
        for theirs in prefixes
        if mine != theirs
        for pattern in arns[mine][0]
        for name_ in arns[theirs][1]
        if may_overlap(pattern, name_)
    ]
    # THEN no ARN or pattern one grants or matches (IAM, trust and queue policies, the
    # status-change rule, permissions) can match a name or pattern of the other
    assert crossings[:5] == []
    # AND the check sees the patterns that would cross: the managed workflows and the rule
    used = arns["deptrack"][0]
    assert f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:deptrack-*" in used
    assert f"arn:aws:states:{REGION}:{ACCOUNT}:execution:deptrack-*:*" in used


@pytest.mark.parametrize("name", TEMPLATES)
def test_tables_are_retained_and_protected_from_deletion(
    template: dict[str, Any], transformed: dict[str, Any], name: str
) -> None:
    doc = document(name, template, transformed)
    for logical_id in Stack(doc).of_type("AWS::DynamoDB::Table"):
        resource = doc["Resources"][logical_id]
        # CloudFormation keeps the table (and its waits) on stack deletion and when an
        # update would replace it (DynamoDB tables take no Snapshot policy)
        assert resource["DeletionPolicy"] == "Retain", logical_id
        assert resource["UpdateReplacePolicy"] == "Retain", logical_id
        # AND deletion protection is on unless the parameter turns it off
        protected = Stack(doc).resolved_properties(logical_id)
        assert protected["DeletionProtectionEnabled"] is True, logical_id
        off = Stack(doc, {"TableDeletionProtection": "false"}).resolved_properties(logical_id)
        assert off["DeletionProtectionEnabled"] is False, logical_id


def stack_policy_allows(policy: dict[str, Any], action: str, logical_id: str) -> bool:
    """A CloudFormation stack policy's verdict: an explicit Deny wins; nothing allowed is denied."""

    def applies(statement: dict[str, Any]) -> bool:
        actions = (
            statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        )
        resources = statement["Resource"]
        resources = resources if isinstance(resources, list) else [resources]
        assert statement["Principal"] == "*", "a stack policy's principal is always *"
        return any(fnmatch.fnmatchcase(action, a) for a in actions) and any(
            fnmatch.fnmatchcase(f"LogicalResourceId/{logical_id}", r) for r in resources
        )

    verdicts = {s["Effect"] for s in policy["Statement"] if applies(s)}
    return "Allow" in verdicts and "Deny" not in verdicts


def test_a_prefix_change_is_refused_by_the_documented_stack_policy(
    template: dict[str, Any],
) -> None:
    # GIVEN the stack policy docs/deploy.md ("Changing Prefix") has you set once
    section = markdown.section(DEPLOY_DOC.read_text(encoding="utf-8"), "Changing Prefix")
    (block,) = re.findall(r"```json\n(.*?)```", section, flags=re.DOTALL)
    policy = json.loads(block)
    before, after = Stack(template), Stack(template, {"Prefix": "renamed"})
    tables = before.of_type("AWS::DynamoDB::Table")
    # WHEN Prefix changes, the tables' names change: CloudFormation replaces them (a new
    # TableName is a replacement), and the functions would read new, empty tables
    for table in tables:
        assert before.physical(table).ref != after.physical(table).ref, table
    # THEN the policy refuses replacing or removing either table, so CloudFormation fails
    # the whole update and rolls it back before any wait is stranded
    for table in tables:
        assert not stack_policy_allows(policy, "Update:Replace", table), table
        assert not stack_policy_allows(policy, "Update:Delete", table), table
        # AND in-place changes (the stream view type, deletion protection) still deploy
        assert stack_policy_allows(policy, "Update:Modify", table), table
    # AND every other resource may still be modified, replaced and removed
    for logical_id in set(before.resources) - set(tables):
        for action in ("Update:Modify", "Update:Replace", "Update:Delete"):
            assert stack_policy_allows(policy, action, logical_id), (action, logical_id)


@pytest.mark.parametrize("name", TEMPLATES)
def test_the_stream_carries_new_images_only(
    template: dict[str, Any], transformed: dict[str, Any], name: str
) -> None:
    # GIVEN the dependency table as deployed and as the embedded stack creates it
    stack = Stack(document(name, template, transformed))
    deployed = stack.resolved_properties("DependencyTable")["StreamSpecification"]
    local = table_schema.dependency_table_definition("t")["StreamSpecification"]
    # THEN both write new images only: the one image the callback reads and filters on
    assert deployed == {"StreamViewType": "NEW_IMAGE"}
    assert local == {"StreamEnabled": True, "StreamViewType": "NEW_IMAGE"}
    assert set(CALLBACK_STREAM_FILTER["dynamodb"]) == {"NewImage"}
    # AND no code reads an old image (it would be one more copy of every task token)
    readers = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "src").rglob("*.py")
        if "OldImage" in path.read_text(encoding="utf-8")
    ]
    assert readers == []


def state_machine_trust(stack: Stack, logical_id: str) -> list[dict[str, Any]]:
    role = stack.role_of(logical_id)
    assert role is not None, f"{logical_id} needs its own AWS::IAM::Role"
    statements: list[dict[str, Any]] = stack.resolved_properties(role)["AssumeRolePolicyDocument"][
        "Statement"
    ]
    return statements


def test_state_machine_roles_are_explicit_and_trust_only_their_own_machine(
    template: dict[str, Any],
) -> None:
    # GIVEN another prefix in another region (the condition must follow both)
    stack = Stack(template, OTHER_STACK, region="eu-west-1")
    roles = set()
    for logical_id in stack.of_type(STATE_MACHINE):
        # THEN each state machine runs with a role of the template's own, used by it alone
        role = stack.role_of(logical_id)
        assert role not in roles
        roles.add(role)
        assert "Policies" not in stack.properties(logical_id)
        assert "ManagedPolicyArns" not in stack.properties(str(role))
        # AND Step Functions may assume it only for that state machine, in this account
        # (the confused-deputy guard of the Step Functions developer guide)
        assert state_machine_trust(stack, logical_id) == [
            {
                "Effect": "Allow",
                "Principal": {"Service": "states.amazonaws.com"},
                "Action": "sts:AssumeRole",
                "Condition": {
                    "StringEquals": {"aws:SourceAccount": ACCOUNT},
                    "ArnEquals": {"aws:SourceArn": stack.physical(logical_id).ref},
                },
            }
        ]
        # AND Step Functions' own statements are log delivery and X-Ray upload on "*",
        # X-Ray no wider than the AWSXrayWriteOnlyAccess SAM used to attach
        statements = {s.sid: s for s in stack.statements(logical_id)}
        for sid, actions in SFN_SERVICE_STATEMENTS.items():
            assert set(statements[sid].actions) == actions, (logical_id, sid)
            assert statements[sid].resources == ("*",), (logical_id, sid)
        assert set(iam.MANAGED_POLICIES["AWSXrayWriteOnlyAccess"]) >= SFN_XRAY_ACTIONS
    # AND SAM adds nothing to any role of the stack
    assert [g for g in iam.role_grants(Stack(template, EVERYTHING_ON)) if g.sam_managed] == []


@pytest.mark.parametrize("name", TEMPLATES)
def test_every_queue_refuses_plain_http(
    template: dict[str, Any], transformed: dict[str, Any], name: str
) -> None:
    stack = Stack(document(name, template, transformed), EVERYTHING_ON)
    queues = stack.of_type("AWS::SQS::Queue")
    assert (
        len(queues) == 10
    )  # with cirrus mode's cirrus-events queue, its DLQ and the subscription's
    policies = {
        logical_id: stack.resolved_properties(logical_id)
        for logical_id in stack.of_type("AWS::SQS::QueuePolicy")
    }
    for queue in queues:
        # GIVEN the one policy of each queue (SQS keeps one per queue)
        physical = stack.physical(queue)
        (policy,) = [p for p in policies.values() if physical.ref in p["Queues"]]
        statements = [
            {k: v for k, v in s.items() if k != "Sid"}
            for s in policy["PolicyDocument"]["Statement"]
        ]
        # THEN it denies every request to that queue made without TLS, whoever makes it
        assert {
            "Effect": "Deny",
            "Principal": "*",
            "Action": "sqs:*",
            "Resource": physical.attributes["Arn"],
            "Condition": {"Bool": {"aws:SecureTransport": "false"}},
        } in statements, queue
    # AND the update-state DLQ keeps admitting its EventBridge rule beside the deny
    dlq = policies["UpdateStateDlqPolicy"]["PolicyDocument"]["Statement"]
    assert [s["Sid"] for s in dlq] == ["StatusChangeRuleDeadLetters", "DenyInsecureTransport"]


def test_alarm_topic_is_encrypted_with_the_key_given(template: dict[str, Any]) -> None:
    email = {"AlarmEmail": "ops@example.com"}
    # GIVEN a customer-managed key: the topic the stack creates is encrypted with it
    keyed = Stack(template, {**email, "AlarmTopicKmsKeyArn": ALARM_KEY})
    assert keyed.resolved_properties("AlarmTopic")["KmsMasterKeyId"] == ALARM_KEY
    # AND without one it is not (alias/aws/sns would not let CloudWatch publish)
    assert "KmsMasterKeyId" not in Stack(template, email).resolved_properties("AlarmTopic")
    # AND the parameter takes a key ARN only: not an alias, not the AWS-managed SNS key
    pattern = template["Parameters"]["AlarmTopicKmsKeyArn"]["AllowedPattern"]
    assert re.fullmatch(pattern, "")
    assert re.fullmatch(pattern, ALARM_KEY)
    assert re.fullmatch(pattern, f"arn:aws:kms:{REGION}:{ACCOUNT}:key/mrk-0123456789abcdef")
    for refused in ("alias/aws/sns", f"arn:aws:kms:{REGION}:{ACCOUNT}:alias/aws/sns", "1234"):
        assert not re.fullmatch(pattern, refused), refused
    # AND docs/security.md gives the key policy statement CloudWatch needs to publish
    section = security_doc("Alarm topic key")
    (block,) = re.findall(r"```json\n(.*?)```", section, flags=re.DOTALL)
    statement = json.loads(block)
    assert statement["Effect"] == "Allow"
    assert statement["Principal"] == {"Service": "cloudwatch.amazonaws.com"}
    assert set(statement["Action"]) == {"kms:Decrypt", "kms:GenerateDataKey*"}


# ---------------------------------------------------------------------- event sources


def test_update_state_rule_is_the_code_pattern(template: dict[str, Any]) -> None:
    stack = Stack(template, OTHER_STACK, region="eu-west-1")
    rule = event_properties(stack, "UpdateStateFunction", "EventBridgeRule")
    prefix = environment(stack, "UpdateStateFunction")[settings.ENV_WORKFLOW_ARN_PREFIX]
    assert rule["Pattern"] == update_state_event_pattern(prefix)
    assert prefix == f"arn:aws:states:eu-west-1:{ACCOUNT}:stateMachine:pipeline-"
    # a terminal status change of a managed machine matches; others do not
    event = load_event("eventbridge_status_change.json")
    event["detail"]["stateMachineArn"] = f"{prefix}pass"
    assert matches(rule["Pattern"], event)
    event["detail"]["status"] = "RUNNING"
    assert not matches(rule["Pattern"], event)
    # failures end in the DLQ, whether delivery or the function failed
    dlq = stack.arn_of("UpdateStateDlq")
    assert rule["DeadLetterConfig"] == {"Arn": dlq}
    assert 0 < rule["RetryPolicy"]["MaximumRetryAttempts"] <= 185
    invoke = stack.resolved_properties("UpdateStateFunction")["EventInvokeConfig"]
    assert invoke["DestinationConfig"]["OnFailure"] == {"Type": "SQS", "Destination": dlq}
    statements = stack.resolved_properties("UpdateStateDlqPolicy")["PolicyDocument"]["Statement"]
    (allow,) = [s for s in statements if s["Effect"] == "Allow"]  # beside the TLS-only deny
    rule_arn = f"arn:aws:events:eu-west-1:{ACCOUNT}:rule/{rule['RuleName']}"
    assert allow["Condition"] == {"ArnEquals": {"aws:SourceArn": rule_arn}}


def test_callback_stream_mapping(stack: Stack) -> None:
    mapping = event_properties(stack, "CallbackFunction", "DynamoDB")
    assert stream_filter(stack) == CALLBACK_STREAM_FILTER
    assert mapping["Stream"] == stack.physical("DependencyTable").attributes["StreamArn"]
    assert mapping["BisectBatchOnFunctionError"] is True
    assert 0 <= mapping["MaximumRetryAttempts"] <= 100, "bounded retries"
    assert mapping["DestinationConfig"]["OnFailure"] == {
        "Type": "SQS",
        "Destination": stack.arn_of("CallbackFailureQueue"),
    }


def stream_record(change: Callable[[dict[str, Any]], object] | None = None) -> dict[str, Any]:
    record: dict[str, Any] = load_event("ddb_stream_waiter.json")["Records"][0]
    if change is not None:
        change(record)
    return record


def terminal_record(state: str) -> dict[str, Any]:
    record = stream_record()
    record["dynamodb"]["NewImage"]["workflow_state"] = {"S": state}
    return record


@pytest.mark.parametrize(
    ("record", "passes"),
    [
        *[
            pytest.param(terminal_record(state), True, id=f"modify-{state}")
            for state in ("SUCCEEDED", "FAILED", "INVALID", "ABORTED")
        ],
        pytest.param(stream_record(lambda r: r.update(eventName="INSERT")), True, id="insert"),
        pytest.param(
            stream_record(
                lambda r: r["dynamodb"]["NewImage"].update(workflow_state={"S": "PROCESSING"})
            ),
            False,
            id="processing",
        ),
        pytest.param(
            stream_record(
                lambda r: r["dynamodb"]["NewImage"].update(notified_at={"S": "2026-11-01"})
            ),
            False,
            id="notified",
        ),
        pytest.param(
            stream_record(lambda r: (r.update(eventName="REMOVE"), r["dynamodb"].pop("NewImage"))),
            False,
            id="ttl-remove",
        ),
    ],
)
def test_stream_filter_passes_only_terminal_unnotified_rows(
    stack: Stack, record: dict[str, Any], *, passes: bool
) -> None:
    assert matches(stream_filter(stack), record) is passes


# ---------------------------------------------------------------------- alarms and outputs


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


# ---------------------------------------------------------------------- IAM against real calls


@dataclass
class Call:
    """One AWS API call a handler made, named as IAM names it."""

    function: str
    action: str
    params: dict[str, Any]


SQS_BATCH_CALLS = frozenset(
    {"SendMessageBatch", "DeleteMessageBatch", "ChangeMessageVisibilityBatch"}
)


@dataclass
class Recorder:
    """Records the calls made through the handlers' cached clients, per function."""

    function: str | None = None
    calls: list[Call] = field(default_factory=list)
    images: list[dict[str, Any]] = field(default_factory=list)
    record_fields: set[str] = field(default_factory=set)  # keys of the stream records' "dynamodb"
    # Given: called with a function's logical id before it runs, when the previous
    # invocation was another function's (cirrus mode: each runs with its own variables).
    switch: Callable[[str], None] | None = None
    _environment_of: str | None = None

    def hook(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        function = self.function or "<outside a handler>"
        if model.name == "TransactWriteItems":
            # IAM authorizes each item of a transaction as its own action.
            for entry in params["TransactItems"]:
                (kind, op), *_ = entry.items()
                action = "dynamodb:" + TRANSACTION_ACTIONS[kind]
                self.calls.append(Call(function, action, {"TableName": op["TableName"]}))
            return
        # SQS authorizes a batch call as its single action (sqs:SendMessage for
        # SendMessageBatch): IAM has no sqs:*Batch actions.
        name = model.name.removesuffix("Batch") if model.name in SQS_BATCH_CALLS else model.name
        action = f"{model.service_model.signing_name}:{name}"
        self.calls.append(Call(function, action, dict(params)))

    def handler(self, stack: Stack, logical_id: str) -> Callable[..., Any]:
        name = stack.physical(logical_id).ref

        def invoke(event: dict[str, Any], _context: object = None) -> Any:
            if logical_id == "CallbackFunction":
                self.images.extend(r["dynamodb"].get("NewImage", {}) for r in event["Records"])
                self.record_fields.update(key for r in event["Records"] for key in r["dynamodb"])
            if self.switch is not None and self._environment_of != logical_id:
                self.switch(logical_id)
                self._environment_of = logical_id
            self.function = logical_id
            try:
                return HANDLERS[logical_id](event, LocalContext(function_name=name))
            finally:
                self.function = None

        return invoke


# What IAM checks for each kind of TransactWriteItems entry.
TRANSACTION_ACTIONS = {
    "Put": "PutItem",
    "Update": "UpdateItem",
    "Delete": "DeleteItem",
    "ConditionCheck": "ConditionCheckItem",
}

# Statements granted ahead of the code that uses them: (function, Sid).
AWAITING_CODE: set[tuple[str, str]] = set()
# Statements S3 itself needs for a call the code makes, on no call of their own: (function, Sid).
# GetObject of a missing key answers NoSuchKey only to a caller allowed s3:ListBucket (else
# AccessDenied); the sweeper's first run finds no cursor and must tell the two apart.
IMPLIED_BY_S3: set[tuple[str, str]] = {("SweeperFunction", "FindCursor")}

# The services whose clients get the recorder; a handler building any other
# client fails the test (clients.client's cache grows) instead of going unseen.
RECORDED_SERVICES = ("dynamodb", "stepfunctions", "s3", "sqs", "sns", "events", "lambda")


def reset_handlers() -> None:
    clients.client.cache_clear()
    reset_flows()


def reset_flows() -> None:
    """Forget the settings and the flows built on them (the recorded clients stay)."""
    settings.get_settings.cache_clear()
    process.process_flow.cache_clear()
    update_state.update_state_flow.cache_clear()
    callback.callback_flow.cache_clear()
    sweeper.sweeper_flow.cache_clear()
    cirrus_events.cirrus_events_flow.cache_clear()


@dataclass
class Deployment:
    """The template's resources on moto, its handlers behind the recorder, and the pumps."""

    stack: Stack
    recorder: Recorder
    sfn: Any
    s3: Any
    dynamodb: Any
    sqs: Any
    pumps: list[SqsPump | ExecutionPump | StreamPump]
    cirrus: CirrusDeployment | None = None  # cirrus mode: cirrus's resources in moto
    session: Any = None

    def pump(self) -> int:
        """One round of every pump; how many events they delivered."""
        return sum(pump.pump_once() for pump in self.pumps)

    def settle(self) -> None:
        prefix = f"{self.stack.parameter('Prefix')}-"

        def running() -> bool:
            for machine in self.sfn.list_state_machines()["stateMachines"]:
                if (
                    machine["name"].startswith(prefix)
                    and self.sfn.list_executions(
                        stateMachineArn=machine["stateMachineArn"], statusFilter="RUNNING"
                    )["executions"]
                ):
                    return True
            return False

        def quiet() -> bool:
            moved = sum(pump.pump_once() for pump in self.pumps)
            waiting = [
                self.sqs.get_queue_attributes(
                    QueueUrl=self.stack.physical(name).ref,
                    AttributeNames=["ApproximateNumberOfMessages"],
                )["Attributes"]["ApproximateNumberOfMessages"]
                for name in ("ProcessQueue", "JoinQueue")
            ]
            return moved == 0 and not running() and waiting == ["0", "0"]

        wait_until(quiet, timeout=30)

    def parents_by_token(self) -> dict[str, str]:
        """Task token → ARN of the state machine whose execution holds it."""
        table = self.stack.physical("DependencyTable").ref
        parents = {}
        for item in self.dynamodb.scan(TableName=table)["Items"]:
            if "task_token" in item and "parent_execution" in item:
                execution = item["parent_execution"]["S"]
                machine = execution.replace(":execution:", ":stateMachine:").rpartition(":")[0]
                parents[item["task_token"]["S"]] = machine
        return parents


@pytest.fixture
def deployment(template: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Iterator[Deployment]:
    with deployed(template, monkeypatch) as running:
        yield running


def function_environments(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> Callable[[str], None] | None:
    """Set the functions' variables; in cirrus mode, what sets one function's before it runs.

    In normal mode every function's variables are the same, and are set once here. In cirrus
    mode they differ (the cirrus variables reach the process, sweeper and cirrus-events
    functions only), so each handler runs with exactly its own function's variables.
    """
    cirrus_mode = stack.condition("CirrusMode")
    functions = (*FUNCTIONS, CIRRUS_EVENTS_FUNCTION) if cirrus_mode else FUNCTIONS
    environments = {function: environment(stack, function) for function in functions}
    for name in setting_variables() | POWERTOOLS_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    if not cirrus_mode:
        variables: dict[str, str] = {}
        for function in FUNCTIONS:
            for name, value in environments[function].items():
                assert variables.setdefault(name, value) == value, f"{name} differs"
        for name, value in variables.items():
            monkeypatch.setenv(name, value)
        return None

    def switch(function: str) -> None:
        for name in setting_variables() | POWERTOOLS_VARIABLES:
            monkeypatch.delenv(name, raising=False)
        for name, value in environments[function].items():
            monkeypatch.setenv(name, value)
        reset_flows()

    return switch


@contextlib.contextmanager
def deployed(
    template: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
    parameters: dict[str, str] | None = None,
) -> Iterator[Deployment]:
    """The stack ``parameters`` deploy, on moto, its handlers behind the recorder.

    Each handler runs with its function's variables (``function_environments``). In cirrus
    mode moto also holds cirrus's deployment, laid out as cirrus's CloudFormation lays it out
    (``CirrusDeployment``, no cirrus code), with the template's subscription on its topic.
    """
    stack = Stack(template, parameters or {})
    cirrus_mode = stack.condition("CirrusMode")
    switch = function_environments(stack, monkeypatch)
    reset_handlers()
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        session = boto3.session.Session()
        dynamodb: Any = session.client("dynamodb")
        sqs: Any = session.client("sqs")
        s3: Any = session.client("s3")
        sfn: Any = session.client("stepfunctions")
        stream_arn = table_schema.create_tables(
            dynamodb,
            state_table=stack.physical("StateTable").ref,
            dependency_table=stack.physical("DependencyTable").ref,
        )
        queue = stack.physical("ProcessQueue")
        assert sqs.create_queue(QueueName=queue.attributes["QueueName"])["QueueUrl"] == queue.ref
        joins = stack.physical("JoinQueue")
        assert sqs.create_queue(QueueName=joins.attributes["QueueName"])["QueueUrl"] == joins.ref
        reports = stack.physical("StatusReportQueue")
        assert (
            sqs.create_queue(QueueName=reports.attributes["QueueName"])["QueueUrl"] == reports.ref
        )
        s3.create_bucket(Bucket=stack.physical("PayloadBucket").ref)
        for logical_id in stack.of_type(STATE_MACHINE):
            properties = stack.resolved_properties(logical_id)
            created = sfn.create_state_machine(
                name=properties["Name"],
                definition=rendered_definition(stack, logical_id),
                roleArn=f"arn:aws:iam::{ACCOUNT}:role/{logical_id}",
                type=properties.get("Type", "STANDARD"),
            )
            assert created["stateMachineArn"] == stack.physical(logical_id).ref
        cirrus = create_cirrus(stack, session) if cirrus_mode else None
        recorder = Recorder(switch=switch)
        for service in RECORDED_SERVICES:
            clients.client(service).meta.events.register("before-parameter-build", recorder.hook)
        pumps: list[SqsPump | ExecutionPump | StreamPump] = [
            SqsPump(
                sqs=sqs,
                queue_url=queue.ref,
                queue_arn=queue.attributes["Arn"],
                handler=recorder.handler(stack, "ProcessFunction"),
                region=REGION,
            ),
            # join_chunk messages, one per invocation as the template's trigger
            SqsPump(
                sqs=sqs,
                queue_url=joins.ref,
                queue_arn=joins.attributes["Arn"],
                handler=recorder.handler(stack, "ProcessFunction"),
                region=REGION,
                batch_size=1,
                name="joins",
            ),
            # Express workflows report their own end on the status-report queue
            SqsPump(
                sqs=sqs,
                queue_url=reports.ref,
                queue_arn=reports.attributes["Arn"],
                handler=recorder.handler(stack, "UpdateStateFunction"),
                region=REGION,
                function_name="update-state",
                name="reports",
            ),
            ExecutionPump(
                sfn=sfn,
                handler=recorder.handler(stack, "UpdateStateFunction"),
                prefix=str(stack.parameter("Prefix")),
                region=REGION,
                account=ACCOUNT,
            ),
            StreamPump(
                streams=session.client("dynamodbstreams"),
                stream_arn=stream_arn,
                handler=recorder.handler(stack, "CallbackFunction"),
                region=REGION,
                filter_pattern=stream_filter(stack),
            ),
        ]
        if cirrus_mode:
            events = stack.physical("CirrusEventsQueue")
            pumps.append(
                SqsPump(
                    sqs=sqs,
                    queue_url=events.ref,
                    queue_arn=events.attributes["Arn"],
                    handler=recorder.handler(stack, CIRRUS_EVENTS_FUNCTION),
                    region=REGION,
                    function_name="cirrus-events",
                    name="cirrus-events",
                )
            )
        yield Deployment(stack, recorder, sfn, s3, dynamodb, sqs, pumps, cirrus, session)
    reset_handlers()


def simulated(item_id: str, outcome: str = "succeed", **extra: Any) -> dict[str, Any]:
    """A payload for the stack's example workflow ``simulate``."""
    body = payload(item_id, workflow="simulate", **extra)
    body["process"][0]["tasks"] = {"simulate": {"seconds": 0, "outcome": outcome}}
    return body


def denied_calls(
    stack: Stack, calls: list[Call], parents: dict[str, str]
) -> list[tuple[str, str, str]]:
    """(function, action, resource) of every call its function's statements do not allow."""
    return [
        (call.function, call.action, resource)
        for call in calls
        for resource in call_resources(call, parents)
        if not stack.allowed(call.function, call.action, resource)
    ]


def call_resources(call: Call, parents: dict[str, str]) -> list[str]:
    """The resource ARNs IAM authorizes ``call`` against."""
    service = call.action.partition(":")[0]
    params = call.params
    if service == "dynamodb":
        tables = list(params["RequestItems"]) if "RequestItems" in params else [params["TableName"]]
        return [f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{table}" for table in tables]
    if service == "s3":
        return [f"arn:aws:s3:::{params['Bucket']}/{params['Key']}"]
    if service == "sqs":
        account, name = params["QueueUrl"].rstrip("/").split("/")[-2:]
        return [f"arn:aws:sqs:{REGION}:{account}:{name}"]
    if service == "states":
        for name in ("stateMachineArn", "executionArn"):
            if name in params:
                return [str(params[name])]
        if "taskToken" in params:
            return [parents[params["taskToken"]]]
    pytest.fail(f"teach call_resources the resource of {call.action}")


def untaken_paths(bucket: str, parent_map: str, parent_join: str) -> list[tuple[Any, str]]:
    """Process messages (body, message id) for the paths the two parents do not take."""
    late = {"task_token": "late-waiter", "parent_execution": parent_map}
    join: dict[str, Any] = {
        "join": {
            "task_token": "join-token",
            "join_id": "retried",
            "quorum": 1,
            "parent_execution": parent_join,
        },
        "payloads": [simulated("a")],
    }
    # the same join sent again by its parent's retry (a new token; the first one's task closed)
    retried = {**join, "join": {**join["join"], "task_token": "join-token-2"}}
    lost = {
        "join": {"task_token": "lost-join", "quorum": 1, "parent_execution": parent_join},
        "payloads": [simulated("b", "fail")],
    }
    big = simulated("big")
    big["features"][0]["properties"] = {"blob": "x" * 5000}
    huge = simulated("huge")
    huge["features"][0]["properties"] = {"blob": "x" * 300_000}  # over the execution limit
    chained = simulated("chained")
    chained["process"].append({"workflow": "simulate", "collections": ["next-step"]})
    huge_chain = simulated("huge-chain")
    huge_chain["features"][0]["properties"] = {"blob": "x" * 300_000}
    huge_chain["process"].append({"workflow": "simulate", "collections": ["huge-next"]})
    # ids under the 2,048-byte key limit whose list outgrows the join summary's bound
    members = [{**simulated(f"wide-{i}"), "id": f"wide-{i:02d}-" + "w" * 1_900} for i in range(18)]
    wide = {
        "join": {"task_token": "wide-join", "parent_execution": parent_join},
        "payloads": members,
    }
    # a member by reference: n is known only once the last chunk is read
    by_reference = {
        "join": {"task_token": "ref-join", "parent_execution": parent_join},
        "payloads": [simulated("e"), simulated("f"), {"url": f"s3://{bucket}/p/d.json"}],
    }
    # an Express child: it writes its output to the bucket and reports its end by pointer
    express = simulated("express")
    express["process"][0]["workflow"] = "simulate-express"
    x_id, y_id = (ProcessPayload.model_validate(simulated(n)).id for n in ("x", "y"))
    x_waits = {**simulated("y"), "callback": {**late, "task_token": "x", "waiter_payload_id": x_id}}
    y_waits = {**simulated("x"), "callback": {**late, "task_token": "y", "waiter_payload_id": y_id}}
    return [
        ({"url": f"s3://{bucket}/p/d.json"}, "s3-pointer"),
        (big, "big-result"),
        (express, "express"),
        (chained, "chained"),
        (huge, "huge-input"),
        (huge_chain, "huge-chain"),
        (wide, "wide-join"),
        (by_reference, "ref-join"),
        ({**simulated("a"), "callback": late}, "late-waiter"),
        ({"process": [{"workflow": "simulate"}], "callback": {"task_token": "bad"}}, "bad"),
        (join, "join"),
        (join, "join"),
        (retried, "retried-join"),
        (lost, "lost-join"),
        (x_waits, "x-waits"),
        (y_waits, "y-waits"),
    ]


def sweep_lost_callbacks(deployment: Deployment, resume_after: str) -> dict[str, Any]:
    """Un-notify, long ago, a success and a failure for each parent machine; run one sweep.

    The Map's waiter on "b", the late waiter on "a", the lost join and the wide join (whose
    summary goes by reference); the sweep continues a state-table pass after ``resume_after``.
    """
    stack, recorder = deployment.stack, deployment.recorder
    bucket = stack.physical("PayloadBucket").ref
    table = stack.physical("DependencyTable").ref
    failed_id = ProcessPayload.model_validate(simulated("b", "fail")).id
    lost = [
        {"payload_id": item["payload_id"], "waiter_id": item["waiter_id"]}
        for item in deployment.dynamodb.scan(TableName=table)["Items"]
        if item.get("task_token", {}).get("S") in {"wide-join", "lost-join", "late-waiter"}
        or (item["payload_id"]["S"] == failed_id and "task_token" in item)
    ]
    assert len(lost) == 4
    for key in lost:
        deployment.dynamodb.update_item(
            TableName=table,
            Key=key,
            UpdateExpression="SET resolved_at = :old REMOVE notified_at",
            ExpressionAttributeValues={":old": {"S": "2000-01-01T00:00:00+00:00"}},
        )
    deployment.s3.put_object(
        Bucket=bucket,
        Key=CURSOR_KEY,
        Body=SweepCursor(
            dependency_table=table,
            state_table=stack.physical("StateTable").ref,
            states={"payload_id": {"S": resume_after}},
        ).model_dump_json(),
    )
    schedule = scheduled_event(
        rule_arn=f"arn:aws:events:{REGION}:{ACCOUNT}:rule/deptrack-sweeper",
        region=REGION,
        account=ACCOUNT,
    )
    swept: dict[str, Any] = recorder.handler(stack, "SweeperFunction")(schedule)
    return swept


def test_every_aws_call_is_allowed_and_every_grant_is_used(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack, recorder = deployment.stack, deployment.recorder
    # Joins of more than two members register in chunks: the wide join below carries on
    # through join_chunk messages and a member list written to the bucket.
    monkeypatch.setenv(settings.ENV_JOIN_CHUNK_SIZE, "2")
    settings.get_settings.cache_clear()
    process.process_flow.cache_clear()
    # GIVEN two parents on the stack's own state machines: a Map over a succeeding and
    # a failing dependency, and a 1-of-2 join sharing the succeeding one
    parent_map = deployment.sfn.start_execution(
        stateMachineArn=stack.physical("WaitForDependenciesStateMachine").ref,
        name="parent-map",
        input=json.dumps({"dependencies": [simulated("a"), simulated("b", "fail")]}),
    )["executionArn"]
    parent_join = deployment.sfn.start_execution(
        stateMachineArn=stack.physical("WaitForJoinStateMachine").ref,
        name="parent-join",
        input=json.dumps({"dependencies": [simulated("a"), simulated("c")], "quorum": 1}),
    )["executionArn"]
    # WHEN the pumps feed the three handlers until everything rests
    deployment.settle()
    # THEN the parents resumed as the tracker told them
    described = deployment.sfn.describe_execution(executionArn=parent_map)
    assert (described["status"], described.get("error")) == ("FAILED", "DependencyFailed")
    assert deployment.sfn.describe_execution(executionArn=parent_join)["status"] == "SUCCEEDED"

    # AND the paths the parents did not take: an S3 pointer, a late waiter on a finished
    # payload (replay), an invalid message with a token, a join delivered twice, a
    # result too large to keep inline (it goes to the bucket), a two-step chain, a
    # payload too large for an execution input (it goes by reference), a chain whose next
    # step is too large for the queue (by reference too), a join whose summary is too
    # large for its callback output (by reference: long member ids), and two payloads
    # waiting on each other (the second wait is refused with DependencyCycle)
    process_handler = recorder.handler(stack, "ProcessFunction")
    bucket = stack.physical("PayloadBucket").ref
    deployment.s3.put_object(Bucket=bucket, Key="p/d.json", Body=json.dumps(simulated("d")))
    for body, message_id in untaken_paths(bucket, parent_map, parent_join):
        assert process_handler(sqs_event(body, ids=[message_id])) == {"batchItemFailures": []}
    # AND a repeated status change whose input EventBridge left out
    done = StateTable(deployment.dynamodb, stack.physical("StateTable").ref).get(
        ProcessPayload.model_validate(simulated("a")).id
    )
    assert done is not None
    assert done.state is PayloadState.SUCCEEDED
    assert done.execution_arn is not None
    event = status_change_event(
        deployment.sfn.describe_execution(executionArn=done.execution_arn),
        region=REGION,
        account=ACCOUNT,
    )
    event["detail"].update(input=None, inputDetails={"included": False})
    assert recorder.handler(stack, "UpdateStateFunction")(event) == {"action": "repeated"}
    deployment.settle()
    # AND a lease that ran out on a claim whose run's status change was lost: "big" (a result
    # too large to keep inline) looks claimed long ago and not started, so the next message
    # asks whether its workflow is Express, finds its run ended and records it
    big = simulated("big")
    big["features"][0]["properties"] = {"blob": "x" * 5000}
    deployment.dynamodb.update_item(
        TableName=stack.physical("StateTable").ref,
        Key={"payload_id": {"S": ProcessPayload.model_validate(big).id}},
        UpdateExpression="SET #state = :claimed, claimed_at = :old REMOVE execution_arn",
        ExpressionAttributeNames={"#state": "state"},
        ExpressionAttributeValues={
            ":claimed": {"S": "CLAIMED"},
            ":old": {"S": "2000-01-01T00:00:00+00:00"},
        },
    )
    assert process_handler(sqs_event(big, ids=["takeover"])) == {"batchItemFailures": []}
    deployment.settle()
    # AND a sweep, continuing an earlier pass of the state table, over callbacks the stream
    # left un-notified long ago
    swept = sweep_lost_callbacks(deployment, done.payload_id)
    assert (swept["found"], swept["parents_gone"] + swept["sent"]) == (4, 4), swept

    # THEN every call was allowed by that function's statements, on that resource
    calls = recorder.calls
    assert {call.function for call in calls} == set(FUNCTIONS)
    parents = deployment.parents_by_token()
    # an invalid message keeps no parent; this token came from a wait-for-dependencies
    parents["bad"] = stack.physical("WaitForDependenciesStateMachine").ref
    # the retried join's first token, whose row now holds the second: a wait-for-join's
    parents["join-token"] = parents["join-token-2"]
    assert denied_calls(stack, calls, parents) == []
    # AND every grant was needed: each (action, resource) of each statement was called
    # (the Lambda-service statements serve the event source mapping, log delivery, failure
    # destinations and X-Ray, not the code: test_lambda_service_statements_grant_exactly_
    # what_lambda_needs holds each of them to its resource instead)
    for function in FUNCTIONS:
        sids = {statement.sid for statement in stack.statements(function)}
        assert sids >= LAMBDA_SERVICE_STATEMENTS[function], function
    unused = [
        (function, statement.sid, action, pattern)
        for function in FUNCTIONS
        for statement in stack.statements(function)
        if statement.sid not in LAMBDA_SERVICE_STATEMENTS[function]
        for action in statement.actions
        for pattern in statement.resources
        if not any(
            call.function == function
            and call.action == action
            and any(fnmatch.fnmatchcase(r, pattern) for r in call_resources(call, parents))
            for call in calls
        )
    ]
    assert [u for u in unused if u[:2] not in AWAITING_CODE | IMPLIED_BY_S3] == []
    # a grant waits for its code only until the code uses it
    assert {u[:2] for u in unused} >= AWAITING_CODE
    assert clients.client.cache_info().currsize == len(RECORDED_SERVICES), "unwatched client"
    # AND the template's stream filter let through only terminal rows not yet notified
    assert recorder.images
    # the stream the schema creates (NEW_IMAGE, as deployed) carries no old image
    assert "NewImage" in recorder.record_fields
    assert "OldImage" not in recorder.record_fields
    assert all("notified_at" not in image for image in recorder.images)
    assert all(image["workflow_state"]["S"] != "PROCESSING" for image in recorder.images)


# ---------------------------------------------------------------------- IAM in cirrus mode

# cirrus-geo's own names, from CirrusPrefix alone: cirrus-state, cirrus-process,
# cirrus-workflow-event, cirrus-payload-{account}, root prefix "cirrus".
CIRRUS_MODE = {"CirrusPrefix": "cirrus"}
CIRRUS_WORKFLOW = "cog"
# cirrus names an event's execution by its console URL (the ARN after the last "/").
CONSOLE_EXECUTIONS = "https://console.aws.amazon.com/states/home#/v2/executions/details/"


def create_cirrus(stack: Stack, session: Any) -> CirrusDeployment:
    """cirrus's deployment as the parameters name it, and the template's subscription to it."""
    cirrus = CirrusDeployment(
        prefix=str(stack.parameter("CirrusPrefix")), region=REGION, account=ACCOUNT
    )
    cirrus.create(session.client)
    variables = environment(stack, "ProcessFunction")
    assert variables[settings.ENV_CIRRUS_STATE_TABLE] == cirrus.outputs["CirrusStateTableName"]
    assert (
        variables[settings.ENV_CIRRUS_PROCESS_QUEUE_URL] == cirrus.outputs["CirrusProcessQueueUrl"]
    )
    assert (
        variables[settings.ENV_CIRRUS_PAYLOAD_BUCKET] == cirrus.outputs["CirrusPayloadBucketName"]
    )
    events = stack.physical("CirrusEventsQueue")
    sqs = session.client("sqs")
    assert sqs.create_queue(QueueName=events.attributes["QueueName"])["QueueUrl"] == events.ref
    subscription = stack.resolved_properties("CirrusWorkflowEventSubscription")
    assert subscription["TopicArn"] == cirrus.outputs["CirrusWorkflowEventTopicArn"]
    assert subscription["Endpoint"] == events.attributes["Arn"]
    session.client("sns").subscribe(
        TopicArn=subscription["TopicArn"],
        Protocol=subscription["Protocol"],
        Endpoint=subscription["Endpoint"],
        Attributes={
            "RawMessageDelivery": str(subscription["RawMessageDelivery"]).lower(),
            "FilterPolicyScope": subscription["FilterPolicyScope"],
            "FilterPolicy": json.dumps(subscription["FilterPolicy"]),
        },
    )
    return cirrus


def for_cirrus(item_id: str, **extra: Any) -> dict[str, Any]:
    """A payload cirrus runs as its workflow ``cirrus-cog``."""
    return payload(item_id, workflow=CIRRUS_WORKFLOW, **extra)


def cirrus_id(item_id: str) -> str:
    return ProcessPayload.model_validate(for_cirrus(item_id)).id


@dataclass
class CirrusAtWork:
    """cirrus-geo's part, as data: what its process and update-state Lambdas write and announce.

    No cirrus code runs here (the main suite cannot import it; tests/cirrus runs the real
    Lambdas). For each payload on cirrus's process queue this writes cirrus's state item as
    ``StateDB`` does (claim appending the run's ARN, then PROCESSING, then the end), and after
    each write publishes the event ``WorkflowEventManager`` would, with its ``event_type``
    attribute. ``plan`` gives each run's end by item id: a state, ``"lost"`` (SUCCEEDED, its
    event never sent) or ``"refused"`` (no item, NOT_A_PROCESS_PAYLOAD).
    """

    deployment: Deployment
    plan: dict[str, list[str]]
    announced: list[str] = field(default_factory=list)

    @property
    def cirrus(self) -> CirrusDeployment:
        assert self.deployment.cirrus is not None
        return self.deployment.cirrus

    def step(self) -> int:
        """Take what is on cirrus's process queue; how many messages."""
        outputs = self.cirrus.outputs
        sqs = self.deployment.sqs
        messages = sqs.receive_message(
            QueueUrl=outputs["CirrusProcessQueueUrl"], MaxNumberOfMessages=10
        ).get("Messages", [])
        seen: set[str] = set()
        for message in messages:
            body = json.loads(message["Body"])
            if set(body) == {"url"}:
                bucket, _, key = body["url"].removeprefix("s3://").partition("/")
                stored = self.deployment.s3.get_object(Bucket=bucket, Key=key)["Body"].read()
                body = json.loads(stored)
            if body["id"] in seen:
                self.announce("DUPLICATE_ID_ENCOUNTERED", body["id"])
            else:
                seen.add(body["id"])
                self.run(body)
            sqs.delete_message(
                QueueUrl=outputs["CirrusProcessQueueUrl"], ReceiptHandle=message["ReceiptHandle"]
            )
        return len(messages)

    def run(self, body: dict[str, Any]) -> None:
        payload_id = body["id"]
        item_id = payload_id.rpartition("/")[2]
        item = self.item(payload_id)
        state = item["state_updated"]["S"].partition("_")[0] if item else None
        replace = bool(body["process"][0].get("replace"))
        if state in {"SUCCEEDED", "INVALID"} and not replace:
            self.announce(f"ALREADY_{state}", payload_id)
            return
        if state in {"CLAIMED", "PROCESSING"}:
            self.announce(f"ALREADY_{state}", payload_id)
            return
        runs = [entry["S"] for entry in item["executions"]["L"]] if item else []
        outcomes = self.plan[item_id]
        outcome = outcomes[min(len(runs), len(outcomes) - 1)]
        if outcome == "refused":
            self.announce("NOT_A_PROCESS_PAYLOAD", payload_id, error="no features")
            return
        machine = self.cirrus.state_machine_arn(CIRRUS_WORKFLOW)
        execution = f"{machine.replace(':stateMachine:', ':execution:')}:{item_id}-{len(runs) + 1}"
        runs.append(execution)
        self.write(payload_id, "CLAIMED", runs)
        self.announce("CLAIMED_PROCESSING", payload_id)
        self.write(payload_id, "PROCESSING", runs)
        self.announce("STARTED_PROCESSING", payload_id, execution=execution)
        end = "SUCCEEDED" if outcome == "lost" else outcome
        error = {"FAILED": "TaskFailed: it broke", "INVALID": "InvalidInput: bad"}.get(end)
        self.write(payload_id, end, runs, last_error=error)
        if outcome != "lost":
            self.announce(end, payload_id, execution=execution, error=error)

    def item(self, payload_id: str) -> dict[str, Any] | None:
        found: dict[str, Any] | None = self.deployment.dynamodb.get_item(
            TableName=self.cirrus.outputs["CirrusStateTableName"],
            Key={name: {"S": value} for name, value in cirrus_key(payload_id).items()},
            ConsistentRead=True,
        ).get("Item")
        return found

    def write(
        self, payload_id: str, state: str, runs: list[str], last_error: str | None = None
    ) -> None:
        now = datetime.now(UTC).isoformat()
        item: dict[str, Any] = {
            **{name: {"S": value} for name, value in cirrus_key(payload_id).items()},
            "state_updated": {"S": f"{state}_{now}"},
            "created": {"S": now},
            "updated": {"S": now},
            "executions": {"L": [{"S": run} for run in runs]},
        }
        if last_error is not None:
            item["last_error"] = {"S": last_error}
        self.deployment.dynamodb.put_item(
            TableName=self.cirrus.outputs["CirrusStateTableName"], Item=item
        )

    def announce(self, event_type: str, payload_id: str, **extra: str | None) -> None:
        """Publish as cirrus does: the event as the message, its type as an attribute."""
        event = {"event_type": event_type, "payload_id": payload_id, **extra}
        if event.get("execution"):
            event["execution"] = f"{CONSOLE_EXECUTIONS}{event['execution']}"
        self.deployment.session.client("sns").publish(
            TopicArn=self.cirrus.outputs["CirrusWorkflowEventTopicArn"],
            Message=json.dumps({k: v for k, v in event.items() if v}),
            MessageAttributes={"event_type": {"DataType": "String", "StringValue": event_type}},
        )
        self.announced.append(event_type)


def run_until(deployment: Deployment, cirrus: CirrusAtWork, done: Callable[[], bool]) -> None:
    """Pump the tracker and let cirrus work until ``done`` and nothing moves any more."""

    def quiet() -> bool:
        moved = deployment.pump() + cirrus.step()
        return moved == 0 and done()

    wait_until(quiet, timeout=30)


def cirrus_mode_grants(template: dict[str, Any]) -> set[tuple[str, str, str, str]]:
    """(function, Sid, action, resource) of each grant cirrus mode adds to a function's role."""

    def grants(stack: Stack, functions: tuple[str, ...]) -> set[tuple[str, str, str, str]]:
        return {
            (function, statement.sid, action, resource)
            for function in functions
            for statement in stack.statements(function)
            if statement.sid not in LAMBDA_SERVICE_STATEMENTS[function]
            for action in statement.actions
            for resource in statement.resources
        }

    cirrus = Stack(template, CIRRUS_MODE)
    normal = Stack(template)
    return grants(cirrus, (*FUNCTIONS, CIRRUS_EVENTS_FUNCTION)) - grants(normal, FUNCTIONS)


@pytest.fixture
def cirrus_deployment(
    template: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> Iterator[Deployment]:
    with deployed(template, monkeypatch, CIRRUS_MODE) as running:
        yield running


def test_every_cirrus_mode_call_is_allowed_and_every_cirrus_grant_is_used(
    template: dict[str, Any], cirrus_deployment: Deployment
) -> None:
    deployment = cirrus_deployment
    stack, recorder = deployment.stack, deployment.recorder
    # GIVEN cirrus at work beside the stack: "a" succeeds (again when a replace runs it),
    # "b" fails once and then succeeds, "c" succeeds but its event is lost, "huge" (over one
    # SQS message) succeeds, and cirrus refuses "r"
    cirrus = CirrusAtWork(
        deployment,
        plan={
            "a": ["SUCCEEDED"],
            "b": ["FAILED", "SUCCEEDED"],
            "c": ["lost"],
            "huge": ["SUCCEEDED"],
            "r": ["refused"],
        },
    )
    # AND two parents on the stack's own state machines: a Map over "a" and "b", and a
    # 1-of-2 join over "a" and "c"
    parent_map = deployment.sfn.start_execution(
        stateMachineArn=stack.physical("WaitForDependenciesStateMachine").ref,
        name="parent-map",
        input=json.dumps({"dependencies": [for_cirrus("a"), for_cirrus("b")]}),
    )["executionArn"]
    parent_join = deployment.sfn.start_execution(
        stateMachineArn=stack.physical("WaitForJoinStateMachine").ref,
        name="parent-join",
        input=json.dumps({"dependencies": [for_cirrus("a"), for_cirrus("c")], "quorum": 1}),
    )["executionArn"]

    def stopped(execution: str) -> bool:
        status: str = deployment.sfn.describe_execution(executionArn=execution)["status"]
        return status != "RUNNING"

    # WHEN the process function forwards them to cirrus, cirrus runs them and announces the
    # ends through the template's subscription, and the cirrus-events function resolves the
    # waiters
    run_until(deployment, cirrus, lambda: stopped(parent_map) and stopped(parent_join))
    # THEN the parents resumed as cirrus's items say
    described = deployment.sfn.describe_execution(executionArn=parent_map)
    assert (described["status"], described.get("error")) == ("FAILED", "DependencyFailed")
    assert deployment.sfn.describe_execution(executionArn=parent_join)["status"] == "SUCCEEDED"

    # AND the paths the parents did not take: a late waiter on a payload cirrus finished
    # (replayed from cirrus's item), a wait without forwarding, a payload over one SQS
    # message (by cirrus's bucket), a waiter on the failed "b" (it waits for the next run),
    # a replace of the succeeded "a", a payload cirrus refuses, and an id cirrus cannot key
    process_handler = recorder.handler(stack, "ProcessFunction")
    late = {"task_token": "late-waiter", "parent_execution": parent_map}
    huge = for_cirrus("huge")
    huge["features"][0]["properties"] = {"blob": "x" * 300_000}
    paths = [
        ({**for_cirrus("a"), "callback": late}, "replay"),
        ({"wait_for": cirrus_id("a"), "callback": {**late, "task_token": "wait-only"}}, "wait"),
        ({**huge, "callback": {**late, "task_token": "huge"}}, "huge"),
        ({**for_cirrus("b"), "callback": {**late, "task_token": "rerun"}}, "rerun"),
        (
            {
                **for_cirrus("a"),
                "process": [{"workflow": CIRRUS_WORKFLOW, "replace": True}],
                "callback": {**late, "task_token": "replace"},
            },
            "replace",
        ),
        ({**for_cirrus("r"), "callback": {**late, "task_token": "refused"}}, "refused"),
        (
            {**for_cirrus("k"), "id": "workflow-cog/key-abc", "callback": {"task_token": "bad"}},
            "bad",
        ),
    ]
    for body, message_id in paths:
        assert process_handler(sqs_event(body, ids=[message_id])) == {"batchItemFailures": []}
    run_until(deployment, cirrus, lambda: True)
    # AND a sweep, long after "c" ended in cirrus without a word: its waiting rows look old
    table = stack.physical("DependencyTable").ref
    for item in deployment.dynamodb.scan(TableName=table)["Items"]:
        if (
            item["payload_id"]["S"] == cirrus_id("c")
            and item["workflow_state"]["S"] == "PROCESSING"
        ):
            deployment.dynamodb.update_item(
                TableName=table,
                Key={"payload_id": item["payload_id"], "waiter_id": item["waiter_id"]},
                UpdateExpression="SET updated_at = :old",
                ExpressionAttributeValues={":old": {"S": "2000-01-01T00:00:00+00:00"}},
            )
    schedule = scheduled_event(
        rule_arn=f"arn:aws:events:{REGION}:{ACCOUNT}:rule/deptrack-sweeper",
        region=REGION,
        account=ACCOUNT,
    )
    swept = recorder.handler(stack, "SweeperFunction")(schedule)
    assert (swept["reconciled"], swept["reconciled_waiters"]) == (1, 1), swept
    run_until(deployment, cirrus, lambda: True)

    # THEN each waiter heard what cirrus's item (or its refusal) says
    rows = {
        item["task_token"]["S"]: item["workflow_state"]["S"]
        for item in deployment.dynamodb.scan(TableName=table)["Items"]
        if "task_token" in item
    }
    assert {token: rows[token] for token in ("late-waiter", "wait-only", "huge", "rerun")} == {
        "late-waiter": "SUCCEEDED",
        "wait-only": "SUCCEEDED",
        "huge": "SUCCEEDED",
        "rerun": "SUCCEEDED",  # the next run's outcome, not the failure it arrived after
    }
    assert (rows["replace"], rows["refused"]) == ("SUCCEEDED", "INVALID")
    # AND "huge" went to cirrus by an object under cirrus's tmp/ prefix
    forwarded = [
        call.params["Key"]
        for call in recorder.calls
        if call.action == "s3:PutObject"
        and call.params["Bucket"] == cirrus.cirrus.outputs["CirrusPayloadBucketName"]
    ]
    assert len(forwarded) == 1
    assert forwarded[0].startswith("cirrus/tmp/deptrack-forwarded/")
    assert {"CLAIMED_PROCESSING", "NOT_A_PROCESS_PAYLOAD", "SUCCEEDED"} <= set(cirrus.announced)
    # AND every call was allowed by that function's statements, on that resource
    calls = recorder.calls
    assert {"ProcessFunction", "SweeperFunction", CIRRUS_EVENTS_FUNCTION, "CallbackFunction"} <= {
        call.function for call in calls
    }
    parents = deployment.parents_by_token()
    parents["bad"] = stack.physical("WaitForDependenciesStateMachine").ref
    assert denied_calls(stack, calls, parents) == []
    # AND every grant cirrus mode adds was needed: each (action, resource) was called by
    # the function holding it (the cirrus-events function's Lambda-service statements are
    # held to what Lambda needs by template_contract/test_cirrus_mode.py instead)
    added = cirrus_mode_grants(template)
    assert {grant[0] for grant in added} == {
        "ProcessFunction",
        "SweeperFunction",
        CIRRUS_EVENTS_FUNCTION,
    }
    unused = [
        (function, sid, action, pattern)
        for function, sid, action, pattern in sorted(added)
        if not any(
            call.function == function
            and call.action == action
            and any(fnmatch.fnmatchcase(r, pattern) for r in call_resources(call, parents))
            for call in calls
        )
    ]
    assert unused == []
    assert clients.client.cache_info().currsize == len(RECORDED_SERVICES), "unwatched client"


def test_no_pointer_expires_before_the_longest_wait(template: dict[str, Any]) -> None:
    # GIVEN the payload bucket's lifecycle and the longest wait a parent can make: its
    # callback timeout (MaxWaitSeconds, or the parent's own), within a Standard execution's year
    parameters = template["Parameters"]
    day = 86_400
    longest_wait = max(int(parameters["MaxWaitSeconds"]["MaxValue"]), 365 * day)
    (rule,) = [
        r
        for r in template["Resources"]["PayloadBucket"]["Properties"]["LifecycleConfiguration"][
            "Rules"
        ]
        if "ExpirationInDays" in r
    ]
    # THEN the one expiry rule covers every object (pointers live under several prefixes),
    # and no allowed value of it ends a pointer's life before that wait plus a day
    assert "Prefix" not in rule
    assert "Filter" not in rule
    assert rule["ExpirationInDays"] == {"Ref": "PayloadRetentionDays"}
    assert int(parameters["PayloadRetentionDays"]["MinValue"]) * day >= longest_wait + day
