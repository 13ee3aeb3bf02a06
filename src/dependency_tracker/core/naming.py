"""Deterministic execution names: one per (payload id, attempt).

A retried ``StartExecution`` with the same name is harmless (Step Functions
returns the running execution or ``ExecutionAlreadyExists``), and update-state
reads the attempt back from the name to refuse stale reports.
"""

from __future__ import annotations

import hashlib
import re

MAX_NAME_LENGTH = 80
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")
_SLUG_LENGTH = 40
_DIGEST_LENGTH = 24


def execution_name(payload_id: str, attempt: int) -> str:
    """Name of attempt ``attempt`` (1-based) of ``payload_id``'s execution.

    A readable tail of the id, a digest of the whole id, and the attempt:
    ``{slug}-{digest}-{attempt}``, at most 80 characters from ``[A-Za-z0-9_-]``.
    """
    if attempt < 1:
        msg = f"attempt must be >= 1, got {attempt}"
        raise ValueError(msg)
    digest = hashlib.sha256(payload_id.encode("utf-8")).hexdigest()[:_DIGEST_LENGTH]
    slug = _UNSAFE.sub("_", payload_id).strip("_")[-_SLUG_LENGTH:] or "payload"
    return f"{slug}-{digest}-{attempt}"


def attempt_of(name: str, payload_id: str) -> int | None:
    """Attempt encoded in an execution name, or None if the tracker did not name it."""
    tail = name.rpartition("-")[2]
    if not tail.isdigit() or int(tail) < 1:
        return None
    attempt = int(tail)
    return attempt if execution_name(payload_id, attempt) == name else None


def execution_arn(state_machine_arn: str, name: str) -> str:
    """ARN of the execution ``name`` of a (standard) state machine."""
    return f"{state_machine_arn.replace(':stateMachine:', ':execution:', 1)}:{name}"


def is_express_arn(execution_arn: str) -> bool:
    """Whether an execution ARN names an Express run (``arn:…:express:machine:name:id``).

    Express runs cannot be described (``DescribeExecution`` supports them only
    when a Map Run dispatched them) and their names are not unique.
    """
    parts = execution_arn.split(":")
    return len(parts) > 5 and parts[5] == "express"


def state_machine_of(execution_arn: str) -> str | None:
    """The state machine ARN of a (standard or Express) execution ARN; None if it is not one."""
    parts = execution_arn.split(":")
    if len(parts) < 8 or parts[2] != "states" or parts[5] not in ("execution", "express"):
        return None
    return ":".join([*parts[:5], "stateMachine", parts[6]])
