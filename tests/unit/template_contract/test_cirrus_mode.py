"""Cirrus mode of ``template.yaml``: beside a cirrus-geo v2 deployment, and gone without one.

With ``CirrusPrefix`` set the stack subscribes a queue of its own to cirrus's workflow-event
topic, runs the cirrus-events function on it, and lets the process, sweeper and cirrus-events
functions reach exactly three resources of the cirrus deployment: its state table (read), its
process queue (send) and two key prefixes of its payload bucket. With ``CirrusPrefix`` empty
(the default) the stack must be exactly the one without cirrus mode: the first test strips
every cirrus parameter, condition, resource, output and ``Fn::If`` branch from the template and
compares what both deploy, before and after the SAM transform.

The cirrus names the defaults derive are cirrus-geo 2.0.0's own CloudFormation
(``cloudformation/core/base.yaml``: ``${ResourcePrefix}-state``, ``-process``,
``-workflow-event``, ``-payload-${AWS::AccountId}``; ``cloudformation/main.yaml``:
``ResourcePrefix`` of 2 to 22 characters, ``PayloadRootPrefix`` ``cirrus``; and
``src/cirrus/lib/payload_bucket.py``: execution payloads under
``{root}/executions/{payload id}/{execution}/``).
"""

from __future__ import annotations

import copy
import importlib
import io
import json
import re
from typing import TYPE_CHECKING, Any, cast

import pytest

from dependency_tracker.cirrus.flow import CirrusAction, CirrusEvents
from dependency_tracker.cirrus.models import WorkflowEvent, WorkflowEventType
from dependency_tracker.cirrus.store import forwarded_prefix
from dependency_tracker.core import settings
from dependency_tracker_local import EmbeddedStack
from tests.unit.template_contract import iam, markdown
from tests.unit.template_contract import rules as template_rules
from tests.unit.template_contract.cfn import (
    ACCOUNT,
    REGION,
    ROOT,
    TEMPLATE_PATH,
    Stack,
    referenced_ids,
)
from tests.unit.template_contract.functions import (
    FUNCTIONS,
    POWERTOOLS_VARIABLES,
    environment,
    setting_variables,
)
from tests.unit.template_contract.lambda_service import lambda_service_needs
from tests.unit.template_contract.linting import lint
from tests.unit.template_contract.parameters import EVERYTHING_ON, OTHER_STACK
from tests.unit.template_contract.transformed import transform
from tests.unit.test_transformed_template import deployed_service_needs, mappings

if TYPE_CHECKING:
    from pathlib import Path

CIRRUS_FUNCTION = "CirrusEventsFunction"
CIRRUS_PREFIX = "my-cirrus"
CIRRUS = {"CirrusPrefix": CIRRUS_PREFIX}
# A cirrus deployment named otherwise than cirrus's templates name it (another account and
# region for its queue and topic: only their ARNs say so).
CIRRUS_ELSEWHERE = {
    "CirrusPrefix": CIRRUS_PREFIX,
    "CirrusStateTableName": "legacy-cirrus-state",
    "CirrusProcessQueueArn": "arn:aws:sqs:eu-west-1:210987654321:legacy-process",
    "CirrusWorkflowEventTopicArn": "arn:aws:sns:eu-west-1:210987654321:legacy-workflow-event",
    "CirrusPayloadBucketName": "legacy-cirrus-payloads",
    "CirrusPayloadRootPrefix": "data/cirrus",
}
CIRRUS_VARIABLES = {
    "DEPTRACK_CIRRUS_STATE_TABLE",
    "DEPTRACK_CIRRUS_PROCESS_QUEUE_URL",
    "DEPTRACK_CIRRUS_PAYLOAD_BUCKET",
    "DEPTRACK_CIRRUS_PAYLOAD_ROOT_PREFIX",
}
# The functions that read cirrus's resources in cirrus mode (the rest never see them).
CIRRUS_READERS = ("ProcessFunction", "SweeperFunction", CIRRUS_FUNCTION)
# What Lambda itself does with the cirrus-events role: its queue, its log group, X-Ray.
CIRRUS_SERVICE_STATEMENTS = frozenset({"WriteOwnLogs", "PollCirrusEvents", "UploadTraces"})
# Parameter sets of normal mode, the first test's subjects.
NORMAL_MODES = [
    pytest.param({}, id="defaults"),
    pytest.param({k: v for k, v in EVERYTHING_ON.items() if k != "CirrusPrefix"}, id="extras"),
    pytest.param(OTHER_STACK, id="other-stack"),
]
CIRRUS_MODES = [
    pytest.param(CIRRUS, id="cirrus-defaults"),
    pytest.param(CIRRUS_ELSEWHERE, id="cirrus-named"),
]
DEPLOY_DOC = ROOT / "docs" / "deploy.md"
CIRRUS_DOC = ROOT / "docs" / "cirrus.md"
# The subscription's filter: cirrus-geo sets the message attribute "event_type" (DataType
# String, the type's name) on every workflow event it publishes (cirrus/lib/events.py,
# WorkflowEvent.sns_attributes, v1.0.0 to 2.0.0). The filter admits exactly the types the
# cirrus-events handler acts on: those that may end a payload, and cirrus's refusals.
EVENT_TYPE_ATTRIBUTE = "event_type"
ADMITTED_EVENT_TYPES = sorted(t.value for t in WorkflowEventType if t.may_end or t.refused)
# What the filter keeps off the queue: the events that only report progress (docs/cirrus.md).
PROGRESS_EVENT_TYPES = {
    "CLAIMED_PROCESSING",
    "STARTED_PROCESSING",
    "ALREADY_PROCESSING",
    "ALREADY_CLAIMED",
    "DUPLICATE_ID_ENCOUNTERED",
}
# SNS's filter policy constraints ("Filter policy constraints in Amazon SNS", SNS developer
# guide, subscription-filter-policy-constraints.html): at most five keys, at most 150 as the
# product of the numbers of values of its arrays, at most 256 KB of JSON; attribute-based
# policies (FilterPolicyScope MessageAttributes) take no nesting, and string matching is
# exact and case-sensitive.
SNS_FILTER_MAX_KEYS = 5
SNS_FILTER_MAX_COMBINATIONS = 150
SNS_FILTER_MAX_BYTES = 256 * 1024


def cirrus_names(stack: Stack) -> dict[str, str]:
    """The cirrus deployment's resources as the parameters name them (what the grants must name)."""
    p = {name: str(stack.parameter(name)) for name in stack.template["Parameters"]}
    prefix, account, region = p["CirrusPrefix"], stack.account, stack.region
    table = p["CirrusStateTableName"] or f"{prefix}-state"
    queue = p["CirrusProcessQueueArn"] or f"arn:aws:sqs:{region}:{account}:{prefix}-process"
    _, _, _, queue_region, queue_account, queue_name = queue.split(":")
    bucket = p["CirrusPayloadBucketName"] or f"{prefix}-payload-{account}"
    forwarded = forwarded_prefix(p["CirrusPayloadRootPrefix"])
    return {
        "table": table,
        "table_arn": f"arn:aws:dynamodb:{region}:{account}:table/{table}",
        "queue_arn": queue,
        "queue_url": f"https://sqs.{queue_region}.amazonaws.com/{queue_account}/{queue_name}",
        "topic_arn": p["CirrusWorkflowEventTopicArn"]
        or f"arn:aws:sns:{region}:{account}:{prefix}-workflow-event",
        "bucket": bucket,
        "root": p["CirrusPayloadRootPrefix"],
        "forwarded_arn": f"arn:aws:s3:::{bucket}/{forwarded}/*",
    }


def deployed(stack: Stack, section: str = "Resources") -> dict[str, Any]:
    """Each resource (or output) the stack creates, with its intrinsic functions resolved."""
    found = {}
    for logical_id, entry in stack.template.get(section, {}).items():
        condition = entry.get("Condition")
        if condition is not None and not stack.condition(condition):
            continue
        if section == "Resources":
            found[logical_id] = {
                "Type": entry["Type"],
                "Properties": stack.resolved_properties(logical_id),
                "DependsOn": entry.get("DependsOn"),
            }
        else:
            found[logical_id] = stack.resolve(entry["Value"])
    return found


# ---------------------------------------------------------------------- normal mode unchanged


def strip_cirrus_mode(template: dict[str, Any]) -> dict[str, Any]:
    """``template`` with every trace of cirrus mode taken out, as if it never had one.

    The ``Cirrus*`` parameters go, and with them every condition built on one, every
    resource, output and rule under such a condition (or naming such a parameter), their
    parameter group, and each ``Fn::If`` on such a condition, replaced by its ``false``
    branch. Whatever refers to a cirrus name afterwards fails the check below.
    """
    result = copy.deepcopy(template)
    parameters = {name for name in result["Parameters"] if name.startswith("Cirrus")}
    conditions = cirrus_conditions(result["Conditions"], parameters)
    for name in parameters:
        del result["Parameters"][name]
    for name in conditions:
        del result["Conditions"][name]
    removed = set()
    for section in ("Resources", "Outputs"):
        for name, entry in list(result.get(section, {}).items()):
            if entry.get("Condition") in conditions:
                del result[section][name]
                removed.add(name)
    for name, rule in list(result.get("Rules", {}).items()):
        if referenced_ids(rule) & parameters:
            del result["Rules"][name]
    interface = result["Metadata"]["AWS::CloudFormation::Interface"]
    interface["ParameterGroups"] = [
        group for group in interface["ParameterGroups"] if not set(group["Parameters"]) & parameters
    ]
    stripped: dict[str, Any] = false_branches(result, conditions)
    left = referenced_ids(stripped) & (parameters | removed)
    assert left == set(), f"cirrus names outside cirrus mode: {sorted(left)}"
    assert "Cirrus" not in json.dumps(stripped), "a cirrus name the strip did not reach"
    return stripped


def cirrus_conditions(conditions: dict[str, Any], parameters: set[str]) -> set[str]:
    """The conditions on a cirrus parameter, and those built on them."""
    found: set[str] = set()
    while True:
        more = {
            name
            for name, body in conditions.items()
            if referenced_ids(body) & parameters or condition_names(body) & found
        }
        if more == found:
            return found
        found = more


def condition_names(node: Any) -> set[str]:
    """Conditions a condition refers to (``{"Condition": name}``)."""
    if isinstance(node, list):
        return set().union(*(condition_names(item) for item in node))
    if isinstance(node, dict):
        if set(node) == {"Condition"} and isinstance(node["Condition"], str):
            return {node["Condition"]}
        return set().union(*(condition_names(value) for value in node.values()))
    return set()


def false_branches(node: Any, conditions: set[str]) -> Any:
    """``node`` with each ``Fn::If`` on one of ``conditions`` replaced by its false branch."""
    if isinstance(node, list):
        return [false_branches(item, conditions) for item in node]
    if isinstance(node, dict):
        if set(node) == {"Fn::If"} and node["Fn::If"][0] in conditions:
            return false_branches(node["Fn::If"][2], conditions)
        return {key: false_branches(value, conditions) for key, value in node.items()}
    return node


def test_strip_finds_every_cirrus_part(template: dict[str, Any]) -> None:
    # GIVEN the template with cirrus mode stripped
    stripped = strip_cirrus_mode(template)
    # THEN what went is the new parameters, their conditions and the cirrus-mode resources
    assert set(template["Parameters"]) - set(stripped["Parameters"]) == {
        "CirrusPrefix",
        "CirrusStateTableName",
        "CirrusProcessQueueArn",
        "CirrusWorkflowEventTopicArn",
        "CirrusPayloadBucketName",
        "CirrusPayloadRootPrefix",
    }
    assert set(template["Conditions"]) - set(stripped["Conditions"]) == {
        "CirrusMode",
        "HasCirrusStateTableName",
        "HasCirrusProcessQueueArn",
        "HasCirrusWorkflowEventTopicArn",
        "HasCirrusPayloadBucketName",
    }
    assert set(template["Resources"]) - set(stripped["Resources"]) == {
        "CirrusEventsQueue",
        "CirrusEventsDlq",
        "CirrusEventsQueuePolicy",
        "CirrusEventsDlqPolicy",
        "CirrusWorkflowEventSubscription",
        "CirrusEventsFunction",
        "CirrusEventsRole",
        "CirrusEventsLogGroup",
        "CirrusSubscriptionDlq",
        "CirrusSubscriptionDlqPolicy",
        "CirrusEventsDlqDepthAlarm",
        "CirrusEventsQueueAgeAlarm",
        "CirrusSubscriptionDlqDepthAlarm",
        "CirrusEventsErrorsAlarm",
    }
    assert set(template["Rules"]) - set(stripped["Rules"]) == {"CirrusPrefixIsNotPrefix"}
    # AND every resource kept is written exactly as before, but for those that take an Fn::If
    # on cirrus mode (the process and sweeper functions and roles, the throttles and
    # recursive-loop alarms)
    changed = {
        name
        for name, resource in stripped["Resources"].items()
        if resource != template["Resources"][name]
    }
    assert changed == {
        "ProcessFunction",
        "SweeperFunction",
        "ProcessRole",
        "SweeperRole",
        "ThrottlesAlarm",
        "RecursiveLoopAlarm",
    }


@pytest.mark.parametrize("parameters", NORMAL_MODES)
def test_normal_mode_deploys_exactly_the_stack_without_cirrus_mode(
    template: dict[str, Any], parameters: dict[str, str]
) -> None:
    # GIVEN the template, and the same template with cirrus mode stripped
    stripped = strip_cirrus_mode(template)
    for name, (source, without) in {
        "template": (template, stripped),
        "transformed": (transform(template), transform(stripped)),
    }.items():
        # WHEN both are deployed with CirrusPrefix empty (and these other parameters)
        current, baseline = Stack(source, parameters), Stack(without, parameters)
        assert current.condition("CirrusMode") is False
        # THEN they create the same resources, each with the same resolved properties,
        # and give the same outputs: cirrus mode leaves no trace (no variable, no statement,
        # no alarm metric) in normal mode, before and after the SAM transform
        assert deployed(current) == deployed(baseline), name
        assert deployed(current, "Outputs") == deployed(baseline, "Outputs"), name
        # AND the rules refuse and admit as before
        assert template_rules.refusals(source, parameters) == template_rules.refusals(
            without, parameters
        )


# ---------------------------------------------------------------------- parameters and names


def test_cirrus_prefix_takes_cirrus_geo_s_resource_prefixes(template: dict[str, Any]) -> None:
    pattern = template["Parameters"]["CirrusPrefix"]["AllowedPattern"]
    # cirrus-geo's own rule (cloudformation/main.yaml): 2-22 characters, a letter first,
    # then letters, digits and hyphens; its default "cirrus-sandbox"; empty is normal mode.
    # And FilmDrop's resource_prefix: today 2-22 lowercase characters that may start with a
    # digit; before March 2025 "fd-{project}-{environment}-cirrus" cut at 63 characters
    # (which may end in "-")
    filmdrop = ("1cirrus", "fd-myproject-production-cirrus", "fd-" + "x" * 59 + "-", "a" * 63)
    for admitted in ("", "cirrus-sandbox", "ab", "a" * 22, "Cirrus-Prod-1", *filmdrop):
        assert re.fullmatch(pattern, admitted), admitted
    for refused in ("a", "a" * 64, "-cirrus", "cirrus_prod", "cirrus.prod"):
        assert not re.fullmatch(pattern, refused), refused
    # the names the stack derives from the longest stay valid (an SQS queue name is at most
    # 80 characters; the bucket name is not: FilmDrop deployments pass theirs)
    stack = Stack(template, {"CirrusPrefix": "a" * 63})
    outputs = {key: stack.resolve(o["Value"]) for key, o in template["Outputs"].items()}
    queue_name = outputs["CirrusProcessQueueUrl"].rsplit("/", 1)[1]
    assert re.fullmatch(r"[A-Za-z0-9_-]{1,80}", queue_name), queue_name
    assert re.fullmatch(r"[a-zA-Z0-9_.-]{3,255}", outputs["CirrusStateTable"])
    assert template["Parameters"]["CirrusPrefix"]["Default"] == ""
    assert template["Parameters"]["CirrusPayloadRootPrefix"]["Default"] == "cirrus"
    # the explicit names take what they name, or empty for the derived default
    checks = {
        "CirrusProcessQueueArn": (
            ["arn:aws:sqs:us-east-1:123456789012:c-process"],
            ["https://sqs.us-east-1.amazonaws.com/123456789012/c-process", "c-process.fifo"],
        ),
        "CirrusWorkflowEventTopicArn": (
            ["arn:aws:sns:us-east-1:123456789012:c-workflow-event"],
            ["arn:aws:sqs:us-east-1:123456789012:c-workflow-event"],
        ),
        "CirrusPayloadBucketName": (["c-payload-123456789012"], ["s3://c-payload", "C_bucket"]),
        "CirrusPayloadRootPrefix": (
            ["cirrus", "data/cirrus", "payloads/v2", "cirrus-prod_1.0"],
            ["", "/cirrus", "cirrus/", "a//b", "cirrus/*"],
        ),
    }
    for name, (admitted_values, refused_values) in checks.items():
        pattern = template["Parameters"][name]["AllowedPattern"]
        if name != "CirrusPayloadRootPrefix":
            assert re.fullmatch(pattern, ""), name
        for value in admitted_values:
            assert re.fullmatch(pattern, value), (name, value)
        for value in refused_values:
            assert not re.fullmatch(pattern, value), (name, value)


@pytest.mark.parametrize("parameters", CIRRUS_MODES)
def test_cirrus_names_default_to_cirrus_geo_s_own(
    template: dict[str, Any], parameters: dict[str, str]
) -> None:
    stack = Stack(template, parameters)
    names = cirrus_names(stack)
    if parameters == CIRRUS:
        # cirrus-geo's cloudformation/core/base.yaml names, from CirrusPrefix alone
        assert names["table"] == f"{CIRRUS_PREFIX}-state"
        assert (
            names["queue_url"] == f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/my-cirrus-process"
        )
        assert names["topic_arn"] == f"arn:aws:sns:{REGION}:{ACCOUNT}:my-cirrus-workflow-event"
        assert names["bucket"] == f"my-cirrus-payload-{ACCOUNT}"
        assert names["root"] == "cirrus"
    # GIVEN the variables of each function that reads cirrus's resources
    for function in CIRRUS_READERS:
        variables = environment(stack, function)
        # THEN they name the cirrus deployment the parameters describe
        assert {k: v for k, v in variables.items() if k in CIRRUS_VARIABLES} == {
            "DEPTRACK_CIRRUS_STATE_TABLE": names["table"],
            "DEPTRACK_CIRRUS_PROCESS_QUEUE_URL": names["queue_url"],
            "DEPTRACK_CIRRUS_PAYLOAD_BUCKET": names["bucket"],
            "DEPTRACK_CIRRUS_PAYLOAD_ROOT_PREFIX": names["root"],
        }, function
    # AND the outputs say what the stack resolved
    outputs = deployed(stack, "Outputs")
    assert outputs["CirrusStateTable"] == names["table"]
    assert outputs["CirrusProcessQueueUrl"] == names["queue_url"]
    assert outputs["CirrusEventsQueueUrl"] == stack.physical("CirrusEventsQueue").ref
    assert outputs["CirrusEventsDlqUrl"] == stack.physical("CirrusEventsDlq").ref
    assert outputs["CirrusSubscriptionDlqUrl"] == stack.physical("CirrusSubscriptionDlq").ref
    assert outputs["CirrusEventsFunctionName"] == stack.physical(CIRRUS_FUNCTION).ref
    assert not {name for name in outputs if name.startswith("Cirrus")} - {
        "CirrusStateTable",
        "CirrusProcessQueueUrl",
        "CirrusEventsQueueUrl",
        "CirrusEventsDlqUrl",
        "CirrusSubscriptionDlqUrl",
        "CirrusEventsFunctionName",
    }


@pytest.mark.parametrize(
    ("parameters", "refused"),
    [
        pytest.param({}, set(), id="normal-mode"),
        pytest.param(CIRRUS, set(), id="cirrus"),
        pytest.param({"CirrusPrefix": "deptrack"}, {"CirrusPrefixIsNotPrefix"}, id="same"),
        pytest.param(
            {"Prefix": "pipeline", "CirrusPrefix": "pipeline"},
            {"CirrusPrefixIsNotPrefix"},
            id="same-other",
        ),
        pytest.param({"Prefix": "pipeline", "CirrusPrefix": "deptrack"}, set(), id="crossed"),
    ],
)
def test_cirrus_prefix_must_differ_from_prefix(
    template: dict[str, Any], parameters: dict[str, str], refused: set[str]
) -> None:
    # both stacks name their queue, tables and functions "{prefix}-...": one prefix collides
    assert template_rules.refused_rules(template, parameters) == refused
    (assertion,) = template["Rules"]["CirrusPrefixIsNotPrefix"]["Assertions"]
    assert referenced_ids(assertion["Assert"]) == {"CirrusPrefix", "Prefix"}


# ---------------------------------------------------------------------- variables


@pytest.mark.parametrize("parameters", [pytest.param({}, id="normal"), *CIRRUS_MODES])
def test_cirrus_variables_reach_exactly_the_cirrus_readers_in_cirrus_mode(
    template: dict[str, Any], monkeypatch: pytest.MonkeyPatch, parameters: dict[str, str]
) -> None:
    stack = Stack(template, parameters)
    cirrus_mode = stack.condition("CirrusMode")
    functions = [*FUNCTIONS, CIRRUS_FUNCTION] if cirrus_mode else list(FUNCTIONS)
    # the variables the code reads for cirrus mode are among the ones the template sets
    read = {name for name in setting_variables() if name.startswith("DEPTRACK_CIRRUS_")}
    assert read
    assert read <= CIRRUS_VARIABLES
    for function in functions:
        variables = environment(stack, function)
        given = set(variables) & CIRRUS_VARIABLES
        # GIVEN each function's environment: all four in cirrus mode for the cirrus
        # readers, none otherwise (none at all in normal mode)
        expected = CIRRUS_VARIABLES if cirrus_mode and function in CIRRUS_READERS else set()
        assert given == expected, function
        # WHEN the code builds its settings from exactly that environment
        for name in setting_variables() | POWERTOOLS_VARIABLES:
            monkeypatch.delenv(name, raising=False)
        for name, value in variables.items():
            monkeypatch.setenv(name, value)
        built = settings.Settings.from_env()
        # THEN it runs in cirrus mode exactly where the template says so, on cirrus's names
        assert built.cirrus_mode is bool(expected), function
        if expected:
            names = cirrus_names(stack)
            assert built.cirrus_state_table == names["table"]
            assert built.cirrus_process_queue_url == names["queue_url"]
            assert built.cirrus_payload_bucket == names["bucket"]
            # and everything else it needs is set too (the Globals)
            missing = setting_variables(function) - read - set(variables)
            assert missing <= {variable for variable, _, _ in settings.SWEEPER_VARIABLES}


@pytest.mark.parametrize("parameters", CIRRUS_MODES)
def test_cirrus_events_function_is_built_as_modelled(
    template: dict[str, Any], transformed: dict[str, Any], parameters: dict[str, str]
) -> None:
    # GIVEN the function as the model merges Globals, and as SAM builds it
    modelled = Stack(template, parameters).resolved_properties(CIRRUS_FUNCTION)
    built_stack = Stack(transformed, parameters)
    built = built_stack.resolved_properties(CIRRUS_FUNCTION)
    # THEN it runs the cirrus-events handler like the other functions run theirs
    assert modelled["Handler"] == "dependency_tracker.handlers.cirrus_events.lambda_handler"
    for name in ("FunctionName", "Handler", "Runtime", "Architectures", "MemorySize", "Timeout"):
        assert built[name] == modelled[name], name
    assert built["Environment"] == modelled["Environment"]
    assert built["LoggingConfig"] == modelled["LoggingConfig"]
    assert (modelled["Runtime"], modelled["Architectures"]) == ("python3.13", ["arm64"])
    assert modelled["Tracing"] == "Active"
    assert built["TracingConfig"] == {"Mode": "Active"}
    assert modelled["Timeout"] == 120
    # AND SAM carries the condition to everything it generates for the function
    generated = [
        entry
        for name, entry in transformed["Resources"].items()
        if name not in template["Resources"] and CIRRUS_FUNCTION in referenced_ids(entry)
    ]
    assert [entry["Type"] for entry in generated] == ["AWS::Lambda::EventSourceMapping"]
    assert all(entry.get("Condition") == "CirrusMode" for entry in generated)
    # AND its log group is its own, kept LogRetentionDays
    group = Stack(template, parameters).resolved_properties("CirrusEventsLogGroup")
    assert group == {
        "LogGroupName": f"/aws/lambda/{modelled['FunctionName']}",
        "RetentionInDays": Stack(template, parameters).parameter("LogRetentionDays"),
    }
    assert modelled["LoggingConfig"]["LogGroup"] == group["LogGroupName"]


def test_cirrus_events_handler_imports_from_code_uri(template: dict[str, Any]) -> None:
    stack = Stack(template, CIRRUS)
    path = str(stack.properties(CIRRUS_FUNCTION)["Handler"])
    module_name, _, name = path.rpartition(".")
    code_uri = ROOT / str(stack.properties(CIRRUS_FUNCTION)["CodeUri"])
    assert code_uri == ROOT / str(stack.properties("ProcessFunction")["CodeUri"])
    assert (code_uri / module_name.replace(".", "/")).with_suffix(".py").is_file()
    module = importlib.import_module(module_name)
    assert callable(getattr(module, name))


# ---------------------------------------------------------------------- event source


@pytest.mark.parametrize("parameters", CIRRUS_MODES)
def test_the_cirrus_events_queue_takes_only_cirrus_s_topic_and_feeds_the_function(
    template: dict[str, Any], transformed: dict[str, Any], parameters: dict[str, str]
) -> None:
    for source in (template, transformed):
        stack = Stack(source, parameters)
        names = cirrus_names(stack)
        queue, dlq = stack.physical("CirrusEventsQueue"), stack.physical("CirrusEventsDlq")
        # GIVEN the queue: encrypted, redriven to its DLQ, outlasting the function
        properties = stack.resolved_properties("CirrusEventsQueue")
        assert properties["SqsManagedSseEnabled"] is True
        assert stack.resolved_properties("CirrusEventsDlq")["SqsManagedSseEnabled"] is True
        assert properties["RedrivePolicy"] == {
            "deadLetterTargetArn": dlq.attributes["Arn"],
            "maxReceiveCount": stack.parameter("ProcessMaxReceiveCount"),
        }
        timeout = Stack(template, parameters).resolved_properties(CIRRUS_FUNCTION)["Timeout"]
        assert properties["VisibilityTimeout"] >= 6 * timeout
        assert properties["MaximumMessageSize"] == 262_144
        # THEN its policy lets SNS send to it for cirrus's topic only, and refuses plain HTTP
        policy = stack.resolved_properties("CirrusEventsQueuePolicy")
        assert policy["Queues"] == [queue.ref]
        tls_only = {
            "Sid": "DenyInsecureTransport",
            "Effect": "Deny",
            "Principal": "*",
            "Action": "sqs:*",
            "Resource": queue.attributes["Arn"],
            "Condition": {"Bool": {"aws:SecureTransport": "false"}},
        }
        assert policy["PolicyDocument"]["Statement"] == [
            {
                "Sid": "CirrusWorkflowEvents",
                "Effect": "Allow",
                "Principal": {"Service": "sns.amazonaws.com"},
                "Action": "sqs:SendMessage",
                "Resource": queue.attributes["Arn"],
                "Condition": {"ArnEquals": {"aws:SourceArn": names["topic_arn"]}},
            },
            tls_only,
        ]
        # AND the DLQ admits nobody and refuses plain HTTP too
        dlq_policy = stack.resolved_properties("CirrusEventsDlqPolicy")
        assert dlq_policy["Queues"] == [dlq.ref]
        assert dlq_policy["PolicyDocument"]["Statement"] == [
            {**tls_only, "Resource": dlq.attributes["Arn"]}
        ]
        # AND the subscription delivers cirrus's topic, raw, to that queue, once the policies
        # admit it, and what SNS cannot deliver to its own DLQ (which admits only that topic)
        undelivered = stack.physical("CirrusSubscriptionDlq")
        subscription = stack.resources["CirrusWorkflowEventSubscription"]
        assert subscription["DependsOn"] == [
            "CirrusEventsQueuePolicy",
            "CirrusSubscriptionDlqPolicy",
        ]
        assert stack.resolved_properties("CirrusWorkflowEventSubscription") == {
            "TopicArn": names["topic_arn"],
            "Protocol": "sqs",
            "Endpoint": queue.attributes["Arn"],
            "RawMessageDelivery": True,
            "RedrivePolicy": {"deadLetterTargetArn": undelivered.attributes["Arn"]},
            "FilterPolicyScope": "MessageAttributes",
            "FilterPolicy": {"event_type": ADMITTED_EVENT_TYPES},
        }
        assert stack.resolved_properties("CirrusSubscriptionDlq")["SqsManagedSseEnabled"] is True
        undelivered_policy = stack.resolved_properties("CirrusSubscriptionDlqPolicy")
        assert undelivered_policy["Queues"] == [undelivered.ref]
        assert undelivered_policy["PolicyDocument"]["Statement"] == [
            {
                "Sid": "CirrusUndeliveredEvents",
                "Effect": "Allow",
                "Principal": {"Service": "sns.amazonaws.com"},
                "Action": "sqs:SendMessage",
                "Resource": undelivered.attributes["Arn"],
                "Condition": {"ArnEquals": {"aws:SourceArn": names["topic_arn"]}},
            },
            {**tls_only, "Resource": undelivered.attributes["Arn"]},
        ]
    # AND the function's one event source is that queue, with partial batch failures
    built = Stack(transformed, parameters)
    (mapping,) = mappings(built, CIRRUS_FUNCTION)
    assert mapping["EventSourceArn"] == built.arn_of("CirrusEventsQueue")
    assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert mapping["BatchSize"] == 10
    assert "FilterCriteria" not in mapping


# ---------------------------------------------------------------------- event filter


class _NoItem:
    """cirrus's state table with no item: what the handler does is decided by the type alone."""

    def get(self, payload_id: str) -> None:
        return None


class _NoWaiters:
    def resolve_all(self, payload_id: str, resolution: object, **_: object) -> int:
        return 0


def handler_action(event_type: str) -> CirrusAction:
    """What the cirrus-events flow does with an event of ``event_type`` about a cirrus id."""
    events = CirrusEvents(states=cast("Any", _NoItem()), dependencies=cast("Any", _NoWaiters()))
    return events.handle(WorkflowEvent(event_type=event_type, payload_id="c/workflow-w/item"))


def test_the_filter_admits_exactly_the_event_types_the_handler_acts_on() -> None:
    # GIVEN every event type the code knows, and one it does not
    known = [t.value for t in WorkflowEventType]
    actions = {name: handler_action(name) for name in [*known, "SOMETHING_NEW"]}
    # THEN the handler acts (reads cirrus's table, or tells waiters of a refusal) on exactly
    # the types the filter admits, and only reports progress, or an unknown type, for the rest:
    # a type added to WorkflowEventType that the handler acts on fails here until it is
    # admitted, in the template and in the embedded stack's subscription
    acting = {CirrusAction.NOT_ENDED, CirrusAction.REFUSED}
    assert sorted(n for n, a in actions.items() if a in acting) == ADMITTED_EVENT_TYPES
    assert {n for n, a in actions.items() if a is CirrusAction.PROGRESS} == PROGRESS_EVENT_TYPES
    assert set(known) == set(ADMITTED_EVENT_TYPES) | PROGRESS_EVENT_TYPES
    assert actions["SOMETHING_NEW"] is CirrusAction.UNKNOWN
    # AND the values are cirrus's own spellings (SNS matches strings exactly, case and all)
    assert all(re.fullmatch(r"[A-Z_]+", name) for name in ADMITTED_EVENT_TYPES)


@pytest.mark.parametrize("parameters", CIRRUS_MODES)
def test_the_subscription_filters_on_event_type_within_sns_limits(
    template: dict[str, Any], transformed: dict[str, Any], parameters: dict[str, str]
) -> None:
    for source in (template, transformed):
        # GIVEN the subscription as deployed (SAM passes it through as written)
        subscription = Stack(source, parameters).resolved_properties(
            "CirrusWorkflowEventSubscription"
        )
        policy = subscription["FilterPolicy"]
        # THEN it filters on the event_type message attribute, admitting the acted-on types
        assert subscription["FilterPolicyScope"] == "MessageAttributes"
        assert policy == {EVENT_TYPE_ATTRIBUTE: ADMITTED_EVENT_TYPES}
        # AND it keeps within SNS's constraints for an attribute-based policy: at most five
        # keys, each an array of strings (no nesting), at most 150 combinations, 256 KB
        assert len(policy) <= SNS_FILTER_MAX_KEYS
        assert all(
            isinstance(v, list) and all(isinstance(x, str) for x in v) for v in policy.values()
        )
        combinations = 1
        for values in policy.values():
            combinations *= len(values)
        assert combinations <= SNS_FILTER_MAX_COMBINATIONS
        assert len(json.dumps(policy).encode("utf-8")) <= SNS_FILTER_MAX_BYTES


def test_the_embedded_stack_subscribes_with_the_template_s_filter_and_moto_applies_it(
    template: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN the embedded stack in cirrus mode, without its pumps: cirrus's Lambdas (which
    # need cirrus-geo, Python 3.12) and the tracker's handlers never run, so whatever SNS
    # delivers stays on the tracker's cirrus-events queue
    monkeypatch.setattr(EmbeddedStack, "_start_pumps", lambda self: None)
    expected = Stack(template, CIRRUS).resolved_properties("CirrusWorkflowEventSubscription")
    with EmbeddedStack(sink=io.StringIO(), cirrus=True, sweeper_interval=None) as stack:
        sns, sqs = stack.client("sns"), stack.client("sqs")
        topic = stack.outputs["CirrusWorkflowEventTopicArn"]
        (subscription,) = [
            s
            for s in sns.list_subscriptions_by_topic(TopicArn=topic)["Subscriptions"]
            if s["Endpoint"] == stack.outputs["CirrusEventQueueArn"]
        ]
        attributes = sns.get_subscription_attributes(
            SubscriptionArn=subscription["SubscriptionArn"]
        )["Attributes"]
        # THEN its subscription is the template's: raw delivery, the same filter
        assert attributes["RawMessageDelivery"] == "true"
        assert attributes["FilterPolicyScope"] == expected["FilterPolicyScope"]
        assert json.loads(attributes["FilterPolicy"]) == expected["FilterPolicy"]
        # WHEN one event of every type is published as cirrus-geo publishes it (the type in
        # the body and in the event_type attribute), and one message without the attribute
        for name in [t.value for t in WorkflowEventType]:
            sns.publish(
                TopicArn=topic,
                Message=json.dumps({"event_type": name, "payload_id": "c/workflow-w/item"}),
                MessageAttributes={
                    EVENT_TYPE_ATTRIBUTE: {"DataType": "String", "StringValue": name},
                    "workflow": {"DataType": "String", "StringValue": "w"},
                },
            )
        sns.publish(TopicArn=topic, Message=json.dumps({"event_type": "SUCCEEDED"}))
        received = []
        while True:
            messages = sqs.receive_message(
                QueueUrl=stack.outputs["CirrusEventQueueUrl"],
                MaxNumberOfMessages=10,
                MessageAttributeNames=["All"],
            ).get("Messages", [])
            if not messages:
                break
            received += messages
            for message in messages:
                sqs.delete_message(
                    QueueUrl=stack.outputs["CirrusEventQueueUrl"],
                    ReceiptHandle=message["ReceiptHandle"],
                )
    # THEN moto 5.2.5 applied the filter to the raw SQS delivery, as SNS does: exactly the
    # admitted types arrived, each once with its attribute, and the message without one did not
    types = sorted(json.loads(m["Body"])["event_type"] for m in received)
    assert types == ADMITTED_EVENT_TYPES
    assert all(
        m["MessageAttributes"][EVENT_TYPE_ATTRIBUTE]["StringValue"]
        == json.loads(m["Body"])["event_type"]
        for m in received
    )


def test_cirrus_md_says_which_events_the_filter_keeps_away() -> None:
    # docs/cirrus.md's table of cirrus events: the progress row names exactly the types the
    # filter keeps off the queue, and the rows that resolve or refuse name the admitted ones
    text = CIRRUS_DOC.read_text(encoding="utf-8")
    rows = markdown.table_rows(markdown.section(text, "What each cirrus event does"))
    known = {t.value for t in WorkflowEventType}

    def named(metric: str) -> set[str]:
        return {
            span
            for row in rows
            if metric in row[-1]
            for span in markdown.code_spans(row[0])
            if span in known
        }

    assert named("`CirrusProgress`") == PROGRESS_EVENT_TYPES
    assert named("`CirrusResolved`") | named("`CirrusRefused`") == set(ADMITTED_EVENT_TYPES)
    words = " ".join(text.split())
    assert "`FilterPolicy`" in words


# ---------------------------------------------------------------------- IAM


def grant_pairs(stack: Stack) -> set[tuple[str, str, str, str]]:
    """(holder, Sid, action, resource) of every grant of the stack."""
    return {
        (grant.holder, grant.source.removeprefix("Policies/"), action, resource)
        for grant in iam.role_grants(stack)
        for action in grant.actions
        for resource in grant.resources
    }


@pytest.mark.parametrize("parameters", CIRRUS_MODES)
def test_cirrus_mode_adds_exactly_the_cirrus_grants(
    template: dict[str, Any], parameters: dict[str, str]
) -> None:
    # GIVEN the grants of the stack in cirrus mode, beside those of normal mode
    stack = Stack(template, parameters)
    normal = Stack(template, {k: v for k, v in parameters.items() if not k.startswith("Cirrus")})
    names = cirrus_names(stack)
    added = grant_pairs(stack) - grant_pairs(normal)
    # THEN cirrus mode adds these and nothing else: each on one named resource (no wildcard
    # table or queue; two key prefixes of cirrus's bucket), none writing cirrus's table
    table, queue = stack.physical("DependencyTable"), stack.physical("CirrusEventsQueue")
    own_logs = stack.arn_of("CirrusEventsLogGroup")
    cirrus = CIRRUS_FUNCTION
    assert added == {
        ("ProcessFunction", "ReadCirrusState", "dynamodb:GetItem", names["table_arn"]),
        ("ProcessFunction", "ForwardToCirrus", "sqs:SendMessage", names["queue_arn"]),
        ("ProcessFunction", "ForwardLargePayloadsToCirrus", "s3:PutObject", names["forwarded_arn"]),
        ("SweeperFunction", "ReadCirrusState", "dynamodb:GetItem", names["table_arn"]),
        (cirrus, "ReadCirrusState", "dynamodb:GetItem", names["table_arn"]),
        (cirrus, "Waiters", "dynamodb:Query", table.attributes["Arn"]),
        (cirrus, "Waiters", "dynamodb:UpdateItem", table.attributes["Arn"]),
        (cirrus, "WriteOwnLogs", "logs:CreateLogStream", own_logs),
        (cirrus, "WriteOwnLogs", "logs:PutLogEvents", own_logs),
        (cirrus, "PollCirrusEvents", "sqs:ReceiveMessage", queue.attributes["Arn"]),
        (cirrus, "PollCirrusEvents", "sqs:DeleteMessage", queue.attributes["Arn"]),
        (cirrus, "PollCirrusEvents", "sqs:GetQueueAttributes", queue.attributes["Arn"]),
        (cirrus, "UploadTraces", "xray:PutTraceSegments", "*"),
        (cirrus, "UploadTraces", "xray:PutTelemetryRecords", "*"),
    }
    # AND cirrus mode takes no grant away
    assert grant_pairs(normal) <= grant_pairs(stack)
    # AND the cirrus-events function changes waiter rows with update-state's calls, no more
    waiters = {s.sid: s for s in stack.statements("UpdateStateFunction")}["Waiters"]
    mine = {s.sid: s for s in stack.statements(cirrus)}["Waiters"]
    assert (mine.actions, mine.resources) == (waiters.actions, waiters.resources)
    # AND no role may write cirrus's table, or send to or start anything else of cirrus's
    for function in (*FUNCTIONS, cirrus):
        for action in ("PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "Query", "Scan"):
            assert not stack.allowed(function, f"dynamodb:{action}", names["table_arn"])
        workflow = f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:{CIRRUS_PREFIX}-wf"
        assert not stack.allowed(function, "states:StartExecution", workflow)
        other_key = f"arn:aws:s3:::{names['bucket']}/{names['root']}/batch/x.json"
        assert not stack.allowed(function, "s3:GetObject", other_key)
        assert not stack.allowed(function, "s3:PutObject", other_key)
    # AND every grant of the stack names its own resources, cirrus's or "*" (X-Ray)
    prefix = f"{stack.parameter('Prefix')}-"
    cirrus_arns = {names[k] for k in ("table_arn", "queue_arn", "forwarded_arn")}
    outside = [
        pair
        for pair in grant_pairs(stack)
        if pair[3] != "*"
        and pair[3] not in cirrus_arns
        and prefix not in re.split(r"[*?]", pair[3], maxsplit=1)[0]
    ]
    assert outside == []


def test_the_forwarding_grant_is_the_key_prefix_the_code_writes(template: dict[str, Any]) -> None:
    # dependency_tracker.cirrus.store.CirrusQueue puts an oversized payload at
    # s3://{cirrus bucket}/{forwarded_prefix(root)}/{sha256}.json
    stack = Stack(template, CIRRUS)
    names = cirrus_names(stack)
    key = f"arn:aws:s3:::{names['bucket']}/{forwarded_prefix(names['root'])}/{'0' * 64}.json"
    assert stack.allowed("ProcessFunction", "s3:PutObject", key)
    assert not stack.allowed(CIRRUS_FUNCTION, "s3:PutObject", key)
    assert not stack.allowed("SweeperFunction", "s3:PutObject", key)


@pytest.mark.parametrize("parameters", CIRRUS_MODES)
def test_cirrus_events_role_grants_exactly_what_lambda_needs(
    template: dict[str, Any], transformed: dict[str, Any], parameters: dict[str, str]
) -> None:
    stack = Stack(template, parameters)
    # GIVEN the function's own role, trusted by Lambda only, to which SAM adds nothing
    role = iam.assert_own_lambda_role(stack, CIRRUS_FUNCTION)
    assert role == "CirrusEventsRole"
    assert stack.resources[role]["Condition"] == "CirrusMode"
    # WHEN its Lambda-service statements are read
    statements = {s.sid: s for s in stack.statements(CIRRUS_FUNCTION)}
    granted = {
        (action, resource)
        for sid in CIRRUS_SERVICE_STATEMENTS
        for action in statements[sid].actions
        for resource in statements[sid].resources
    }
    # THEN they grant what its queue, log group and tracing need, as the template says it
    # and as the transformed template creates it
    needs = lambda_service_needs(stack, CIRRUS_FUNCTION)
    assert granted == needs
    assert deployed_service_needs(Stack(transformed, parameters), CIRRUS_FUNCTION) == needs
    # AND no other statement of the role holds one of those actions
    service_actions = {action for action, _ in needs} | {"logs:CreateLogGroup"}
    code = [s for sid, s in statements.items() if sid not in CIRRUS_SERVICE_STATEMENTS]
    assert not [(s.sid, a) for s in code for a in s.actions if a in service_actions]


# ---------------------------------------------------------------------- alarms


def test_alarms_watch_the_cirrus_events_function_and_its_dlq(template: dict[str, Any]) -> None:
    stack = Stack(template, {**CIRRUS, "AlarmEmail": "ops@example.com"})
    alarms = {
        name: entry["Properties"]
        for name, entry in deployed(stack).items()
        if entry["Type"] == "AWS::CloudWatch::Alarm"
    }
    watched = {
        (alarm.get("MetricName"), dimension["Value"])
        for alarm in alarms.values()
        for dimension in alarm.get("Dimensions", [])
        if alarm.get("Threshold") == 0 and alarm["ComparisonOperator"] == "GreaterThanThreshold"
    }
    dlq = stack.physical("CirrusEventsDlq").attributes["QueueName"]
    assert ("ApproximateNumberOfMessagesVisible", dlq) in watched
    assert ("Errors", stack.physical(CIRRUS_FUNCTION).ref) in watched
    topic = [stack.physical("AlarmTopic").ref]
    assert all(alarm["AlarmActions"] == topic for alarm in alarms.values())
    # the throttles alarm sums all five functions, each metric it reads
    metrics = alarms["ThrottlesAlarm"]["Metrics"]
    (expression,) = [m for m in metrics if "Expression" in m]
    reads = [m for m in metrics if "MetricStat" in m]
    assert set(re.findall(r"\w+", expression["Expression"])) == {m["Id"] for m in reads}
    throttled = {m["MetricStat"]["Metric"]["Dimensions"][0]["Value"] for m in reads}
    assert throttled == {stack.physical(f).ref for f in (*FUNCTIONS, CIRRUS_FUNCTION)}
    # and the cirrus-events DLQ is where its failures end
    redrive = stack.resolved_properties("CirrusEventsQueue")["RedrivePolicy"]
    assert redrive["deadLetterTargetArn"] == stack.arn_of("CirrusEventsDlq")


# ---------------------------------------------------------------------- linting


def test_cfn_lint_passes_in_both_modes_before_and_after_the_transform(
    template: dict[str, Any], tmp_path: Path
) -> None:
    # cfn-lint weighs every condition of the template either way; cirrus mode is also
    # linted as its default (a copy whose CirrusPrefix defaults to cirrus-geo's default) and
    # with the cirrus parameters given, and SAM transforms it with them as well
    cirrus_default = copy.deepcopy(template)
    cirrus_default["Parameters"]["CirrusPrefix"]["Default"] = "cirrus-sandbox"
    assert Stack(cirrus_default).condition("CirrusMode")
    copy_path = tmp_path / "cirrus-default.json"
    copy_path.write_text(json.dumps(cirrus_default, indent=1))
    cases: list[tuple[Path, dict[str, str] | None]] = [
        (TEMPLATE_PATH, CIRRUS_ELSEWHERE),
        (copy_path, None),
    ]
    # (normal mode: test_functions_and_code.py and test_transformed_template.py lint both forms)
    for name, (source, parameters) in {
        "cirrus": (template, CIRRUS),
        "cirrus-default": (cirrus_default, {}),
    }.items():
        path = tmp_path / f"transformed-{name}.json"
        path.write_text(json.dumps(transform(source, parameters=parameters), indent=1))
        cases.append((path, parameters or None))
    for path, given in cases:
        assert lint(path, given) == [], (path.name, given)


# ---------------------------------------------------------------------- docs


def test_deploy_md_gives_the_cirrus_mode_counts_and_alarms(template: dict[str, Any]) -> None:
    # GIVEN what cirrus mode deploys
    stack = Stack(template, CIRRUS)
    resources = deployed(stack)
    kinds = [entry["Type"] for entry in resources.values()]
    alarms = [entry for entry in resources.values() if entry["Type"] == "AWS::CloudWatch::Alarm"]
    metrics = sum(
        1
        if "MetricName" in a["Properties"]
        else sum("MetricStat" in m for m in a["Properties"]["Metrics"])
        for a in alarms
    )
    words = " ".join(DEPLOY_DOC.read_text(encoding="utf-8").split())
    number = {5: "five", 10: "ten"}
    # THEN deploy.md states its queues, functions, alarms, alarm metrics and their price
    queues, functions = kinds.count("AWS::SQS::Queue"), kinds.count("AWS::Serverless::Function")
    assert (
        f"In cirrus mode the stack has {number[queues]} queues, {number[functions]} functions "
        f"and {len(alarms)} alarms." in words
    )
    assert f"{metrics} alarm metrics ({len(alarms)} alarms)" in words
    assert f"\u00d7 $0.10 = ${metrics * 0.10:.2f} a month in all" in words
    # AND its second alarm table names exactly the alarms of cirrus mode only
    cirrus_only = {
        entry["Properties"]["AlarmName"]["Fn::Sub"].replace("${Prefix}", "{Prefix}")
        for entry in template["Resources"].values()
        if entry["Type"] == "AWS::CloudWatch::Alarm" and entry.get("Condition") == "CirrusMode"
    }
    operations = markdown.section(DEPLOY_DOC.read_text(encoding="utf-8"), "5. Operations")
    in_tables = {markdown.code_spans(row[0])[0] for row in markdown.table_rows(operations)}
    assert cirrus_only
    assert cirrus_only <= in_tables
    # AND it names every cirrus parameter's derived default as cirrus-geo's templates do
    # (the section up to the next section: markdown.section would stop at a "# " comment
    # inside its shell block)
    text = DEPLOY_DOC.read_text(encoding="utf-8")
    section = text[text.index("### Beside cirrus-geo") : text.index("## 3. ")]
    for name in ("-state", "-process", "-workflow-event", "-payload-{account id}"):
        assert f"`{{ResourcePrefix}}{name}`" in section, name
