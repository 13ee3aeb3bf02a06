"""``StopExecution`` as AWS answers it (part of the strict layer).

moto 5.2.5 drops the request's ``error`` and ``cause`` and only raises a stop
flag in the execution's interpreter: an execution waiting on a task token
stays ``RUNNING`` (with no ``stopDate``) until its task wakes, an answer to
its token is still accepted, and that answer's outcome can then replace the
stop (a ``SendTaskFailure`` left it ``FAILED``).

AWS stops the execution at once (``StopExecution`` API reference): it is
``ABORTED`` with the given error and cause and a ``stopDate``, its history ends
with ``ExecutionAborted``, and its open tasks are closed, so answers to their
tokens are refused with ``TaskTimedOut`` (:mod:`~.task_tokens`).

While the strict layer is on, a stop of a running execution does all of that
before it answers; the interpreter's thread is woken, ends without changing the
status again, and adds no event after ``ExecutionAborted``. Stopping an
execution that already ended keeps moto's answer (its end date, no change): the
API reference says nothing of that case.
"""

from __future__ import annotations

import functools
import threading
from typing import TYPE_CHECKING, Any

from moto.stepfunctions.parser.api import (
    ExecutionAbortedEventDetails,
    ExecutionStatus,
    HistoryEventType,
)
from moto.stepfunctions.parser.asl.eval.event.event_detail import EventDetails
from moto.stepfunctions.parser.asl.eval.event.event_manager import EventManager
from moto.stepfunctions.parser.asl.eval.program_state import ProgramStopped
from moto.stepfunctions.parser.backend.execution import (
    BaseExecutionWorkerCommunication,
    Execution,
)
from moto.stepfunctions.responses import StepFunctionResponse

from dependency_tracker_local import task_tokens

if TYPE_CHECKING:
    import datetime
    from collections.abc import Callable

# A stop and the interpreter's own end must not interleave: one of them settles the
# status, and a history takes no event after its ExecutionAborted.
_lock = threading.Lock()
_request = threading.local()
_active: Callable[[], bool] = lambda: False  # noqa: E731 - replaced by install()
_installed = False
# moto's own add_event: the stop adds its ExecutionAborted while it holds the lock.
_add_event: Callable[..., int] = EventManager.add_event
# Set on an EventManager once its history ended with ExecutionAborted.
_ENDED = "_deptrack_aborted"


def install(active: Callable[[], bool]) -> None:
    """Patch moto's ``StopExecution`` once per process; the patches act only while ``active()``."""
    global _active, _add_event, _installed  # noqa: PLW0603 - one patch per process, like strict's
    _active = active
    if _installed:
        return
    StepFunctionResponse.stop_execution = _keeping_reason(  # type: ignore[method-assign, assignment]
        StepFunctionResponse.stop_execution
    )
    Execution.stop = _stopping_at_once(Execution.stop)  # type: ignore[method-assign]
    BaseExecutionWorkerCommunication.terminated = _keeping_the_stop(  # type: ignore[method-assign, assignment]
        BaseExecutionWorkerCommunication.terminated
    )
    _add_event = EventManager.add_event
    EventManager.add_event = _nothing_after_abort(EventManager.add_event)  # type: ignore[method-assign]
    _installed = True


def _keeping_reason(original: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """The request's error and cause reach the execution (moto passes empty strings)."""

    @functools.wraps(original)
    def action(handler: StepFunctionResponse) -> Any:
        if not _active():
            return original(handler)
        _request.reason = (handler._get_param("error"), handler._get_param("cause"))
        try:
            return original(handler)
        finally:
            _request.reason = None

    return action


def _stopping_at_once(original: Callable[..., None]) -> Callable[..., None]:
    """A running execution is ``ABORTED`` when the call returns, its tasks closed."""

    @functools.wraps(original)
    def stop(
        self: Execution, stop_date: datetime.datetime, error: str | None, cause: str | None
    ) -> None:
        env = getattr(self.exec_worker, "env", None)
        # Not yet started (no environment) or already ended: moto's own answer.
        if not _active() or env is None or self.exec_status != ExecutionStatus.RUNNING:
            original(self, stop_date=stop_date, error=error, cause=cause)
            return
        error, cause = getattr(_request, "reason", None) or (error, cause)
        with _lock:
            original(self, stop_date=stop_date, error=error, cause=cause)
            if not isinstance(env.program_state(), ProgramStopped):
                return  # it ended on its own first; its own outcome stands
            self.exec_status = ExecutionStatus.ABORTED
            self.stop_date = stop_date
            self.error = error
            self.cause = cause
            manager = env.event_manager
            if not getattr(manager, _ENDED, False):
                env.event_history_context.source_event_id = 0  # as moto's own abort event
                _add_event(
                    manager,
                    context=env.event_history_context,
                    event_type=HistoryEventType.ExecutionAborted,
                    # moto's EventDetails names every kind; an event carries one.
                    event_details=EventDetails(  # type: ignore[typeddict-item]
                        executionAbortedEventDetails=ExecutionAbortedEventDetails(
                            error=error, cause=cause
                        )
                    ),
                )
                setattr(manager, _ENDED, True)
        # Outside the lock: the interpreter's thread wakes and ends through terminated().
        task_tokens.close_tasks(env.callback_pool_manager)

    return stop


def _keeping_the_stop(original: Callable[[Any], None]) -> Callable[[Any], None]:
    """The interpreter's end leaves an execution stopped by ``StopExecution`` as it is."""

    @functools.wraps(original)
    def terminated(self: BaseExecutionWorkerCommunication) -> None:
        if not _active():
            original(self)
            return
        with _lock:
            if self.execution.exec_status == ExecutionStatus.RUNNING:
                original(self)

    return terminated


def _nothing_after_abort(original: Callable[..., int]) -> Callable[..., int]:
    """A history ends with ``ExecutionAborted``: events the woken thread adds are dropped."""

    @functools.wraps(original)
    def add_event(self: EventManager, context: Any, event_type: Any, *args: Any, **kw: Any) -> int:
        if not _active():
            return original(self, context, event_type, *args, **kw)
        with _lock:
            if getattr(self, _ENDED, False):
                return int(context.last_published_event_id)
            event_id = original(self, context, event_type, *args, **kw)
            if event_type == HistoryEventType.ExecutionAborted:
                setattr(self, _ENDED, True)
            return event_id

    return add_event
