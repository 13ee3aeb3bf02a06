"""Task-token callbacks as AWS answers them (part of the strict layer).

moto 5.2.5 differs from Step Functions on ``SendTaskFailure``,
``SendTaskSuccess`` and ``SendTaskHeartbeat``:

* its ``SendTaskFailure`` handler passes ``error`` on and drops ``cause``: the
  ``TaskFailed`` event, the ``Cause`` a ``Catch`` hands on (``$.Cause``) and
  the failed execution's ``cause`` stay empty;
* a task stays open after it ended: an answer to a token whose task timed out
  (``TimeoutSeconds``/``HeartbeatSeconds``), was already answered, or whose
  execution ended is accepted silently while moto still lists the execution as
  running (``SendTaskFailure``: whatever its status), and refused with
  ``InvalidToken`` otherwise.

AWS keeps the cause, and refuses an answer about a task that is no longer
open with ``TaskTimedOut``: "The task token has either expired or the task
associated with the token has already been closed" (``SendTaskSuccess``,
``SendTaskFailure`` and ``SendTaskHeartbeat`` API reference). A token moto
never issued still gets ``InvalidToken``.

While the strict layer is on, the response handler hands ``cause`` to moto's
backend, a task closes when it is first answered, when its wait ends (timed
out or interrupted), when the frame running it ends and when its execution is
stopped (:mod:`~.stop_execution`), and an answer about a
closed task, or one of an execution that is no longer running, is refused with
``TaskTimedOut``. A retried attempt of a callback task gets a token of its own,
as on AWS (moto reuses the first attempt's, and so its outcome).
"""

from __future__ import annotations

import functools
import threading
from typing import TYPE_CHECKING, Any

from moto.stepfunctions.parser.api import InvalidToken, TaskTimedOut
from moto.stepfunctions.parser.asl.component.state.exec.state_task.service.resource import (
    ResourceCondition,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_task.service.state_task_service_callback import (  # noqa: E501 - moto's module path
    StateTaskServiceCallback,
)
from moto.stepfunctions.parser.asl.eval.callback.callback import (
    CallbackConsumerTimeout,
    CallbackEndpoint,
    CallbackNotifyConsumerError,
    CallbackPoolManager,
)
from moto.stepfunctions.parser.asl.eval.environment import Environment
from moto.stepfunctions.parser.models import StepFunctionsParserBackend
from moto.stepfunctions.responses import StepFunctionResponse

if TYPE_CHECKING:
    from collections.abc import Callable

# AWS's text for an answer about a closed task.
TASK_CLOSED = "Task Timed Out: 'Provided task does not exist anymore'"

# An answer and the end of a task's wait must not interleave: either the answer
# lands while the task is open, or it is refused because the task closed.
_closing = threading.Lock()
_request = threading.local()
_active: Callable[[], bool] = lambda: False  # noqa: E731 - replaced by install()
_installed = False


def install(active: Callable[[], bool]) -> None:
    """Patch moto's callbacks once per process; the patches act only while ``active()``."""
    global _active, _installed  # noqa: PLW0603 - one patch per process, like strict's
    _active = active
    if _installed:
        return
    StepFunctionResponse.send_task_failure = _keeping_cause(  # type: ignore[method-assign, assignment]
        StepFunctionResponse.send_task_failure
    )
    backend = StepFunctionsParserBackend
    backend.send_task_failure = _with_cause(_refusing_closed(backend.send_task_failure))  # type: ignore[method-assign]
    backend.send_task_success = _refusing_closed(backend.send_task_success)  # type: ignore[method-assign]
    backend.send_task_heartbeat = _refusing_closed(backend.send_task_heartbeat)  # type: ignore[method-assign]
    CallbackPoolManager.notify = _answer_once(CallbackPoolManager.notify)  # type: ignore[method-assign]
    CallbackPoolManager.heartbeat = _beat_while_open(CallbackPoolManager.heartbeat)  # type: ignore[method-assign]
    CallbackEndpoint.wait = _closing_after_wait(CallbackEndpoint.wait)  # type: ignore[method-assign]
    CallbackEndpoint.interrupt_all = _closing_first(CallbackEndpoint.interrupt_all)  # type: ignore[method-assign, assignment]
    Environment.set_ended = _closing_its_task(Environment.set_ended)  # type: ignore[method-assign]
    StateTaskServiceCallback._evaluate_with_timeout = _new_token_per_attempt(  # type: ignore[method-assign]
        StateTaskServiceCallback._evaluate_with_timeout
    )
    _installed = True


def _timed_out() -> TaskTimedOut:
    # moto's parser errors name their code in an attribute its AWSError does not read.
    return TaskTimedOut(TASK_CLOSED, "TaskTimedOut")


def is_closed(endpoint: CallbackEndpoint) -> bool:
    """Whether the task behind ``endpoint`` takes no more answers."""
    return endpoint.consumer_error is not None


def close_tasks(pool: CallbackPoolManager) -> None:
    """Close every task of an execution (it was stopped) and wake the threads waiting on them.

    Closed first, under the lock: an answer racing the stop is either taken before
    it or refused with ``TaskTimedOut``, never accepted and lost.
    """
    endpoints = list(pool._pool.values())
    with _closing:
        for endpoint in endpoints:
            _close(endpoint)
    for endpoint in endpoints:
        endpoint.interrupt_all()


def _close(endpoint: CallbackEndpoint) -> None:
    # moto's own "consumer left" marker: its notify and heartbeat then raise
    # CallbackNotifyConsumerError, which its backend turns into TaskTimedOut.
    if endpoint.consumer_error is None:
        endpoint.consumer_error = CallbackConsumerTimeout()


# ---------------------------------------------------------------------- the cause


def _keeping_cause(original: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``SendTaskFailure``: the request's cause reaches the backend (moto passes error only)."""

    @functools.wraps(original)
    def action(handler: StepFunctionResponse) -> Any:
        if not _active():
            return original(handler)
        _request.cause = handler._get_param("cause")
        try:
            return original(handler)
        finally:
            _request.cause = None

    return action


# ---------------------------------------------------------------------- closed tasks


def _owner(backend: StepFunctionsParserBackend, token: str) -> tuple[Any, CallbackEndpoint] | None:
    """The execution that issued ``token`` and the token's endpoint (None: never issued)."""
    for execution in backend._get_executions():
        # An execution still starting (or torn down) has no worker or environment yet.
        env = getattr(getattr(execution, "exec_worker", None), "env", None)
        if env is None:
            continue
        endpoint = env.callback_pool_manager.get(token)
        if endpoint is not None:
            return execution, endpoint
    return None


def _closed(backend: StepFunctionsParserBackend, token: str) -> bool:
    found = _owner(backend, token)
    if found is None:
        return False
    execution, endpoint = found
    return is_closed(endpoint) or execution.status != "RUNNING"


def _refusing_closed(original: Callable[..., Any]) -> Callable[..., Any]:
    """``TaskTimedOut`` (with AWS's text) for a token whose task or execution ended."""

    @functools.wraps(original)
    def send(self: StepFunctionsParserBackend, task_token: str, *args: Any, **kwargs: Any) -> Any:
        if not _active():
            return original(self, task_token, *args, **kwargs)
        if _closed(self, task_token):
            raise _timed_out()
        try:
            return original(self, task_token, *args, **kwargs)
        except TaskTimedOut:
            raise _timed_out() from None
        except InvalidToken:
            # The execution ended between the check and moto's own search.
            if _closed(self, task_token):
                raise _timed_out() from None
            raise

    return send


def _with_cause(original: Callable[..., Any]) -> Callable[..., Any]:
    """The backend's ``send_task_failure`` gets the cause the request carried."""

    @functools.wraps(original)
    def send_task_failure(
        self: StepFunctionsParserBackend,
        task_token: str,
        error: str | None = None,
        cause: str | None = None,
    ) -> Any:
        if cause is None and _active():
            cause = getattr(_request, "cause", None)
        return original(self, task_token, error=error, cause=cause)

    return send_task_failure


def _answer_once(original: Callable[..., bool]) -> Callable[..., bool]:
    """The first answer closes the task; any later one finds it closed."""

    @functools.wraps(original)
    def notify(self: CallbackPoolManager, callback_id: str, outcome: Any) -> bool:
        if not _active():
            return original(self, callback_id, outcome)
        endpoint = self.get(callback_id)
        if endpoint is None:
            return False
        with _closing:
            left = endpoint.consumer_error
            if left is not None:
                raise CallbackNotifyConsumerError(callback_consumer_error=left)
            endpoint.notify(outcome)
            _close(endpoint)
        return True

    return notify


def _beat_while_open(original: Callable[..., bool]) -> Callable[..., bool]:
    """A heartbeat on an open callback task is taken, ``HeartbeatSeconds`` or not.

    AWS documents ``SendTaskHeartbeat`` for every callback-pattern Task and
    refuses it only for a closed or unknown task; moto answers ``InvalidToken``
    for an open task without ``HeartbeatSeconds`` (it has no heartbeat clock).
    """

    @functools.wraps(original)
    def heartbeat(self: CallbackPoolManager, callback_id: str) -> bool:
        if not _active():
            return original(self, callback_id)
        with _closing:
            endpoint = self.get(callback_id)
            if (
                endpoint is not None
                and endpoint.consumer_error is None
                and not getattr(endpoint, "_heartbeat_endpoint", None)
            ):
                return True  # no heartbeat clock to reset: the task stays open
            return original(self, callback_id)

    return heartbeat


def _closing_after_wait(original: Callable[..., Any]) -> Callable[..., Any]:
    """A wait that ends without an answer (timed out, interrupted) closes the task.

    The outcome is read again under the lock: an answer that landed before the
    task closed is the task's result, as its sender was told.
    """

    @functools.wraps(original)
    def wait(self: CallbackEndpoint, timeout: float | None = None) -> Any:
        outcome = original(self, timeout)
        if not _active():
            return outcome
        with _closing:
            _close(self)
            return self.get_outcome()

    return wait


def _closing_first(
    original: Callable[[CallbackEndpoint], None],
) -> Callable[[CallbackEndpoint], None]:
    """The task is over when moto interrupts its waiters (its outcome is settled)."""

    @functools.wraps(original)
    def interrupt_all(self: CallbackEndpoint) -> None:
        if _active():
            with _closing:
                _close(self)
        original(self)

    return interrupt_all


def _closing_its_task(original: Callable[..., None]) -> Callable[..., None]:
    """A frame that ends (a state's ``TimeoutSeconds`` ran out) closes the task it ran.

    moto times a task out in the state's frame first; the callback's own wait
    notices only later, and an answer in between would be accepted and lost.
    """

    @functools.wraps(original)
    def set_ended(self: Environment) -> None:
        original(self)
        if not _active():
            return
        task: dict[str, Any] = dict(
            self.states.context_object.context_object_data.get("Task") or {}
        )
        token = task.get("Token")
        endpoint = self.callback_pool_manager.get(token) if token else None
        if endpoint is not None:
            with _closing:
                _close(endpoint)

    return set_ended


def _new_token_per_attempt(original: Callable[..., None]) -> Callable[..., None]:
    """A retry of a ``.waitForTaskToken`` task waits on a new token, as on AWS.

    moto issues the token once per state and retries on it: a retry would wait
    on a closed task, and (without the layer) replay the failure it retries.
    """

    @functools.wraps(original)
    def evaluate(self: StateTaskServiceCallback, env: Environment) -> None:
        if _active() and self.resource.condition == ResourceCondition.WaitForTaskToken:
            task: dict[str, Any] = dict(
                env.states.context_object.context_object_data.get("Task") or {}
            )
            endpoint = env.callback_pool_manager.get(task.get("Token", ""))
            if endpoint is not None and is_closed(endpoint):
                env.callback_pool_manager.add(env.states.context_object.update_task_token())
        original(self, env)

    return evaluate
