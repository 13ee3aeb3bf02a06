"""Every IAM grant the deployed stack holds, including the ones SAM adds itself.

``Stack.statements`` reads what the template writes under ``Policies``. A
deployed role holds more: the SAM transform attaches AWS-managed policies and
writes inline statements for event sources and destinations. :func:`role_grants`
models what it adds for the features this template uses (from
``samtranslator/model/sam_resources.py``, ``eventsources/pull.py``,
``stepfunctions/generators.py`` and ``xray_utils.py``), so the IAM checks read
plain data; ``test_transformed_template.py`` holds the model to the translator's
own output (``template_contract.transformed``), grant by grant.
A feature it does not model (a policy template, a managed policy name, a VPC,
another pull event source, a state machine event, a ``Role`` from outside the
template) raises, so a template change cannot slip past the IAM checks
unmodelled. A ``Role`` naming one of the template's ``AWS::IAM::Role``
resources makes SAM add nothing (SAM builds a role, and adds to it, only when
``Role`` is not given); that role's own statements are read instead, as
``Policies/<Sid>`` grants held by the one function or state machine that uses it.

:data:`MANAGED_POLICIES` holds the documents of the AWS-managed policies SAM
attaches, as AWS publishes them in the managed policy reference. AWS can change
them; that is one of the things docs/security.md lists as not verifiable offline.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.unit.template_contract.cfn import Stack

FUNCTION = "AWS::Serverless::Function"
STATE_MACHINE = "AWS::Serverless::StateMachine"
IAM_ROLE = "AWS::IAM::Role"
RESOURCE_POLICIES = {"AWS::SQS::QueuePolicy", "AWS::S3::BucketPolicy", "AWS::SNS::TopicPolicy"}

_LOGS = ("logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents")
# name → the actions of its single statement, all on Resource "*".
MANAGED_POLICIES: dict[str, tuple[str, ...]] = {
    "AWSLambdaBasicExecutionRole": _LOGS,
    "AWSXrayWriteOnlyAccess": (
        "xray:PutTraceSegments",
        "xray:PutTelemetryRecords",
        "xray:GetSamplingRules",
        "xray:GetSamplingTargets",
        "xray:GetSamplingStatisticSummaries",
    ),
    "AWSLambdaSQSQueueExecutionRole": (
        "sqs:ReceiveMessage",
        "sqs:DeleteMessage",
        "sqs:GetQueueAttributes",
        *_LOGS,
    ),
    "AWSLambdaDynamoDBExecutionRole": (
        "dynamodb:DescribeStream",
        "dynamodb:GetRecords",
        "dynamodb:GetShardIterator",
        "dynamodb:ListStreams",
        *_LOGS,
    ),
}
# SAM event type → the managed policy it attaches to the function's role.
_PULL_EVENT_POLICIES = {
    "SQS": "AWSLambdaSQSQueueExecutionRole",
    "DynamoDB": "AWSLambdaDynamoDBExecutionRole",
}
# SAM event types that add nothing to the function's role (they create a
# resource-based AWS::Lambda::Permission instead).
_PUSH_EVENTS = {"EventBridgeRule", "CloudWatchEvent", "Schedule", "ScheduleV2"}
# Destination type → the action SAM grants on the destination.
_DESTINATION_ACTIONS = {
    "SQS": "sqs:SendMessage",
    "SNS": "sns:Publish",
    "Lambda": "lambda:InvokeFunction",
    "EventBridge": "events:PutEvents",
}
_ACTION = re.compile(r"[a-z0-9-]+:[A-Za-z0-9]+")


@dataclass(frozen=True)
class Grant:
    """One statement a deployed role (or a managed policy) holds."""

    # logical id of the function or state machine (also when its role is an explicit
    # AWS::IAM::Role of the template), or of an IAM resource no single one uses
    holder: str
    source: str  # "Policies/<Sid>", "managed/<policy>", "EventInvokeConfig/OnFailure", ...
    effect: str
    actions: tuple[str, ...]
    resources: tuple[str, ...]
    raw: dict[str, Any] = field(compare=False, hash=False)

    @property
    def sam_managed(self) -> bool:
        """Whether SAM added this grant (an AWS-managed policy), not the template."""
        return self.source.startswith("managed/")


def role_grants(stack: Stack) -> list[Grant]:
    """Every identity-based grant of the stack, with intrinsic functions resolved."""
    grants: list[Grant] = []
    for logical_id, resource in stack.resources.items():
        if not _deployed(stack, resource):
            continue
        kind = resource["Type"]
        if kind == FUNCTION:
            grants += _function_grants(stack, logical_id)
        elif kind == STATE_MACHINE:
            grants += _state_machine_grants(stack, logical_id)
        elif kind == IAM_ROLE:
            grants += _iam_role_grants(stack, logical_id)
        elif kind in {"AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"}:
            document = stack.resolved_properties(logical_id)["PolicyDocument"]
            grants += _document_grants(logical_id, "PolicyDocument", document)
    return grants


def resource_policy_statements(stack: Stack) -> list[tuple[str, dict[str, Any]]]:
    """(logical id, resolved statement) of every resource-based policy (queue, bucket, topic)."""
    found = []
    for logical_id, resource in stack.resources.items():
        if resource["Type"] in RESOURCE_POLICIES and _deployed(stack, resource):
            document = stack.resolved_properties(logical_id)["PolicyDocument"]
            found += [(logical_id, statement) for statement in _as_dicts(document["Statement"])]
    return found


def is_named_action(action: str) -> bool:
    """``service:Action`` with neither ``*`` nor ``?``: one API action, spelled out."""
    return _ACTION.fullmatch(action) is not None


def _deployed(stack: Stack, resource: dict[str, Any]) -> bool:
    condition = resource.get("Condition")
    return condition is None or stack.condition(condition)


def _function_grants(stack: Stack, logical_id: str) -> list[Grant]:
    properties = stack.properties(logical_id)
    if _own_role(stack, logical_id, properties):
        return []  # SAM adds nothing; role_grants reads the AWS::IAM::Role itself
    _refuse(logical_id, properties, ("VpcConfig", "PermissionsBoundary"))
    grants = _explicit(stack, logical_id)
    managed = ["AWSLambdaBasicExecutionRole"]
    if properties.get("Tracing"):
        managed.append("AWSXrayWriteOnlyAccess")
    for name, event in properties.get("Events", {}).items():
        kind = event["Type"]
        if kind in _PULL_EVENT_POLICIES:
            managed.append(_PULL_EVENT_POLICIES[kind])
            destination = event["Properties"].get("DestinationConfig", {}).get("OnFailure")
            grants += _destination(stack, logical_id, f"Events/{name}/OnFailure", destination)
        elif kind not in _PUSH_EVENTS:
            msg = f"{logical_id}: teach template_contract.iam the role SAM builds for {kind} events"
            raise AssertionError(msg)
    invoke = properties.get("EventInvokeConfig", {}).get("DestinationConfig", {})
    for outcome in ("OnSuccess", "OnFailure"):
        destination = invoke.get(outcome)
        grants += _destination(stack, logical_id, f"EventInvokeConfig/{outcome}", destination)
    queue = properties.get("DeadLetterQueue")
    if queue:
        dead_letters = {"Type": queue["Type"], "Destination": queue["TargetArn"]}
        grants += _destination(stack, logical_id, "DeadLetterQueue", dead_letters)
    grants += [_managed(logical_id, name) for name in dict.fromkeys(managed)]
    return grants


def _state_machine_grants(stack: Stack, logical_id: str) -> list[Grant]:
    properties = stack.properties(logical_id)
    if _own_role(stack, logical_id, properties):
        return []
    _refuse(logical_id, properties, ("Events", "PermissionsBoundary"))
    grants = _explicit(stack, logical_id)
    if stack.resolve(properties.get("Tracing", {})).get("Enabled") is True:
        grants.append(_managed(logical_id, "AWSXrayWriteOnlyAccess"))
    return grants


def _own_role(stack: Stack, logical_id: str, properties: dict[str, Any]) -> bool:
    """Whether the resource names its own role: one of the template's AWS::IAM::Role resources."""
    if "Role" not in properties:
        return False
    stack.role_of(logical_id)  # raises for a Role from outside the template, or Policies beside it
    return True


def _role_user(stack: Stack, role: str) -> str:
    """The one function or state machine whose ``Role`` is ``role`` (else ``role`` itself)."""
    users = [
        logical_id
        for logical_id in [*stack.of_type(FUNCTION), *stack.of_type(STATE_MACHINE)]
        if "Role" in stack.properties(logical_id) and stack.role_of(logical_id) == role
    ]
    return users[0] if len(users) == 1 else role


def _iam_role_grants(stack: Stack, logical_id: str) -> list[Grant]:
    properties = stack.resolved_properties(logical_id)
    holder = _role_user(stack, logical_id)
    grants = [
        Grant(holder, f"Policies/{s.sid}", s.effect, s.actions, s.resources, s.raw)
        for s in stack.statements(logical_id)
    ]
    for arn in properties.get("ManagedPolicyArns", []):
        name = str(arn).rpartition("/")[2]
        if not str(arn).startswith("arn:aws:iam::aws:policy/") or name not in MANAGED_POLICIES:
            msg = f"{logical_id}: managed policy {arn} cannot be checked offline"
            raise AssertionError(msg)
        grants.append(_managed(holder, name))
    return grants


def _explicit(stack: Stack, logical_id: str) -> list[Grant]:
    # Stack.statements raises for a SAM policy template or a managed policy name.
    return [
        Grant(logical_id, f"Policies/{s.sid}", s.effect, s.actions, s.resources, s.raw)
        for s in stack.statements(logical_id)
    ]


def _managed(holder: str, name: str) -> Grant:
    statement = {"Effect": "Allow", "Action": list(MANAGED_POLICIES[name]), "Resource": "*"}
    return Grant(holder, f"managed/{name}", "Allow", MANAGED_POLICIES[name], ("*",), statement)


def _destination(
    stack: Stack, holder: str, source: str, destination: dict[str, Any] | None
) -> list[Grant]:
    if not destination or "Type" not in destination:
        return []  # SAM grants nothing without a Type
    kind = stack.resolve(destination["Type"])
    if "Destination" not in destination or kind not in _DESTINATION_ACTIONS:
        msg = f"{holder}: SAM would create a {kind} destination itself; not modelled"
        raise AssertionError(msg)
    resource = str(stack.resolve(destination["Destination"]))
    statement = {"Effect": "Allow", "Action": _DESTINATION_ACTIONS[kind], "Resource": resource}
    return [Grant(holder, source, "Allow", (_DESTINATION_ACTIONS[kind],), (resource,), statement)]


def _document_grants(holder: str, name: str, document: dict[str, Any]) -> list[Grant]:
    return [
        Grant(
            holder,
            f"{name}/{statement.get('Sid', index)}",
            str(statement["Effect"]),
            tuple(_as_strings(statement.get("Action", []))),
            tuple(_as_strings(statement.get("Resource", []))),
            statement,
        )
        for index, statement in enumerate(_as_dicts(document["Statement"]))
    ]


def _refuse(logical_id: str, properties: dict[str, Any], names: tuple[str, ...]) -> None:
    present = [name for name in names if name in properties]
    if present:
        msg = f"{logical_id}: teach template_contract.iam what SAM does with {present}"
        raise AssertionError(msg)


def _as_dicts(value: Any) -> list[dict[str, Any]]:
    return list(value) if isinstance(value, list) else [value]


def _as_strings(value: Any) -> list[str]:
    return [str(item) for item in (value if isinstance(value, list) else [value])]


LAMBDA_TRUST = [
    {
        "Effect": "Allow",
        "Principal": {"Service": "lambda.amazonaws.com"},
        "Action": "sts:AssumeRole",
    }
]


def assert_own_lambda_role(stack: Stack, function: str) -> str:
    """``function``'s explicit role, trusted by Lambda only, to which SAM adds nothing; its id."""
    role = stack.role_of(function)
    assert role is not None, f"{function} needs its own AWS::IAM::Role"
    assert "ManagedPolicyArns" not in stack.properties(role)
    assert not [g for g in role_grants(stack) if g.holder == function and g.sam_managed]
    trust = stack.resolved_properties(role)["AssumeRolePolicyDocument"]["Statement"]
    assert trust == LAMBDA_TRUST
    return role
