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

The order is brought up to date only when a list is asked for, and new runs,
the newest, are appended to it rather than merged: re-sorting on every
``DescribeExecution`` cost O(n) a call while a join's members were starting. A
``RUNNING`` list is kept apart, less the runs seen stopped (a run never runs
again): the execution pump asks for it every round, and filtering every run
for it cost O(n) a round.
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
_RUNNING = "RUNNING"


def _start_date(execution: Any) -> Any:
    return execution.start_date


@dataclass
class _Index:
    """What one execution list holds, by key; ``seen`` executions indexed so far.

    Keys are indexed as executions appear; the orders only when a list is asked for,
    so a ``DescribeExecution`` among many ``StartExecution`` calls costs no re-sort.
    """

    executions: list[Any]
    seen: int = 0
    by_arn: dict[str, Any] = field(default_factory=dict)
    by_name: dict[str, list[Any]] = field(default_factory=dict)
    # Oldest first, the reverse of the order ListExecutions answers in: new runs are
    # usually the newest, so they are appended rather than merged.
    oldest_first: list[Any] = field(default_factory=list)
    # The runs last seen RUNNING, in the same order. A run never runs again once it
    # stopped, so the RUNNING list is these, less the ones stopped since.
    running: list[Any] = field(default_factory=list)
    unsorted: list[Any] = field(default_factory=list)

    def update(self) -> _Index:
        if len(self.executions) == self.seen:
            return self
        fresh = self.executions[self.seen :]
        self.seen = len(self.executions)
        for execution in fresh:
            self.by_arn.setdefault(execution.execution_arn, execution)
            self.by_name.setdefault(execution.name, []).append(execution)
        self.unsorted.extend(fresh)
        return self

    def sort(self) -> _Index:
        """Bring the orders up to date with every execution indexed."""
        if self.unsorted:
            fresh = _newest_first(self.unsorted)
            self.unsorted = []
            self.oldest_first = _with(self.oldest_first, fresh)
            self.running = _with(self.running, fresh)
        return self

    def newest_first(self, status: str | None = None) -> list[Any]:
        """The runs moto lists: (of ``status`` only, if given) newest first."""
        self.sort()
        if status == _RUNNING:
            self.running = [e for e in self.running if e.status == _RUNNING]
            return self.running[::-1]
        if status:
            return [e for e in reversed(self.oldest_first) if e.status == status]
        return self.oldest_first[::-1]


def _newest_first(executions: list[Any]) -> list[Any]:
    return sorted(executions, key=_start_date, reverse=True)


def _with(oldest_first: list[Any], fresh_newest_first: list[Any]) -> list[Any]:
    """``oldest_first`` with the later-listed ``fresh`` runs, as moto's stable sort orders them.

    Among equal start dates the earlier-listed run comes first newest-first, so last here.
    """
    if not oldest_first or _start_date(fresh_newest_first[-1]) > _start_date(oldest_first[-1]):
        oldest_first.extend(reversed(fresh_newest_first))
        return oldest_first
    # sorted() is stable and merge() puts the earlier (older-listed) run first, as one sort would.
    merged = heapq.merge(reversed(oldest_first), fresh_newest_first, key=_start_date, reverse=True)
    return list(merged)[::-1]


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
    index = _index(executions)
    with _lock:
        return index.newest_first(status_filter)


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
