"""moto's Step Functions executions found by key, not by scanning every execution.

moto keeps a state machine's executions in one list and walks it for each
``DescribeExecution`` (by ARN), each ``StartExecution`` (the name check) and
each ``ListExecutions`` (a full sort by start time, then a page of it). AWS
answers each in the same time at any count; locally they cost O(n) to
O(n log n) per call, so a join of n members costs O(n²) (100,000 members:
about 10¹⁰ steps, minutes of CPU, before the tracker does anything).

While :func:`indexed_executions` is active, each list gets an index, brought up
to date on use from the executions appended since (moto only ever appends):
executions by ARN and by name, and the list already sorted newest first, merged
with each new batch. The answers, errors and order are moto's own.
"""

from __future__ import annotations

import heapq
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from moto.stepfunctions.exceptions import ExecutionDoesNotExist
from moto.stepfunctions.models import StateMachine, StepFunctionBackend
from moto.stepfunctions.utils import PAGINATION_MODEL
from moto.utilities.paginator import paginate

from dependency_tracker_local.patching import Switched

if TYPE_CHECKING:
    import contextlib
    from collections.abc import Callable

_lock = threading.Lock()


def _start_date(execution: Any) -> Any:
    return execution.start_date


@dataclass
class _Index:
    """What one execution list holds, by key; ``seen`` executions indexed so far."""

    executions: list[Any]
    seen: int = 0
    by_arn: dict[str, Any] = field(default_factory=dict)
    by_name: dict[str, list[Any]] = field(default_factory=dict)
    newest_first: list[Any] = field(default_factory=list)

    def update(self) -> _Index:
        if len(self.executions) == self.seen:
            return self
        fresh = self.executions[self.seen :]
        self.seen = len(self.executions)
        for execution in fresh:
            self.by_arn.setdefault(execution.execution_arn, execution)
            self.by_name.setdefault(execution.name, []).append(execution)
        # sorted() is stable: among equal start dates the list's order stays, and
        # merge() puts the earlier (older-listed) run first, as one sort would.
        self.newest_first = list(
            heapq.merge(
                self.newest_first,
                sorted(fresh, key=_start_date, reverse=True),
                key=_start_date,
                reverse=True,
            )
        )
        return self


_indexes: dict[int, _Index] = {}


def _index(executions: list[Any]) -> _Index:
    with _lock:
        index = _indexes.get(id(executions))
        if index is None or index.executions is not executions:
            index = _indexes[id(executions)] = _Index(executions)
        return index.update()


def _describe_execution(self: StepFunctionBackend, execution_arn: str) -> Any:
    self._validate_execution_arn(execution_arn)
    state_machine = self._get_state_machine_for_execution(execution_arn)
    execution = _index(state_machine.executions).by_arn.get(execution_arn)
    if execution is None:
        raise ExecutionDoesNotExist("Execution Does Not Exist: '" + execution_arn + "'")
    return execution


def _by_name(original: Callable[..., Any]) -> Callable[..., Any]:
    def handle_name_input_idempotency(self: StateMachine, name: str, execution_input: str) -> Any:
        # moto's check over the runs of that name only: the others never match it.
        same_name = _index(self.executions).by_name.get(name, [])
        return original(_Runs(same_name), name, execution_input)

    return handle_name_input_idempotency


@dataclass
class _Runs:
    """A stand-in state machine holding some of its runs, for moto's name check."""

    executions: list[Any]


def _list_executions(
    self: StepFunctionBackend, state_machine_arn: str, status_filter: str | None = None
) -> list[Any]:
    executions = self.describe_state_machine(state_machine_arn).executions
    newest_first = _index(executions).newest_first
    if status_filter:
        return [e for e in newest_first if e.status == status_filter]
    return list(newest_first)


_list_executions.__name__ = "list_executions"  # moto's paginator finds its model by name


def _forget() -> None:
    with _lock:
        _indexes.clear()


_SWITCHED = Switched(
    lambda: [
        (StepFunctionBackend, "describe_execution", lambda _original: _describe_execution),
        (
            StepFunctionBackend,
            "list_executions",
            lambda _original: paginate(pagination_model=PAGINATION_MODEL)(_list_executions),
        ),
        (StateMachine, "_handle_name_input_idempotency", _by_name),
    ],
    on_last_exit=_forget,
)


def indexed_executions() -> contextlib.AbstractContextManager[None]:
    """Within the block, moto finds executions by key. Re-entrant."""
    return _SWITCHED.active()
