"""Reading process-queue documents: JSON, SNS envelopes, ``{"url"}`` pointers, payloads.

One loading rule for every message kind (waits, joins, join members), and one way to
describe what was wrong with a document: the parent hears the same words whatever sent it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from dependency_tracker.core.errors import InvalidMessageError
from dependency_tracker.payloads.model import ProcessPayload, printable, utf8_problem

PayloadLoader = Callable[[str], str]
"""Reads the text behind an ``s3://bucket/key`` url."""


def dereference(
    document: dict[str, Any], load_url: PayloadLoader | None, token: str | None
) -> dict[str, Any]:
    """Replace a ``{"url": "s3://..."}`` pointer with the object it points at."""
    if "url" not in document or "process" in document:
        return document
    envelope = {key: value for key, value in document.items() if key != "url"}
    url = document["url"]
    if load_url is None:
        raise InvalidMessageError("payload urls are not supported here", task_token=token)
    if not isinstance(url, str) or not url.startswith("s3://"):
        raise InvalidMessageError(f"url must be an s3:// url, got {url!r}", task_token=token)
    try:
        fetched = unwrap(load_json(load_url(url), f"object at {url}"))
    except InvalidMessageError as exc:
        # Keep the parent's token so it hears about the bad pointer.
        exc.task_token = exc.task_token or token
        raise
    if not isinstance(fetched, dict):
        raise InvalidMessageError(f"object at {url} is not a JSON object", task_token=token)
    return {**fetched, **envelope}


def payload_from(fields: dict[str, Any], where: str, token: str | None) -> ProcessPayload:
    """The payload in ``fields``; an error names ``where`` it was and keeps the parent's token."""
    try:
        return ProcessPayload.model_validate(fields)
    except ValidationError as exc:
        raise InvalidMessageError(
            describe(exc, where), task_token=token, payload_id=id_of(fields)
        ) from exc


def load_json(text: str, what: str) -> Any:
    """``text`` as JSON; an error names ``what`` it was."""
    try:
        return json.loads(text)
    except (json.JSONDecodeError, TypeError) as exc:
        raise InvalidMessageError(f"{what} is not valid JSON: {exc}") from exc
    except RecursionError as exc:
        # Nested deeper than the parser goes (about 1,000 levels): never readable.
        raise InvalidMessageError(f"{what} nests too deeply to be read as JSON") from exc


def unwrap(document: Any) -> Any:
    """Strip an SNS notification envelope (raw delivery off) if there is one."""
    if (
        isinstance(document, dict)
        and document.get("Type") == "Notification"
        and isinstance(document.get("Message"), str)
    ):
        return load_json(document["Message"], "SNS Message")
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


def is_reference(entry: Any) -> bool:
    """Whether ``entry`` is a ``{"url": ...}`` pointer rather than a payload."""
    return isinstance(entry, dict) and "url" in entry and "process" not in entry
