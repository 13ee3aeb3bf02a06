"""Who a piece of work runs as: a ``contextvars`` variable set around an invocation or a task.

The handlers' worker threads carry it (``dependency_tracker.core.threads``); a thread of its
own starts without one. Without a principal nothing is checked.
"""

from __future__ import annotations

import contextlib
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from collections.abc import Iterator

    from dependency_tracker_local.iam.roles import Role


class Judge(Protocol):
    """What decides a principal's calls (``enforce.IamModel``)."""

    def authorize(
        self, principal: Principal, service: str, operation: str, params: dict[str, Any]
    ) -> Any:
        """The denial of the call, if any (None: allowed)."""

    def lists_bucket(self, principal: Principal, params: dict[str, Any]) -> bool:
        """Whether S3 tells the principal a key is missing."""


@dataclass(frozen=True)
class Principal:
    """A role, the session name AWS shows for it, and the model judging its calls."""

    role: Role
    session: str
    model: Judge

    @property
    def caller(self) -> str:
        """The ARN AWS names in a denial."""
        return self.role.session_arn(self.session)


_principal: ContextVar[Principal | None] = ContextVar("deptrack_iam_principal", default=None)


def current() -> Principal | None:
    """The principal the work on this context runs as (None: not checked)."""
    return _principal.get()


@contextlib.contextmanager
def acting_as(principal: Principal | None) -> Iterator[None]:
    """Run the block as ``principal`` (None: unchecked)."""
    token = _principal.set(principal)
    try:
        yield
    finally:
        _principal.reset(token)
