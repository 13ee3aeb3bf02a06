"""Logger and metrics shared by every module, and the log keys of one record.

No Powertools ``Tracer``: nothing was traced with it, and building one imports the X-Ray SDK
and patches botocore on every cold start. ``Tracing: Active`` still traces each invocation.

The keys that name what a log line is about (the payload id as ``correlation_id``, the
message, event, execution, join or token) are set with :func:`log_keys` and
:func:`log_context`, never with the logger's own ``append_keys``/``set_correlation_id``:
those write to the one formatter every thread shares, so a record handled on one thread
would tag another thread's lines (the flows are built once and shared, and the embedded
stack's pumps and any caller's threads use them at once). These keep them per thread
(Powertools' ``thread_safe_*`` keys, a ``ContextVar``), which ``inject_lambda_context
(clear_state=True)`` clears at the start of each invocation, as it does the shared ones.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING

from aws_lambda_powertools import Logger, Metrics

from dependency_tracker.core.settings import metrics_namespace, service_name
from dependency_tracker.core.tokens import redact_token

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = [
    "SERVICE",
    "drop_log_keys",
    "log_context",
    "log_keys",
    "logger",
    "metrics",
    "redact_token",
    "set_correlation_id",
]

SERVICE = service_name()

logger = Logger(service=SERVICE)
metrics = Metrics(namespace=metrics_namespace(), service=SERVICE)


def log_keys(**keys: object) -> None:
    """Add ``keys`` to this thread's log lines (until dropped, or the next invocation)."""
    logger.thread_safe_append_keys(**keys)


def drop_log_keys(*names: str) -> None:
    """Take ``names`` off this thread's log lines."""
    logger.thread_safe_remove_keys(names)


def set_correlation_id(value: str | None) -> None:
    """The correlation id (the payload id) of this thread's log lines."""
    log_keys(correlation_id=value)


@contextmanager
def log_context(**keys: object) -> Iterator[None]:
    """``keys`` on this thread's log lines while inside, then dropped."""
    log_keys(**keys)
    try:
        yield
    finally:
        drop_log_keys(*keys)
