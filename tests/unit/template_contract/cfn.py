"""Read ``template.yaml`` as CloudFormation would, just far enough for contract tests.

:class:`Stack` is local mode's reader (``dependency_tracker_local.template.Deployed``: the
intrinsic functions ``Ref``, ``Fn::GetAtt``, ``Fn::Sub``, ``Fn::Join``, ``Fn::Split``,
``Fn::Select``, ``Fn::If`` and the condition functions, resolved for given parameter values,
account and region; SAM's ``Globals`` merged the way SAM merges them) plus the roles' IAM
statements. The file itself is read with cfn-lint's decoder, which also checks that it parses.

:class:`Statement` is the IAM model's statement (``dependency_tracker_local.iam.policy``);
``allows`` matches an action and a resource ARN the way IAM does (``*`` and ``?``
wildcards, case-sensitive resources, case-insensitive actions).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cfnlint.decode import decode

from dependency_tracker_local.iam import roles
from dependency_tracker_local.iam.policy import Statement
from dependency_tracker_local.iam.roles import referenced_ids
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


def load_template(path: Path = TEMPLATE_PATH) -> dict[str, Any]:
    """The template as plain dicts, lists and scalars (short-form tags expanded)."""
    decoded, errors = decode(str(path))
    if errors or decoded is None:
        msg = f"{path} does not parse: {errors}"
        raise AssertionError(msg)
    plain: dict[str, Any] = json.loads(json.dumps(decoded, default=str))
    return plain


class Stack(Deployed):
    """The template deployed with ``parameters`` (defaults for the rest), with its IAM.

    The roles are read by local mode's IAM model (``dependency_tracker_local.iam.roles``),
    the one place that reads them.
    """

    def statements(self, logical_id: str) -> list[Statement]:
        """The IAM statements of a SAM function's or state machine's role, or of an IAM role."""
        return roles.statements(self, logical_id)

    def role_of(self, logical_id: str) -> str | None:
        """The template's ``AWS::IAM::Role`` whose statements ``logical_id`` holds, if any."""
        return roles.role_of(self, logical_id)

    def allowed(self, logical_id: str, action: str, resource: str) -> bool:
        """Whether the statements of ``logical_id`` allow ``action`` on ``resource``.

        Conditions are not asked here (no request keys): a conditional grant does not
        count. The IAM model evaluates each call with its keys as it is made.
        """
        return any(s.allows(action, resource) for s in self.statements(logical_id))
