"""Express state machines as AWS runs them (part of the strict layer).

moto runs an ``EXPRESS`` state machine like a Standard one: a second
``StartExecution`` under a used name returns the first run (or
``ExecutionAlreadyExists``), and its executions have Standard ARNs that
``DescribeExecution`` answers. AWS does neither:

* Express starts are not idempotent: starting the same name again starts
  another, concurrent run, and an asynchronous Express run is itself
  at-least-once (Step Functions guide, "Execution guarantees",
  express-at-least-once-execution.html);
* an Express run's ARN is ``arn:aws:states:{region}:{account}:express:
  {machine}:{name}:{id}``, and ``DescribeExecution`` does not support Express
  runs (it refuses the ARN: ``InvalidArn``).

While the strict layer is on, a start on an Express machine skips moto's name
check and gives the run an Express ARN (a fresh id per run). moto's own ARN
check then refuses ``DescribeExecution`` on it with ``InvalidArn``, as AWS
does. The run itself executes as before, and ``$$.Execution.Id`` in it is the
Express ARN. ``ListExecutions`` on an Express machine is still answered (AWS
refuses it): the local event pump never asks, and test tooling lists runs
with it.
"""

from __future__ import annotations

import functools
import threading
import uuid
from typing import TYPE_CHECKING, Any

from moto.stepfunctions.models import StateMachine
from moto.stepfunctions.parser.backend.execution import Execution

if TYPE_CHECKING:
    from collections.abc import Callable

    from moto.stepfunctions.responses import StepFunctionResponse

_starting = threading.local()


def express_arn(standard_arn: str) -> str:
    """The Express form of a Standard execution ARN, with a fresh run id."""
    return f"{standard_arn.replace(':execution:', ':express:', 1)}:{uuid.uuid4()}"


def start_execution(
    handler: StepFunctionResponse, original: Callable[[StepFunctionResponse], Any]
) -> Any:
    """``StartExecution``: on an Express machine, a new run every time, under an Express ARN."""
    if not _is_express(handler, handler._get_param("stateMachineArn")):
        return original(handler)
    _starting.express = True
    try:
        return original(handler)
    finally:
        _starting.express = False


def install() -> None:
    """Patch moto's name check and execution ARNs (once; inert outside an Express start)."""
    StateMachine._handle_name_input_idempotency = _no_name_check_when_express(  # type: ignore[method-assign]
        StateMachine._handle_name_input_idempotency
    )
    Execution.__init__ = _express_arn_when_express(Execution.__init__)  # type: ignore[method-assign]


def _starting_express() -> bool:
    return bool(getattr(_starting, "express", False))


def _is_express(handler: StepFunctionResponse, machine_arn: str | None) -> bool:
    if not machine_arn:
        return False
    try:
        machine = handler.stepfunction_backend.describe_state_machine(machine_arn)
    except Exception:  # noqa: BLE001 - moto raises its own error for it on the real call
        return False
    return getattr(machine, "type", "STANDARD") == "EXPRESS"


def _no_name_check_when_express(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def check(self: StateMachine, name: str, execution_input: str) -> Any:
        if _starting_express():
            return None  # Express names are not unique: every start is a new run
        return original(self, name, execution_input)

    return check


def _express_arn_when_express(original: Callable[..., None]) -> Callable[..., None]:
    @functools.wraps(original)
    def init(self: Execution, *args: Any, **kwargs: Any) -> None:
        if _starting_express() and "exec_arn" in kwargs:
            kwargs["exec_arn"] = express_arn(kwargs["exec_arn"])
        original(self, *args, **kwargs)

    return init
