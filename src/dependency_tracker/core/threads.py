"""Worker threads that keep the caller's context (``contextvars``).

A ``ThreadPoolExecutor`` runs each task in its worker's own, empty context, so whatever
the caller set in a ``contextvars.ContextVar`` (a tracing or logging scope, or the
local model's role, ``docs/local.md``) would not follow the work. :class:`ContextExecutor`
runs each task in a copy of the context of the code that submitted it.
"""

from __future__ import annotations

import contextvars
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, ParamSpec, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable

P = ParamSpec("P")
R = TypeVar("R")


class ContextExecutor(ThreadPoolExecutor):
    """A ``ThreadPoolExecutor`` whose tasks (``submit``, ``map``) run in the submitter's context."""

    def submit(self, fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> Future[R]:
        """Schedule ``fn(*args, **kwargs)`` in a copy of the current context."""
        # One copy per task: a context cannot be entered by two threads at once.
        context = contextvars.copy_context()
        run: Callable[..., R] = context.run
        future: Future[R] = super().submit(run, fn, *args, **kwargs)
        return future
