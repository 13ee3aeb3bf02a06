"""IAM enforced at call time: every botocore call made as a role is evaluated first.

A handler invocation the embedded stack pumps runs as its function's role, and a task
state of a state machine runs as that state machine's role (:mod:`.machines`): the
principal is a ``contextvars.ContextVar`` set around the work, which the handlers' worker
threads carry (``dependency_tracker.core.threads``). One patch of
``botocore.client.BaseClient._make_api_call``, installed once per process, evaluates the
call's IAM requests (:mod:`.requests`) against the principal's statements
(:mod:`.policy`) and raises the error AWS raises for a denial, before the call reaches
moto. Without a principal (user or test code, the pumps' own polling, cirrus-geo's
Lambdas) it does nothing. S3's rule for a missing key is modelled too: ``NoSuchKey`` only
to a caller allowed ``s3:ListBucket`` on the bucket for that request, else ``AccessDenied``.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from dependency_tracker_local.iam import roles as role_reader
from dependency_tracker_local.iam.policy import Decision, Request, Statement, evaluate
from dependency_tracker_local.iam.principal import Principal, acting_as, current
from dependency_tracker_local.iam.requests import Scope, list_bucket_for, requests_for

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from dependency_tracker_local.iam.roles import Role
    from dependency_tracker_local.template import Deployed

_log = logging.getLogger(__name__)
ENV_SWITCH = "DEPTRACK_IAM"
ENV_PARAMETERS = "DEPTRACK_STACK_PARAMETERS"
# The error each service answers a denial with: (code, HTTP status).
_DENIED: dict[str, tuple[str, int]] = {
    "s3": ("AccessDenied", 403),
    "sqs": ("AccessDenied", 403),
    "sns": ("AuthorizationError", 403),
    "lambda": ("AccessDeniedException", 403),
}
_DEFAULT_DENIED = ("AccessDeniedException", 400)  # DynamoDB, Step Functions, EventBridge, SSM
_MISSING_KEY_CODES = {"NoSuchKey", "404"}
# A parent's answer: refused when the parent's state machine is not one the stack may answer.
_PARENT_ANSWERS = {"states:SendTaskSuccess", "states:SendTaskFailure"}
GRANT_PARAMETER = "ExtraParentStateMachineArns"


def wanted() -> bool:
    """Whether the stack enforces IAM: yes unless ``DEPTRACK_IAM=0``."""
    return os.environ.get(ENV_SWITCH, "1") != "0"


def stack_parameters() -> dict[str, str]:
    """Template parameters for the embedded stack: ``DEPTRACK_STACK_PARAMETERS``, a JSON object.

    Raises:
        ValueError: The variable is not a JSON object of strings.
    """
    text = os.environ.get(ENV_PARAMETERS, "").strip()
    if not text:
        return {}
    found = json.loads(text)
    if not isinstance(found, dict) or not all(isinstance(v, str) for v in found.values()):
        msg = f"{ENV_PARAMETERS} must be a JSON object of strings, e.g. "
        msg += '{"ExtraParentStateMachineArns": "arn:aws:states:...:stateMachine:my-*"}'
        raise ValueError(msg)
    return {str(k): v for k, v in found.items()}


@dataclass(frozen=True)
class Denial:
    """A call a role was refused, as AWS would refuse it."""

    caller: str  # the assumed-role session ARN
    role: str  # the role's logical id in the template
    operation: str  # service and operation, as botocore names them
    action: str
    resource: str
    decision: Decision


@dataclass(eq=False)  # one model per stack, known by identity
class IamModel:
    """The roles of one deployment, the decisions made for them, and the denials.

    ``functions`` maps a function's name (after ``{Prefix}-``) to its role;
    ``state_machines`` a state machine's ARN to its role. ``denials`` lists every call
    refused, once per call; each is also logged at WARNING.
    """

    functions: Mapping[str, Role]
    state_machines: Mapping[str, Role]
    resource_policy: Sequence[Statement] = ()
    prefix: str = ""
    region: str = "us-east-1"
    account: str = "123456789012"
    denials: list[Denial] = field(default_factory=list)
    # Statements by role ARN after :meth:`update` (a stack update): they replace the roles'.
    _statements: dict[str, tuple[Statement, ...]] = field(default_factory=dict, repr=False)
    _decisions: dict[tuple[str, Request], Decision] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def from_deployed(cls, deployed: Deployed, prefix: str) -> IamModel:
        """The model of ``deployed``'s functions and state machines."""
        return cls(
            functions=role_reader.function_roles(deployed),
            state_machines=role_reader.state_machine_roles(deployed),
            resource_policy=[
                s for s in role_reader.resource_policy_statements(deployed) if s.effect == "Deny"
            ],
            prefix=prefix,
            region=deployed.region,
            account=deployed.account,
        )

    def __post_init__(self) -> None:
        install()

    def update(self, deployed: Deployed) -> None:
        """Take the statements of ``deployed``'s roles, as a stack update changes their policies.

        The roles keep their ARNs (their names come from the template's logical ids), so the
        principals already made, the running handlers' included, are judged by the new
        statements from the next call on.
        """
        roles = [
            *role_reader.function_roles(deployed).values(),
            *role_reader.state_machine_roles(deployed).values(),
        ]
        with self._lock:
            self._statements = {role.arn: role.statements for role in roles}
            self._decisions.clear()

    # ------------------------------------------------------------------ principals

    def function(self, name: str) -> Principal | None:
        """The principal of function ``name`` (None: the template has no such function)."""
        role = self.functions.get(name)
        return None if role is None else Principal(role, f"{self.prefix}-{name}", self)

    def as_function(self, name: str, handler: Callable[..., Any]) -> Callable[..., Any]:
        """``handler`` run as function ``name``'s role (unchanged if it has none)."""
        principal = self.function(name)
        if principal is None:
            return handler

        @functools.wraps(handler)
        def invoke(*args: Any, **kwargs: Any) -> Any:
            with acting_as(principal):
                return handler(*args, **kwargs)

        return invoke

    def state_machine(self, arn: str) -> Principal | None:
        """The principal of the state machine ``arn`` (None: not one of the template's)."""
        role = self.state_machines.get(arn)
        return None if role is None else Principal(role, arn.rpartition(":")[2], self)

    # ------------------------------------------------------------------ decisions

    def decide(self, role: Role, request: Request) -> Decision:
        """The decision for ``request`` by ``role`` (cached per role and request)."""
        key = (role.arn, request)
        decision = self._decisions.get(key)
        if decision is None:
            statements = self._statements.get(role.arn, role.statements)
            decision = evaluate(statements, request, self.resource_policy)
            with self._lock:
                self._decisions[key] = decision
        return decision

    def authorize(
        self, principal: Principal, service: str, operation: str, params: dict[str, Any]
    ) -> Denial | None:
        """The first denial among the call's IAM requests, recorded; None when all are allowed."""
        scope = Scope(self.region, self.account, self.token_owner)
        for request in requests_for(service, operation, params, scope):
            decision = self.decide(principal.role, request)
            if decision is not Decision.ALLOW:
                return self._deny(principal, f"{service}.{operation}", request, decision)
        return None

    def lists_bucket(self, principal: Principal, params: dict[str, Any]) -> bool:
        """Whether S3 tells ``principal`` a key is missing (``s3:ListBucket`` on the bucket)."""
        request = list_bucket_for(params, Scope(self.region, self.account, self.token_owner))
        return self.decide(principal.role, request) is Decision.ALLOW

    def _deny(
        self, principal: Principal, operation: str, request: Request, decision: Decision
    ) -> Denial:
        denial = Denial(
            principal.caller,
            principal.role.logical_id,
            operation,
            request.action,
            request.resource,
            decision,
        )
        with self._lock:
            self.denials.append(denial)
        _log.warning(
            "IAM denied %s: %s may not %s on %s (%s)%s",
            operation,
            principal.caller,
            request.action,
            request.resource,
            decision,
            _hint(request),
        )
        return denial

    def token_owner(self, token: str) -> str | None:
        """The ARN of the state machine whose execution holds ``token`` (moto's backend)."""
        from moto.stepfunctions.parser.models import stepfunctions_parser_backends  # noqa: PLC0415

        from dependency_tracker_local.task_tokens import _owner  # noqa: PLC0415

        found = _owner(stepfunctions_parser_backends[self.account][self.region], token)
        return None if found is None else str(found[0].state_machine_arn)


def _hint(request: Request) -> str:
    """What a denial of a parent's answer means, and how to allow it locally ("" otherwise)."""
    if request.action not in _PARENT_ANSWERS:
        return ""
    example = json.dumps({GRANT_PARAMETER: request.resource})
    return (
        f": the parent's state machine {request.resource} is not one the stack may answer; "
        f"allow it with the stack's {GRANT_PARAMETER} parameter (locally: "
        f"{ENV_PARAMETERS}='{example}' in serve's environment, or "
        f"EmbeddedStack(parameters={{{GRANT_PARAMETER!r}: ...}}))"
    )


# ---------------------------------------------------------------------- the botocore patch


def denial_error(client: Any, operation: str, denial: Denial) -> ClientError:
    """The exception botocore raises for ``denial`` (AWS's code, status and message)."""
    service = client.meta.service_model.service_name
    code, status = _DENIED.get(service, _DEFAULT_DENIED)
    reason = (
        "with an explicit deny in a resource-based policy"
        if denial.decision is Decision.EXPLICIT_DENY
        else f"because no identity-based policy allows the {denial.action} action"
    )
    message = (
        f"User: {denial.caller} is not authorized to perform: {denial.action} "
        f"on resource: {denial.resource} {reason}"
    )
    return _client_error(client, operation, code, status, message)


def _client_error(client: Any, operation: str, code: str, status: int, message: str) -> ClientError:
    response: dict[str, Any] = {
        "Error": {"Code": code, "Message": message},
        "ResponseMetadata": {"HTTPStatusCode": status, "HTTPHeaders": {}},
    }
    error_class: type[ClientError] = client.exceptions.from_code(code)
    return error_class(response, operation)  # type: ignore[arg-type]


def _checked(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def make_api_call(client: Any, operation: str, params: dict[str, Any]) -> Any:
        principal = current()
        if principal is None:
            return original(client, operation, params)
        service = client.meta.service_model.service_name
        denial = principal.model.authorize(principal, service, operation, params)
        if denial is not None:
            raise denial_error(client, operation, denial)
        try:
            return original(client, operation, params)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code")
            if (
                service == "s3"
                and operation in {"GetObject", "HeadObject"}
                and code in _MISSING_KEY_CODES
                and not principal.model.lists_bucket(principal, params)
            ):
                # S3 hides whether a key exists from a caller that may not list the bucket.
                if operation == "HeadObject":  # no body: botocore names the status
                    raise _client_error(client, operation, "403", 403, "Forbidden") from exc
                raise _client_error(
                    client, operation, "AccessDenied", 403, "Access Denied"
                ) from exc
            raise

    return make_api_call


_install_lock = threading.Lock()
_installed = False


def install() -> None:
    """Patch botocore once per process (and the task states, :mod:`.machines`)."""
    global _installed  # noqa: PLW0603 - one switch for the process, like moto's own patches
    with _install_lock:
        if _installed:
            return
        from botocore.client import BaseClient  # noqa: PLC0415

        from dependency_tracker_local.iam import machines  # noqa: PLC0415

        BaseClient._make_api_call = _checked(BaseClient._make_api_call)  # type: ignore[attr-defined]
        machines.install()
        _installed = True
