"""Reading process-queue documents once out of their envelopes: payloads, tokens, ids.

Envelopes (JSON, SNS, ``{"url"}`` pointers) are opened in :mod:`dependency_tracker.core.envelopes`
and handed on from here under their old names. One way to describe what was wrong with a
document: the parent hears the same words whatever sent it.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from dependency_tracker.core.envelopes import (
    PayloadLoader,
    dereference,
    is_reference,
)
from dependency_tracker.core.errors import InvalidMessageError
from dependency_tracker.payloads.model import ProcessPayload, printable, utf8_problem

__all__ = [
    "PayloadLoader",
    "dereference",
    "describe",
    "id_of",
    "is_reference",
    "join_token_of",
    "lift_payload",
    "payload_from",
    "token_of",
    "usable",
]


def payload_from(fields: dict[str, Any], where: str, token: str | None) -> ProcessPayload:
    """The payload in ``fields``; an error names ``where`` it was and keeps the parent's token."""
    try:
        return ProcessPayload.model_validate(fields)
    except ValidationError as exc:
        raise InvalidMessageError(
            describe(exc, where), task_token=token, payload_id=id_of(fields)
        ) from exc


def lift_payload(document: Any) -> Any:
    """``{"payload": {...}, "callback": {...}}`` read as the payload with the rest beside it.

    What a state machine's sendMessage task can build around ``$$.Task.Token``.
    """
    if isinstance(document, dict) and isinstance(document.get("payload"), dict):
        envelope = {key: value for key, value in document.items() if key != "payload"}
        return {**document["payload"], **envelope}
    return document


def token_of(document: dict[str, Any]) -> str | None:
    """The ``callback`` task token, if readable."""
    return usable(document.get("callback"), "task_token")


def join_token_of(document: dict[str, Any]) -> str | None:
    """The ``join`` task token, if readable."""
    return usable(document.get("join"), "task_token")


def id_of(document: dict[str, Any]) -> str | None:
    """The document's ``id``, if readable."""
    return usable(document, "id")


def usable(holder: Any, key: str) -> str | None:
    """``holder[key]`` if it is a non-empty string AWS can carry (no lone surrogate)."""
    value = holder.get(key) if isinstance(holder, dict) else None
    if isinstance(value, str) and value and utf8_problem(value) is None:
        return value
    return None


# Strict type errors say what was sent instead (its JSON type, never its value).
_STRICT_TYPE_ERRORS = frozenset({"int_type", "bool_type"})


def describe(exc: ValidationError, root: str) -> str:
    """What was wrong, field by field under ``root``, never quoting a value."""
    parts = []
    for error in exc.errors(include_url=False):
        where = ".".join([root, *(printable(str(part)) for part in error["loc"])])
        message = error["msg"]
        if error["type"] in _STRICT_TYPE_ERRORS:
            message = f"{message}, got {_json_type(error['input'])}"
        parts.append(f"{where}: {printable(message)}")
    return "; ".join(parts)


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    names = {str: "a string", int: "an integer", float: "a number", list: "an array"}
    return "null" if value is None else names.get(type(value), "an object")
