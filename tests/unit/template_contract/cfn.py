"""Read ``template.yaml`` as CloudFormation would, just far enough for contract tests.

:class:`Stack` resolves the intrinsic functions the template uses (``Ref``,
``Fn::GetAtt``, ``Fn::Sub``, ``Fn::Join``, ``Fn::Split``, ``Fn::Select``,
``Fn::If`` and the condition functions) for given parameter values, account and
region, giving every resource the name and ARN it would get when deployed. SAM's
``Globals`` are merged into each function the way SAM merges them (maps
merged, everything else replaced).

:class:`Statement` is an IAM statement with its resources resolved; ``allows``
matches an action and a resource ARN the way IAM does (``*`` and ``?``
wildcards, case-sensitive resources, case-insensitive actions).
"""

from __future__ import annotations

import copy
import fnmatch
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cfnlint.decode import decode

if TYPE_CHECKING:
    from collections.abc import Callable

ROOT = Path(__file__).resolve().parents[3]
TEMPLATE_PATH = ROOT / "template.yaml"

ACCOUNT = "123456789012"
REGION = "us-east-1"
PARTITION = "aws"
STACK_NAME = "deptrack-stack"

# Log delivery for Step Functions logging has no resource-level permissions.
LOG_DELIVERY_ACTIONS = frozenset(
    {
        "logs:CreateLogDelivery",
        "logs:GetLogDelivery",
        "logs:UpdateLogDelivery",
        "logs:DeleteLogDelivery",
        "logs:ListLogDeliveries",
        "logs:PutResourcePolicy",
        "logs:DescribeResourcePolicies",
        "logs:DescribeLogGroups",
    }
)


class _NoValue:
    """``AWS::NoValue``: the property or list item disappears."""

    def __repr__(self) -> str:
        return "AWS::NoValue"


NO_VALUE = _NoValue()
_SUB = re.compile(r"\$\{([^}]+)\}")


def load_template(path: Path = TEMPLATE_PATH) -> dict[str, Any]:
    """The template as plain dicts, lists and scalars (short-form tags expanded)."""
    decoded, errors = decode(str(path))
    if errors or decoded is None:
        msg = f"{path} does not parse: {errors}"
        raise AssertionError(msg)
    plain: dict[str, Any] = json.loads(json.dumps(decoded, default=str))
    return plain


@dataclass(frozen=True)
class Physical:
    """What ``Ref`` and ``Fn::GetAtt`` return for one deployed resource."""

    ref: str
    attributes: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Statement:
    """An IAM policy statement with its intrinsic functions resolved."""

    sid: str
    effect: str
    actions: tuple[str, ...]
    resources: tuple[str, ...]
    raw: dict[str, Any]

    def allows(self, action: str, resource: str) -> bool:
        """Whether this statement allows ``action`` on ``resource``."""
        return (
            self.effect == "Allow"
            and any(fnmatch.fnmatch(action.lower(), a.lower()) for a in self.actions)
            and any(fnmatch.fnmatchcase(resource, pattern) for pattern in self.resources)
        )


@dataclass
class Stack:
    """The template deployed with ``parameters`` (defaults for the rest)."""

    template: dict[str, Any]
    parameters: dict[str, str] = field(default_factory=dict)
    account: str = ACCOUNT
    region: str = REGION
    partition: str = PARTITION

    def __post_init__(self) -> None:
        unknown = set(self.parameters) - set(self.template.get("Parameters", {}))
        if unknown:
            msg = f"not template parameters: {sorted(unknown)}"
            raise KeyError(msg)

    # ------------------------------------------------------------------ sections

    @property
    def resources(self) -> dict[str, dict[str, Any]]:
        """The ``Resources`` section (unresolved)."""
        resources: dict[str, dict[str, Any]] = self.template["Resources"]
        return resources

    def of_type(self, kind: str) -> list[str]:
        """Logical ids of the resources of one type, in template order."""
        return [name for name, resource in self.resources.items() if resource["Type"] == kind]

    def properties(self, logical_id: str) -> dict[str, Any]:
        """Properties of a resource, with SAM ``Globals`` merged in (unresolved)."""
        resource = self.resources[logical_id]
        own: dict[str, Any] = resource.get("Properties", {})
        section = resource["Type"].removeprefix("AWS::Serverless::")
        if section == resource["Type"]:
            return own
        defaults = self.template.get("Globals", {}).get(section, {})
        return _merge(copy.deepcopy(defaults), own)

    def resolved_properties(self, logical_id: str) -> dict[str, Any]:
        """Properties of a resource with every intrinsic function resolved."""
        resolved: dict[str, Any] = self.resolve(self.properties(logical_id))
        return resolved

    def parameter(self, name: str) -> str | list[str]:
        """Value of a parameter as CloudFormation passes it (lists for list types)."""
        spec = self.template["Parameters"][name]
        raw = self.parameters.get(name, spec.get("Default"))
        if raw is None:
            msg = f"parameter {name} has no default and no value"
            raise KeyError(msg)
        text = str(raw)
        return text.split(",") if spec["Type"] == "CommaDelimitedList" else text

    def condition(self, name: str) -> bool:
        """Value of a named condition."""
        return bool(self.resolve(self.template["Conditions"][name]))

    # ------------------------------------------------------------------ physical resources

    def physical(self, logical_id: str) -> Physical:
        """``Ref`` value and attributes of a resource as deployed."""
        kind = self.resources[logical_id]["Type"]
        if kind not in _PHYSICAL:
            return Physical(f"{logical_id}-physical-id")
        name_key, build = _PHYSICAL[kind]
        props = self.properties(logical_id)
        name = (
            str(self.resolve(props[name_key]))
            if name_key in props
            else f"{STACK_NAME}-{logical_id}-generated".lower()
        )
        return build(name, f"{self.partition}:{{service}}:{self.region}:{self.account}")

    def arn_of(self, logical_id: str) -> str:
        """ARN of a resource (``Fn::GetAtt X.Arn``)."""
        return self.physical(logical_id).attributes["Arn"]

    # ------------------------------------------------------------------ policies

    def statements(self, logical_id: str) -> list[Statement]:
        """The IAM statements of a SAM function's or state machine's role, or of an IAM role.

        A SAM resource whose ``Role`` names one of the template's ``AWS::IAM::Role``
        resources gets that role's inline statements (``Policies`` beside a ``Role``
        raises). Otherwise its own ``Policies``: only inline statement documents are
        understood; a managed policy name or a SAM policy template raises, since it
        cannot be checked here. Sids are unique per role.
        """
        role = self.role_of(logical_id)
        if role is not None:
            return self._role_statements(role)
        policies = self.resolve(self.properties(logical_id).get("Policies", []))
        if not isinstance(policies, list):
            policies = [policies]
        raw = _raw_statements(self.properties(logical_id).get("Policies", []))
        statements = []
        for policy in policies:
            if not isinstance(policy, dict) or set(policy) != {"Statement"}:
                msg = f"{logical_id}: only inline statements can be checked, got {policy!r}"
                raise AssertionError(msg)
            statements += [_statement(logical_id, entry, raw) for entry in policy["Statement"]]
        return statements

    def role_of(self, logical_id: str) -> str | None:
        """The template's ``AWS::IAM::Role`` whose statements ``logical_id`` holds, if any."""
        if self.resources[logical_id]["Type"] == "AWS::IAM::Role":
            return logical_id
        properties = self.properties(logical_id)
        if "Role" not in properties:
            return None
        names = referenced_ids(properties["Role"])
        (name,) = names if len(names) == 1 else (None,)
        if name is None or self.resources.get(name, {}).get("Type") != "AWS::IAM::Role":
            msg = f"{logical_id}: its Role is not one of the template's AWS::IAM::Role resources"
            raise AssertionError(msg)
        if "Policies" in properties:
            msg = f"{logical_id}: Policies beside a Role (SAM would not apply them)"
            raise AssertionError(msg)
        return name

    def _role_statements(self, role: str) -> list[Statement]:
        # ManagedPolicyArns are not statements of the template: iam.role_grants models them.
        properties = self.properties(role)
        raw = _raw_statements(properties.get("Policies", []))
        return [
            _statement(role, entry, raw)
            for policy in self.resolve(properties.get("Policies", []))
            for entry in _as_dicts(policy["PolicyDocument"]["Statement"])
        ]

    def allowed(self, logical_id: str, action: str, resource: str) -> bool:
        """Whether the statements of ``logical_id`` allow ``action`` on ``resource``."""
        return any(s.allows(action, resource) for s in self.statements(logical_id))

    # ------------------------------------------------------------------ intrinsic functions

    def resolve(self, value: Any) -> Any:
        """``value`` with every intrinsic function evaluated."""
        if isinstance(value, list):
            items = [self.resolve(item) for item in value]
            return [item for item in items if item is not NO_VALUE]
        if isinstance(value, dict):
            if len(value) == 1:
                ((key, argument),) = value.items()
                function = _FUNCTIONS.get(key)
                if function is not None:
                    return function(self, argument)
            resolved = {key: self.resolve(item) for key, item in value.items()}
            return {key: item for key, item in resolved.items() if item is not NO_VALUE}
        return value

    def ref(self, name: str) -> Any:
        """``Ref``: a parameter, pseudo parameter or resource."""
        pseudo = {
            "AWS::AccountId": self.account,
            "AWS::Region": self.region,
            "AWS::Partition": self.partition,
            "AWS::StackName": STACK_NAME,
            "AWS::URLSuffix": "amazonaws.com",
            "AWS::NoValue": NO_VALUE,
        }
        if name in pseudo:
            return pseudo[name]
        if name in self.template.get("Parameters", {}):
            return self.parameter(name)
        if name in self.resources:
            return self.physical(name).ref
        msg = f"Ref to unknown name {name!r}"
        raise KeyError(msg)

    def get_att(self, argument: Any) -> str:
        """``Fn::GetAtt`` as ``X.Attr`` or ``[X, Attr]``."""
        logical_id, attribute = (
            argument.split(".", 1) if isinstance(argument, str) else self.resolve(argument)
        )
        attributes = self.physical(logical_id).attributes
        if attribute not in attributes:
            msg = f"{logical_id} has no attribute {attribute} here"
            raise KeyError(msg)
        return attributes[attribute]

    def sub(self, argument: Any) -> str:
        """``Fn::Sub`` with or without a variable map."""
        text, variables = (argument, {}) if isinstance(argument, str) else argument

        def replace(match: re.Match[str]) -> str:
            name = match.group(1)
            if name.startswith("!"):
                return "${" + name[1:] + "}"
            if name in variables:
                return str(self.resolve(variables[name]))
            if "." in name and not name.startswith("AWS::"):
                return self.get_att(name)
            value = self.ref(name)
            return ",".join(value) if isinstance(value, list) else str(value)

        return _SUB.sub(replace, text)


def _function_if(stack: Stack, argument: Any) -> Any:
    name, when_true, when_false = argument
    return stack.resolve(when_true if stack.condition(name) else when_false)


def _function_join(stack: Stack, argument: Any) -> str:
    delimiter, items = argument
    values = stack.resolve(items)
    return str(delimiter).join(str(item) for item in values)


def _function_split(stack: Stack, argument: Any) -> list[str]:
    delimiter, text = argument
    return str(stack.resolve(text)).split(delimiter)


def _function_select(stack: Stack, argument: Any) -> Any:
    index, items = argument
    return stack.resolve(items)[int(stack.resolve(index))]


_FUNCTIONS: dict[str, Any] = {
    "Ref": Stack.ref,
    "Fn::GetAtt": Stack.get_att,
    "Fn::Sub": Stack.sub,
    "Fn::If": _function_if,
    "Fn::Join": _function_join,
    "Fn::Split": _function_split,
    "Fn::Select": _function_select,
    "Fn::Equals": lambda stack, pair: stack.resolve(pair[0]) == stack.resolve(pair[1]),
    "Fn::Not": lambda stack, items: not stack.resolve(items[0]),
    "Fn::And": lambda stack, items: all(stack.resolve(item) for item in items),
    "Fn::Or": lambda stack, items: any(stack.resolve(item) for item in items),
    "Condition": lambda stack, name: stack.condition(name),
}


def _table(name: str, scope: str) -> Physical:
    arn = f"arn:{scope.format(service='dynamodb')}:table/{name}"
    return Physical(name, {"Arn": arn, "StreamArn": f"{arn}/stream/2026-01-01T00:00:00"})


def _queue(name: str, scope: str) -> Physical:
    _, _, region, account = scope.split(":")
    url = f"https://sqs.{region}.amazonaws.com/{account}/{name}"
    arn = f"arn:{scope.format(service='sqs')}:{name}"
    return Physical(url, {"Arn": arn, "QueueName": name, "QueueUrl": url})


def _bucket(name: str, scope: str) -> Physical:
    partition = scope.partition(":")[0]
    return Physical(name, {"Arn": f"arn:{partition}:s3:::{name}"})


def _state_machine(name: str, scope: str) -> Physical:
    arn = f"arn:{scope.format(service='states')}:stateMachine:{name}"
    return Physical(arn, {"Arn": arn, "Name": name})


def _function(name: str, scope: str) -> Physical:
    return Physical(name, {"Arn": f"arn:{scope.format(service='lambda')}:function:{name}"})


def _log_group(name: str, scope: str) -> Physical:
    return Physical(name, {"Arn": f"arn:{scope.format(service='logs')}:log-group:{name}:*"})


def _topic(name: str, scope: str) -> Physical:
    arn = f"arn:{scope.format(service='sns')}:{name}"
    return Physical(arn, {"TopicArn": arn, "TopicName": name})


def _rule(name: str, scope: str) -> Physical:
    return Physical(name, {"Arn": f"arn:{scope.format(service='events')}:rule/{name}"})


def _role(name: str, scope: str) -> Physical:
    partition, _, _, account = scope.split(":")
    return Physical(name, {"Arn": f"arn:{partition}:iam::{account}:role/{name}"})


# Resource type → (property holding its name, what Ref and GetAtt return).
_PHYSICAL: dict[str, tuple[str, Callable[[str, str], Physical]]] = {
    "AWS::DynamoDB::Table": ("TableName", _table),
    "AWS::SQS::Queue": ("QueueName", _queue),
    "AWS::S3::Bucket": ("BucketName", _bucket),
    "AWS::Serverless::StateMachine": ("Name", _state_machine),
    "AWS::StepFunctions::StateMachine": ("StateMachineName", _state_machine),
    "AWS::Serverless::Function": ("FunctionName", _function),
    "AWS::Lambda::Function": ("FunctionName", _function),
    "AWS::Logs::LogGroup": ("LogGroupName", _log_group),
    "AWS::SNS::Topic": ("TopicName", _topic),
    "AWS::IAM::Role": ("RoleName", _role),
    "AWS::Events::Rule": ("Name", _rule),
}


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            base[key] = _merge(base[key], value)
        else:
            base[key] = value
    return base


def _as_list(value: Any) -> list[str]:
    return [str(item) for item in (value if isinstance(value, list) else [value])]


def _as_dicts(value: Any) -> list[dict[str, Any]]:
    return list(value) if isinstance(value, list) else [value]


def _statement(holder: str, entry: dict[str, Any], raw: dict[str, dict[str, Any]]) -> Statement:
    sid = entry.get("Sid")
    if sid not in raw:
        msg = f"{holder}: every statement needs a unique Sid ({entry!r})"
        raise AssertionError(msg)
    return Statement(
        sid=sid,
        effect=entry["Effect"],
        actions=tuple(_as_list(entry["Action"])),
        resources=tuple(_as_list(entry["Resource"])),
        raw=raw[sid],
    )


def _raw_statements(policies: Any) -> dict[str, dict[str, Any]]:
    """Unresolved statements by Sid, wherever they sit (also inside ``Fn::If``)."""
    found: dict[str, dict[str, Any]] = {}
    duplicates: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if "Effect" in node and "Action" in node:
                sid = str(node.get("Sid"))
                if sid in found:
                    duplicates.add(sid)
                found[sid] = node
                return
            for item in node.values():
                walk(item)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(policies)
    return {sid: node for sid, node in found.items() if sid not in duplicates}


def referenced_ids(value: Any) -> set[str]:
    """Logical ids and parameters ``value`` refers to (``Ref``, ``GetAtt``, ``${...}``)."""
    names: set[str] = set()
    if isinstance(value, list):
        for item in value:
            names |= referenced_ids(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            if key == "Ref" and isinstance(item, str):
                names.add(item)
            elif key == "Fn::GetAtt":
                names.add(item.split(".")[0] if isinstance(item, str) else str(item[0]))
            elif key == "Fn::Sub":
                text = item if isinstance(item, str) else item[0]
                names |= {
                    m.split(".")[0] for m in _SUB.findall(text) if not m.startswith(("!", "AWS::"))
                }
                if not isinstance(item, str):
                    names |= referenced_ids(item[1])
            else:
                names |= referenced_ids(item)
    return names
