"""``template.yaml`` as local mode reads it: intrinsic functions resolved, resources described.

One reader for everything local mode takes from the template: the platform model's function
settings (:mod:`dependency_tracker_local.platform`) and the queues, tables and bucket
:class:`~dependency_tracker_local.stack.EmbeddedStack` creates (:func:`describe`).

:class:`Deployed` resolves the intrinsic functions the template uses (``Ref``,
``Fn::GetAtt``, ``Fn::Sub``, ``Fn::Join``, ``Fn::Split``, ``Fn::Select``, ``Fn::If`` and the
condition functions) for given parameter values, account and region, giving every resource
the name and ARN it would get when deployed. SAM's ``Globals`` are merged into each
function the way SAM merges them (maps merged, everything else replaced). The contract
tests' ``Stack`` (``tests/unit/template_contract/cfn.py``) is this class plus IAM; they read
the file with cfn-lint's decoder, a development tool local mode cannot import, so
:func:`load_template` reads it with PyYAML.

Outside a checkout (the package installed without ``template.yaml``) there is no template to
read: :func:`builtin_resources` gives the stack the template's resources as they are in this
release, and ``tests/unit/local/test_stack_resources.py`` holds the two equal.
"""

from __future__ import annotations

import copy
import json
import pickle
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml  # type: ignore[import-untyped]  # PyYAML comes with moto[s3,server]; no stubs here

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

TEMPLATE_PATH = Path(__file__).resolve().parents[2] / "template.yaml"

ACCOUNT = "123456789012"
REGION = "us-east-1"
PARTITION = "aws"
STACK_NAME = "deptrack-stack"


class TemplateError(ValueError):
    """The template lacks what the reader needs, or holds what it cannot resolve."""


# ---------------------------------------------------------------------- reading the file


# libyaml's parser (in PyYAML's wheels) reads the template in a tenth of the pure-Python time.
_SafeLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _CfnLoader(_SafeLoader):  # type: ignore[misc]
    """YAML with CloudFormation's short-form tags read as their long forms."""


def _short_form(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> dict[str, Any]:
    value: Any
    if isinstance(node, yaml.ScalarNode):
        value = loader.construct_scalar(node)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)
    if suffix in ("Ref", "Condition"):
        return {suffix: value}
    if suffix == "GetAtt" and isinstance(value, str):
        value = value.split(".", 1)
    return {f"Fn::{suffix}": value}


_CfnLoader.add_multi_constructor("!", _short_form)


# Parsed templates by (path, modification time, size): every stack start reads the file
# twice (its resources, the platform model's settings). An edited file is read again.
_PARSED: dict[tuple[str, int, int], bytes] = {}


def load_template(path: Path = TEMPLATE_PATH) -> dict[str, Any]:
    """``template.yaml`` as plain data (short-form tags expanded); a fresh copy each call."""
    stat = path.stat()
    key = (str(path.resolve()), stat.st_mtime_ns, stat.st_size)
    parsed = _PARSED.get(key)
    if parsed is None:
        text = path.read_text(encoding="utf-8")
        parsed = pickle.dumps(yaml.load(text, Loader=_CfnLoader))  # noqa: S506 - a SafeLoader
        _PARSED[key] = parsed
    loaded: dict[str, Any] = pickle.loads(parsed)  # noqa: S301 - bytes this process wrote
    return loaded


# ---------------------------------------------------------------------- intrinsic functions


class _NoValue:
    """``AWS::NoValue``: the property or list item disappears."""

    def __repr__(self) -> str:
        return "AWS::NoValue"


NO_VALUE: Any = _NoValue()
_SUB = re.compile(r"\$\{([^}]+)\}")


@dataclass(frozen=True)
class Physical:
    """What ``Ref`` and ``Fn::GetAtt`` return for one deployed resource."""

    ref: str
    attributes: dict[str, str] = field(default_factory=dict)


@dataclass
class Deployed:
    """The template deployed with ``parameters`` (defaults for the rest).

    Raises:
        KeyError: A parameter the template does not declare.
    """

    template: dict[str, Any]
    parameters: dict[str, str] = field(default_factory=dict)
    account: str = ACCOUNT
    region: str = REGION
    partition: str = PARTITION
    stack_name: str = STACK_NAME

    def __post_init__(self) -> None:
        unknown = set(self.parameters) - set(self.template.get("Parameters", {}))
        if unknown:
            msg = f"not template parameters: {sorted(unknown)}"
            raise KeyError(msg)

    @property
    def resources(self) -> dict[str, dict[str, Any]]:
        """The ``Resources`` section (unresolved)."""
        resources: dict[str, dict[str, Any]] = self.template.get("Resources", {})
        return resources

    def of_type(self, kind: str) -> list[str]:
        """Logical ids of the resources of one type, in template order."""
        return [name for name, resource in self.resources.items() if resource["Type"] == kind]

    def created(self, logical_id: str) -> bool:
        """Whether the resource exists with these parameters (its ``Condition`` holds)."""
        condition = self.resources[logical_id].get("Condition")
        return condition is None or self.condition(condition)

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
            else f"{self.stack_name}-{logical_id}-generated".lower()
        )
        return build(name, f"{self.partition}:{{service}}:{self.region}:{self.account}")

    def arn_of(self, logical_id: str) -> str:
        """ARN of a resource (``Fn::GetAtt X.Arn``)."""
        return self.physical(logical_id).attributes["Arn"]

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
            "AWS::StackName": self.stack_name,
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


def _function_if(stack: Deployed, argument: Any) -> Any:
    name, when_true, when_false = argument
    return stack.resolve(when_true if stack.condition(name) else when_false)


def _function_join(stack: Deployed, argument: Any) -> str:
    delimiter, items = argument
    values = stack.resolve(items)
    return str(delimiter).join(str(item) for item in values)


def _function_split(stack: Deployed, argument: Any) -> list[str]:
    delimiter, text = argument
    return str(stack.resolve(text)).split(delimiter)


def _function_select(stack: Deployed, argument: Any) -> Any:
    index, items = argument
    return stack.resolve(items)[int(stack.resolve(index))]


_FUNCTIONS: dict[str, Any] = {
    "Ref": Deployed.ref,
    "Fn::GetAtt": Deployed.get_att,
    "Fn::Sub": Deployed.sub,
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


# ---------------------------------------------------------------------- functions

FUNCTION_TYPES = ("AWS::Serverless::Function", "AWS::Lambda::Function")


@dataclass(frozen=True)
class SqsTrigger:
    """One SQS event source of a function."""

    event: str
    # Logical id of the queue it reads (None: the ARN names no queue of the template).
    queue: str | None
    # ScalingConfig.MaximumConcurrency as resolved (None: not set); the platform checks it.
    maximum_concurrency: Any = None


@dataclass(frozen=True)
class Function:
    """What local mode reads of one function: its name, guards and SQS triggers."""

    logical_id: str
    # Its FunctionName after "${Prefix}-": the name the pumps give it.
    name: str
    # ReservedConcurrentExecutions as resolved (None: not set); the platform checks it.
    reserved_concurrency: Any
    recursive_loop: str | None
    sqs_triggers: Mapping[str, SqsTrigger]


def functions(deployed: Deployed) -> dict[str, Function]:
    """Every function the template creates with the deployment's parameters, by logical id."""
    queues = {deployed.arn_of(q): q for q in deployed.of_type("AWS::SQS::Queue")}
    found: dict[str, Function] = {}
    for logical_id, resource in deployed.resources.items():
        if resource.get("Type") not in FUNCTION_TYPES or not deployed.created(logical_id):
            continue
        properties = deployed.properties(logical_id)
        reserved = deployed.resolve(properties.get("ReservedConcurrentExecutions", NO_VALUE))
        loop = deployed.resolve(properties.get("RecursiveLoop", NO_VALUE))
        triggers: dict[str, SqsTrigger] = {}
        for event_name, event in (properties.get("Events") or {}).items():
            if event.get("Type") != "SQS":
                continue
            event_properties = deployed.resolve(event.get("Properties") or {})
            scaling = event_properties.get("ScalingConfig") or {}
            triggers[event_name] = SqsTrigger(
                event=event_name,
                queue=queues.get(str(event_properties.get("Queue"))),
                maximum_concurrency=scaling.get("MaximumConcurrency"),
            )
        found[logical_id] = Function(
            logical_id=logical_id,
            name=_local_name(logical_id, properties.get("FunctionName")),
            reserved_concurrency=None if reserved is NO_VALUE else reserved,
            recursive_loop=None if loop is NO_VALUE else str(loop),
            sqs_triggers=triggers,
        )
    return found


def _local_name(logical_id: str, function_name: Any) -> str:
    """The name the pumps give a function: its FunctionName after ``${Prefix}-``."""
    if isinstance(function_name, dict) and isinstance(function_name.get("Fn::Sub"), str):
        text: str = function_name["Fn::Sub"]
        if text.startswith("${Prefix}-"):
            return text.removeprefix("${Prefix}-")
    return function_name if isinstance(function_name, str) else logical_id


# ---------------------------------------------------------------------- the stack's resources

# The SQS attributes the stack takes from each queue's properties.
QUEUE_ATTRIBUTES = ("VisibilityTimeout", "MaximumMessageSize", "MessageRetentionPeriod")


@dataclass(frozen=True)
class Redrive:
    """A redrive policy: after ``max_receive_count`` receives a message moves to ``target``."""

    target: str  # the DLQ's logical id
    max_receive_count: int


@dataclass(frozen=True)
class Queue:
    """One queue as the template declares it."""

    logical_id: str
    name: str
    # CreateQueue attributes among QUEUE_ATTRIBUTES that the template sets, as strings.
    attributes: Mapping[str, str]
    redrive: Redrive | None = None


@dataclass(frozen=True)
class Resources:
    """The queues, tables and bucket local mode creates, and which queue each trigger reads.

    ``queues`` holds the queues an SQS trigger reads and their redrive targets (the
    template's other queues are destinations the pumps keep in memory); ``triggers`` maps
    (function name, event name) to the logical id of the queue that trigger reads.
    """

    queues: Mapping[str, Queue]
    tables: Mapping[str, str]
    buckets: Mapping[str, str]
    triggers: Mapping[tuple[str, str], str]


def describe(deployed: Deployed) -> Resources:
    """The stack's resources as the template declares them with the deployment's parameters.

    Raises:
        TemplateError: A queue's redrive policy names no queue of the template, or a
            receive count is not a whole number.
    """
    declared = {
        q: _queue_of(deployed, q)
        for q in deployed.of_type("AWS::SQS::Queue")
        if deployed.created(q)
    }
    triggers = {
        (function.name, trigger.event): trigger.queue
        for function in functions(deployed).values()
        for trigger in function.sqs_triggers.values()
        if trigger.queue is not None
    }
    wanted = set(triggers.values())
    redrives = [declared[q].redrive for q in wanted]
    wanted |= {redrive.target for redrive in redrives if redrive is not None}
    return Resources(
        queues={q: queue for q, queue in declared.items() if q in wanted},
        tables=_names(deployed, "AWS::DynamoDB::Table", "TableName"),
        buckets=_names(deployed, "AWS::S3::Bucket", "BucketName"),
        triggers=triggers,
    )


def _names(deployed: Deployed, kind: str, key: str) -> dict[str, str]:
    return {
        logical_id: str(deployed.resolve(deployed.properties(logical_id)[key]))
        for logical_id in deployed.of_type(kind)
        if deployed.created(logical_id)
    }


def _queue_of(deployed: Deployed, logical_id: str) -> Queue:
    properties = deployed.resolved_properties(logical_id)
    redrive = properties.get("RedrivePolicy")
    if isinstance(redrive, str):  # CloudFormation also takes the policy as JSON text
        redrive = json.loads(redrive)
    target: Redrive | None = None
    if redrive:
        by_arn = {deployed.arn_of(q): q for q in deployed.of_type("AWS::SQS::Queue")}
        dlq = by_arn.get(str(redrive.get("deadLetterTargetArn")))
        count = str(redrive.get("maxReceiveCount", "")).strip()
        if dlq is None or not count.isdigit():
            msg = f"template.yaml: {logical_id}'s RedrivePolicy cannot be read: {redrive!r}"
            raise TemplateError(msg)
        target = Redrive(dlq, int(count))
    return Queue(
        logical_id=logical_id,
        name=str(properties["QueueName"]),
        attributes={k: str(properties[k]) for k in QUEUE_ATTRIBUTES if k in properties},
        redrive=target,
    )


# The fallback's queues a trigger reads: logical id -> (name after "{prefix}-",
# VisibilityTimeout, its DLQ, the trigger reading it as (function, event)).
_BUILTIN_SOURCES = {
    "ProcessQueue": ("process", 420, "ProcessDlq", ("process", "ProcessQueue")),
    "JoinQueue": ("join-chunks", 360, "ProcessDlq", ("process", "JoinQueue")),
    "StatusReportQueue": (
        "status-reports",
        720,
        "StatusReportDlq",
        ("update-state", "StatusReports"),
    ),
    "CirrusEventsQueue": (
        "cirrus-events",
        720,
        "CirrusEventsDlq",
        ("cirrus-events", "CirrusEvents"),
    ),
}
_BUILTIN_DLQS = {
    "ProcessDlq": "process-dlq",
    "StatusReportDlq": "status-reports-dlq",
    "CirrusEventsDlq": "cirrus-events-dlq",
}
_CIRRUS_ONLY = frozenset({"CirrusEventsQueue", "CirrusEventsDlq"})


def builtin_resources(
    prefix: str, *, cirrus: bool = False, account: str = ACCOUNT, region: str = REGION
) -> Resources:
    """The template's resources as this release declares them (defaults of its parameters).

    Only for a package installed without ``template.yaml``: the stack still needs names.
    """
    queues: dict[str, Queue] = {}
    triggers: dict[tuple[str, str], str] = {}
    for logical_id, suffix in _BUILTIN_DLQS.items():
        if cirrus or logical_id not in _CIRRUS_ONLY:
            attributes = {"MessageRetentionPeriod": "1209600"}
            queues[logical_id] = Queue(logical_id, f"{prefix}-{suffix}", attributes)
    for logical_id, (suffix, visibility, dlq, trigger) in _BUILTIN_SOURCES.items():
        if cirrus or logical_id not in _CIRRUS_ONLY:
            attributes = {
                "VisibilityTimeout": str(visibility),
                "MaximumMessageSize": "262144",
                "MessageRetentionPeriod": "345600",
            }
            queues[logical_id] = Queue(
                logical_id, f"{prefix}-{suffix}", attributes, Redrive(dlq, max_receive_count=10)
            )
            triggers[trigger] = logical_id
    return Resources(
        queues=queues,
        tables={"StateTable": f"{prefix}-state", "DependencyTable": f"{prefix}-dependencies"},
        buckets={"PayloadBucket": f"{prefix}-payloads-{account}-{region}"},
        triggers=triggers,
    )
