"""The ``states:startExecution`` integration (``.sync``, ``.sync:2``) as AWS runs it.

moto 5.2.5's interpreter is ported from LocalStack's, which translates between
an integration's parameters and responses (AWS's ``PascalCase``) and boto3's
(the API's ``camelCase``) with the service model; moto ships that step as a
no-op. So ``arn:aws:states:::states:startExecution.sync:2`` does not run: the
task's ``StateMachineArn``, ``Input`` and ``Name`` reach boto3 as they are
(``KeyError: 'StateMachineArn'``), and a run that got that far would answer
``executionArn``, ``output``, ``error`` where AWS answers ``ExecutionArn``,
``Output``, ``Error`` (what a parent's ``ResultSelector`` and ``Catch`` read).

While :func:`sync_executions` is active, the Step Functions integration's
parameters are renamed to the API's members and its responses (the start, and
the ``DescribeExecution`` a ``.sync`` run ends with) to AWS's casing, through
moto's own LocalStack helpers and botocore's model of the service. The rest,
polling the child and failing with ``States.TaskFailed`` and the child's
``DescribeExecution`` as the cause, is moto's. ``EmbeddedStack`` (and so
``serve``, the demo and the tests) turns it on; the nested example
(``examples/nested``) runs on it.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import botocore.session
from botocore import xform_name
from moto.stepfunctions.parser.asl.component.state.exec.state_task.service.state_task_service import (  # noqa: E501 - moto's module path
    StateTaskService,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_task.service.state_task_service_sfn import (  # noqa: E501 - moto's module path
    StateTaskServiceSfn,
)

from dependency_tracker_local.patching import Patch, Switched

if TYPE_CHECKING:
    import contextlib
    from collections.abc import Callable

    from botocore.model import OperationModel, StructureShape


@functools.cache
def _operations() -> dict[str, OperationModel]:
    """Step Functions' operations by boto3's method name (``start_execution``)."""
    model = botocore.session.get_session().get_service_model("stepfunctions")
    return {xform_name(name): model.operation_model(name) for name in model.operation_names}


def _shape(task: StateTaskServiceSfn, action: str | None, *, output: bool) -> StructureShape | None:
    operation = _operations().get(task._get_boto_service_action(action))
    if operation is None:
        return None
    return operation.output_shape if output else operation.input_shape


def _parameters(original: Callable[..., None]) -> Callable[..., None]:
    """The task's parameters under the API's names (``StateMachineArn``: ``stateMachineArn``)."""

    def normalise(
        self: StateTaskServiceSfn,
        parameters: dict[str, Any],
        boto_service_name: str | None = None,
        service_action_name: str | None = None,
    ) -> None:
        original(self, parameters, boto_service_name, service_action_name)
        shape = _shape(self, service_action_name, output=False)
        if shape is not None:
            self._to_boto_request(parameters, shape)

    return normalise


def _response(original: Callable[..., None]) -> Callable[..., None]:
    """A response in AWS's casing (``executionArn`` → ``ExecutionArn``), nested members too."""

    def normalise(
        self: StateTaskServiceSfn,
        response: Any,
        boto_service_name: str | None = None,
        service_action_name: str | None = None,
    ) -> None:
        original(self, response, boto_service_name, service_action_name)
        shape = _shape(self, service_action_name, output=True)
        if shape is not None:
            self._from_boto_response(response, shape)

    return normalise


def _patches() -> list[Patch]:
    # The Sfn task inherits the base's no-op response step: give it an attribute of its own
    # to wrap, so no other integration changes.
    if "_normalise_response" not in vars(StateTaskServiceSfn):
        StateTaskServiceSfn._normalise_response = StateTaskService._normalise_response  # type: ignore[method-assign]
    return [
        (StateTaskServiceSfn, "_normalise_parameters", _parameters),
        (StateTaskServiceSfn, "_normalise_response", _response),
    ]


_SWITCHED = Switched(_patches)


def sync_executions() -> contextlib.AbstractContextManager[None]:
    """Within the block ``states:startExecution`` (``.sync``, ``.sync:2``) runs. Re-entrant."""
    return _SWITCHED.active()
