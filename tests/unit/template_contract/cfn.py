"""Read ``template.yaml`` as CloudFormation would, just far enough for contract tests.

:class:`Stack` is local mode's reader (``dependency_tracker_local.template.Deployed``: the
intrinsic functions ``Ref``, ``Fn::GetAtt``, ``Fn::Sub``, ``Fn::Join``, ``Fn::Split``,
``Fn::Select``, ``Fn::If`` and the condition functions, resolved for given parameter values,
account and region; SAM's ``Globals`` merged the way SAM merges them) plus the roles' IAM
statements. The file itself is read with cfn-lint's decoder, which also checks that it parses.

:class:`Statement` is an IAM statement with its resources resolved; ``allows``
matches an action and a resource ARN the way IAM does (``*`` and ``?``
wildcards, case-sensitive resources, case-insensitive actions).
"""

from __future__ import annotations

import fnmatch
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cfnlint.decode import decode

from dependency_tracker_local.template import ACCOUNT, PARTITION, REGION, STACK_NAME, Deployed

__all__ = [
    "ACCOUNT",
    "LOG_DELIVERY_ACTIONS",
    "PARTITION",
    "REGION",
    "ROOT",
    "STACK_NAME",
    "TEMPLATE_PATH",
    "Stack",
    "Statement",
    "load_template",
    "referenced_ids",
]

ROOT = Path(__file__).resolve().parents[3]
TEMPLATE_PATH = ROOT / "template.yaml"

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


class Stack(Deployed):
    """The template deployed with ``parameters`` (defaults for the rest), with its IAM."""

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
