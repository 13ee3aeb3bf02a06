"""Task-token identity: hashes for keys and logs (a token itself is a secret)."""

from __future__ import annotations

import hashlib

# What Step Functions answers a send or heartbeat on a task that has closed (answered, timed
# out, its execution stopped) or never existed: the parent is gone, nothing is left to tell.
PARENT_GONE_CODES = frozenset({"TaskTimedOut", "InvalidToken", "TaskDoesNotExist"})
# How a row records such an answer (``PARENT_GONE:<code>``); an operator's release that
# closed the token (so caused the refusal) may write over it.
PARENT_GONE_OUTCOME = "PARENT_GONE:"
# Step Functions' refusal of an answer the caller may not send: no retry fixes it, only the
# grant (the parent's state machine named in the stack's ExtraParentStateMachineArns).
SEND_REFUSED_CODES = frozenset({"AccessDeniedException"})
PARENT_GRANT_PARAMETER = "ExtraParentStateMachineArns"


def token_hash(task_token: str) -> str:
    """Stable SHA-256 hex digest of a task token."""
    return hashlib.sha256(task_token.encode("utf-8")).hexdigest()


def redact_token(task_token: str | None) -> str | None:
    """Short, loggable stand-in for a task token; never log the token itself."""
    if task_token is None:
        return None
    return f"sha256:{token_hash(task_token)[:16]}"
