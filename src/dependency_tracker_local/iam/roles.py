"""The roles of ``template.yaml`` as CloudFormation creates them: the one place that reads them.

Every function and state machine of the template names its own ``AWS::IAM::Role``
(``Role: !GetAtt XRole.Arn``), so SAM adds nothing to it: a role's statements are its
inline ``Policies`` with the intrinsic functions resolved for the deployment's parameters
(:class:`~dependency_tracker_local.template.Deployed`). A resource holding ``Policies`` of
its own instead is read too; a managed policy or a SAM policy template raises
(:class:`RoleError`), since it cannot be evaluated offline.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from dependency_tracker_local.iam.policy import Statement
from dependency_tracker_local.template import FUNCTION_TYPES

if TYPE_CHECKING:
    from dependency_tracker_local.template import Deployed

IAM_ROLE = "AWS::IAM::Role"
STATE_MACHINE_TYPES = ("AWS::Serverless::StateMachine", "AWS::StepFunctions::StateMachine")
RESOURCE_POLICY_TYPES = ("AWS::SQS::QueuePolicy", "AWS::S3::BucketPolicy", "AWS::SNS::TopicPolicy")


class RoleError(ValueError):
    """A role the model cannot read (a managed policy, a policy template, a duplicate Sid)."""


@dataclass(frozen=True)
class Role:
    """One deployed role: its name, ARN and statements."""

    logical_id: str
    name: str
    arn: str
    statements: tuple[Statement, ...]

    def session_arn(self, session: str) -> str:
        """The caller AWS names in a denial: ``arn:aws:sts::ACCOUNT:assumed-role/ROLE/SESSION``."""
        partition, account = self.arn.split(":")[1], self.arn.split(":")[4]
        return f"arn:{partition}:sts::{account}:assumed-role/{self.name}/{session}"


def role_of(deployed: Deployed, logical_id: str) -> str | None:
    """The template's ``AWS::IAM::Role`` whose statements ``logical_id`` holds, if any."""
    if deployed.resources[logical_id]["Type"] == IAM_ROLE:
        return logical_id
    properties = deployed.properties(logical_id)
    if "Role" not in properties:
        return None
    names = referenced_ids(properties["Role"])
    (name,) = names if len(names) == 1 else (None,)
    if name is None or deployed.resources.get(name, {}).get("Type") != IAM_ROLE:
        msg = f"{logical_id}: its Role is not one of the template's AWS::IAM::Role resources"
        raise RoleError(msg)
    if "Policies" in properties:
        msg = f"{logical_id}: Policies beside a Role (SAM would not apply them)"
        raise RoleError(msg)
    return name


def statements(deployed: Deployed, logical_id: str) -> list[Statement]:
    """The statements of a function's or state machine's role, or of an IAM role.

    Sids are unique per role (a statement is named by its Sid in tests and denials).
    """
    role = role_of(deployed, logical_id)
    if role is not None:
        policies = deployed.properties(role).get("Policies", [])
        raw = _raw_statements(policies)
        return [
            _statement(role, entry, raw)
            for policy in deployed.resolve(policies)
            for entry in _as_dicts(policy["PolicyDocument"]["Statement"])
        ]
    unresolved = deployed.properties(logical_id).get("Policies", [])
    policies = deployed.resolve(unresolved)
    raw = _raw_statements(unresolved)
    found = []
    for policy in policies if isinstance(policies, list) else [policies]:
        if not isinstance(policy, dict) or set(policy) != {"Statement"}:
            msg = f"{logical_id}: only inline statements can be evaluated, got {policy!r}"
            raise RoleError(msg)
        found += [_statement(logical_id, entry, raw) for entry in policy["Statement"]]
    return found


def resource_policy_statements(deployed: Deployed) -> list[Statement]:
    """Every statement of the template's queue, bucket and topic policies, resolved."""
    found = []
    for kind in RESOURCE_POLICY_TYPES:
        for logical_id in deployed.of_type(kind):
            if deployed.created(logical_id):
                document = deployed.resolved_properties(logical_id)["PolicyDocument"]
                found += [Statement.parse(entry) for entry in _as_dicts(document["Statement"])]
    return found


def _role(deployed: Deployed, holder: str) -> Role:
    name = role_of(deployed, holder)
    if name is None:
        msg = f"{holder} has no role of the template's own"
        raise RoleError(msg)
    physical = deployed.physical(name)
    return Role(name, physical.ref, physical.attributes["Arn"], tuple(statements(deployed, holder)))


def function_roles(deployed: Deployed) -> dict[str, Role]:
    """Each function's role, by its name after ``${Prefix}-`` (the pumps' name for it)."""
    from dependency_tracker_local.template import functions  # noqa: PLC0415 - no cycle at import

    return {
        function.name: _role(deployed, logical_id)
        for logical_id, function in functions(deployed).items()
        if deployed.resources[logical_id]["Type"] in FUNCTION_TYPES
    }


def state_machine_roles(deployed: Deployed) -> dict[str, Role]:
    """Each state machine's role, by the state machine's ARN."""
    return {
        deployed.physical(logical_id).ref: _role(deployed, logical_id)
        for kind in STATE_MACHINE_TYPES
        for logical_id in deployed.of_type(kind)
        if deployed.created(logical_id)
    }


def _as_dicts(value: Any) -> list[dict[str, Any]]:
    return list(value) if isinstance(value, list) else [value]


def _statement(holder: str, entry: dict[str, Any], raw: dict[str, dict[str, Any]]) -> Statement:
    sid = entry.get("Sid")
    if sid not in raw:
        msg = f"{holder}: every statement needs a unique Sid ({entry!r})"
        raise RoleError(msg)
    return replace(Statement.parse(entry), raw=raw[sid])


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


_SUB_NAMES = re.compile(r"\$\{([^}]+)\}")


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
                    m.split(".")[0]
                    for m in _SUB_NAMES.findall(text)
                    if not m.startswith(("!", "AWS::"))
                }
                if not isinstance(item, str):
                    names |= referenced_ids(item[1])
            else:
                names |= referenced_ids(item)
    return names
