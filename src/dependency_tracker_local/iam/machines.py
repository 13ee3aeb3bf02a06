"""State machines' roles: each task state's service calls run as its state machine's role.

moto's interpreter (``moto.stepfunctions.parser``) makes a service integration's calls
(``sqs:sendMessage.waitForTaskToken``, ``dynamodb:getItem``, ``aws-sdk:s3:putObject``,
``states:startExecution.sync``...) with boto3 clients from the task's
``_eval_execution``. That method is wrapped to run as the role of the state machine the
execution belongs to (``StateMachine.Id`` of the context object), when a live IAM model
(:class:`~dependency_tracker_local.iam.enforce.IamModel`) knows it. What Step Functions
itself does beside the task's own call is not evaluated (the managed EventBridge rule a
``.sync`` integration needs, log delivery, X-Ray).
"""

from __future__ import annotations

import functools
import threading
import weakref
from typing import TYPE_CHECKING, Any, Protocol

from dependency_tracker_local.iam.principal import Principal, acting_as

if TYPE_CHECKING:
    from collections.abc import Callable


class MachineRoles(Protocol):
    """What knows the state machines' roles (``enforce.IamModel``)."""

    def state_machine(self, arn: str) -> Principal | None:
        """The principal of the state machine ``arn`` (None: not one it knows)."""


_models: weakref.WeakSet[MachineRoles] = weakref.WeakSet()
_lock = threading.Lock()


def register(model: MachineRoles) -> None:
    """Let ``model`` judge the task states of its state machines."""
    with _lock:
        _models.add(model)


def unregister(model: MachineRoles) -> None:
    """Stop judging ``model``'s state machines (its stack stopped)."""
    with _lock:
        _models.discard(model)


def principal_of(machine_arn: str) -> Principal | None:
    """The principal of a state machine some live model knows."""
    with _lock:
        models = list(_models)
    for model in models:
        principal = model.state_machine(machine_arn)
        if principal is not None:
            return principal
    return None


def _as_machine_role(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def eval_execution(state: Any, env: Any) -> Any:
        machine = env.states.context_object.context_object_data["StateMachine"]["Id"]
        with acting_as(principal_of(str(machine))):
            return original(state, env)

    return eval_execution


def install() -> None:
    """Wrap the service task state's evaluation (called once, by ``enforce.install``).

    Imported there lazily: this module depends on ``principal`` only.
    """
    from moto.stepfunctions.parser.asl.component.state.exec.state_task.service.state_task_service import (  # noqa: PLC0415, E501
        StateTaskService,
    )

    StateTaskService._eval_execution = _as_machine_role(StateTaskService._eval_execution)  # type: ignore[method-assign]
