"""Invalid messages: kept for the operator, their parent told, no token kept as text.

A body that could not be parsed is read again here only for what its parent needs
(:func:`token_to_answer`, :func:`parent_execution_in`), through the same envelope and
shape code as the parser (:func:`dependency_tracker.core.envelopes.peek`), never a
second walk of its own.
"""

from __future__ import annotations

import hashlib
import re
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.metrics import MetricUnit

from dependency_tracker.core.enums import DependencyError, PayloadState, utcnow
from dependency_tracker.core.envelopes import peek
from dependency_tracker.core.observability import logger, metrics, redact_token
from dependency_tracker.core.text import clip
from dependency_tracker.payloads.actions import ProcessAction
from dependency_tracker.payloads.documents import join_token_of, token_of
from dependency_tracker.table.items import InvalidMessageItem, WaiterItem, waiter_id_for
from dependency_tracker.table.prefixes import INVALID_MESSAGE_PREFIX

if TYPE_CHECKING:
    from dependency_tracker.core.errors import InvalidMessageError
    from dependency_tracker.core.settings import Settings
    from dependency_tracker.payloads.state_table import StateTable
    from dependency_tracker.table.dependency_table import DependencyTable

__all__ = [
    "INVALID_MESSAGE_PREFIX",
    "MAX_BODY_EXCERPT",
    "InvalidMessages",
    "parent_execution_in",
    "redact_tokens",
    "token_to_answer",
]

MAX_BODY_EXCERPT = 16 * 1024


class InvalidMessages:
    """Records invalid messages in the state table and answers their parents."""

    def __init__(
        self, *, settings: Settings, states: StateTable, dependencies: DependencyTable
    ) -> None:
        self.settings = settings
        self.states = states
        self.dependencies = dependencies

    def record(
        self, error: InvalidMessageError, *, body: str, message_id: str | None
    ) -> ProcessAction:
        """Keep an invalid message (and tell its parent, if a token is readable).

        The message is stored as an ``INVALID`` item in the state table under
        ``invalid-message/{message_id}``; when the message carried a task token,
        an ``INVALID`` waiter row for that item makes the callback handler send
        ``DependencyInvalid`` to the parent instead of leaving it to time out.
        """
        key = message_id or hashlib.sha256(body.encode("utf-8")).hexdigest()
        record_id = f"{INVALID_MESSAGE_PREFIX}{key}"
        logger.error(
            "invalid message",
            extra={
                "message_id": message_id,
                "reason": error.reason,
                "payload_id": error.payload_id,
                "token_hash": redact_token(error.task_token),
            },
        )
        metrics.add_metric(name="InvalidMessages", unit=MetricUnit.Count, value=1)
        now = utcnow()
        expires = now + timedelta(days=self.settings.waiter_retention_days)
        self.states.record_invalid(
            InvalidMessageItem(
                payload_id=record_id,
                created_at=now,
                updated_at=now,
                finished_at=now,
                last_error=clip(error.reason),
                message_id=message_id,
                claimed_payload_id=error.payload_id,
                body_excerpt=redact_tokens(body, error.task_token)[:MAX_BODY_EXCERPT],
                expiration_time=int(expires.timestamp()),
            )
        )
        if error.task_token is not None:
            self.dependencies.register(
                WaiterItem(
                    payload_id=record_id,
                    waiter_id=waiter_id_for(error.task_token),
                    task_token=error.task_token,
                    workflow_state=PayloadState.INVALID,
                    created_at=now,
                    updated_at=now,
                    resolved_at=now,
                    error="InvalidMessage",
                    cause=clip(error.reason),
                    error_name=DependencyError(error.error_name),
                    parent_execution=parent_execution_in(body),
                )
            )
        return ProcessAction.INVALID


# A "task_token" field, plain or inside an SNS envelope's escaped JSON; tokens are
# base64-like, so the value ends at the first quote or backslash.
_TOKEN_FIELD = re.compile(r'(\\?"task_token\\?"\s*:\s*\\?")([^"\\]*)')


def redact_tokens(body: str, task_token: str | None) -> str:
    """The body with every task token replaced by its hash (tokens are never stored as text)."""
    if task_token:
        body = body.replace(task_token, redact_token(task_token) or "")
    return _TOKEN_FIELD.sub(lambda m: m.group(1) + (redact_token(m.group(2)) or ""), body)


def token_to_answer(body: str) -> tuple[str | None, DependencyError]:
    """Best effort: the task token of a body that could not be parsed, and what its parent hears.

    ``{"join": {"task_token": ...}}`` is a join's (``InvalidJoin``); a ``callback``'s,
    top-level or beside ``payload``, a single wait's (``DependencyInvalid``). A token
    with no UTF-8 form cannot be sent back: its parent is unreachable.
    """
    document = _object_in(body)
    join_token = join_token_of(document)
    if join_token is not None:
        return join_token, DependencyError.INVALID_JOIN
    return token_of(document), DependencyError.INVALID


def parent_execution_in(body: str) -> str | None:
    """Best effort: the parent named in a broken message, so operators can find it."""
    document = _object_in(body)
    for key in ("callback", "join"):
        waiter = document.get(key)
        if isinstance(waiter, dict) and isinstance(waiter.get("parent_execution"), str):
            # Escaped: a lone surrogate could not be stored, and the parent must still be told.
            return str(waiter["parent_execution"]).encode("utf-8", "backslashreplace").decode()
    return None


def _object_in(body: str) -> dict[str, Any]:
    """The body's JSON object, out of its SNS envelope; empty when there is none to read."""
    document = peek(body)
    return document if isinstance(document, dict) else {}
