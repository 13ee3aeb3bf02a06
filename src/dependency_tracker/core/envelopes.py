"""What a queue body comes wrapped in: JSON, an SNS notification, an ``{"url": "s3://..."}``.

Every body the tracker reads (process-queue messages, join members, cirrus workflow
events) is opened here, so an envelope is recognised the same way wherever it arrives.
:func:`open_body` is strict (its errors name what was wrong); :func:`peek` reads the same
way but answers None, for the best-effort reads of a body already known to be broken.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from dependency_tracker.core.errors import InvalidMessageError

PayloadLoader = Callable[[str], str]
"""Reads the text behind an ``s3://bucket/key`` url."""

S3_SCHEME = "s3://"


def is_s3_url(value: object) -> bool:
    """Whether ``value`` is an ``s3://`` url (a string; bucket and key are not checked here)."""
    return isinstance(value, str) and value.startswith(S3_SCHEME)


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


def open_body(text: str, what: str = "message body") -> Any:
    """A body decoded and out of its SNS envelope, if it came in one.

    Raises:
        InvalidMessageError: The body, or the SNS message in it, is not JSON.
    """
    return unwrap(load_json(text, what))


def peek(text: str) -> Any | None:
    """:func:`open_body`, or None when it cannot be read: for best-effort reads only."""
    try:
        return open_body(text)
    except InvalidMessageError:
        return None


def is_reference(entry: Any) -> bool:
    """Whether ``entry`` is a ``{"url": ...}`` pointer rather than a payload."""
    return isinstance(entry, dict) and "url" in entry and "process" not in entry


def dereference(
    document: dict[str, Any], load_url: PayloadLoader | None, token: str | None
) -> dict[str, Any]:
    """Replace a ``{"url": "s3://..."}`` pointer with the object it points at."""
    if not is_reference(document):
        return document
    envelope = {key: value for key, value in document.items() if key != "url"}
    url = document["url"]
    if load_url is None:
        raise InvalidMessageError("payload urls are not supported here", task_token=token)
    if not is_s3_url(url):
        raise InvalidMessageError(f"url must be an s3:// url, got {url!r}", task_token=token)
    try:
        fetched = open_body(load_url(url), f"object at {url}")
    except InvalidMessageError as exc:
        # Keep the parent's token so it hears about the bad pointer.
        exc.task_token = exc.task_token or token
        raise
    if not isinstance(fetched, dict):
        raise InvalidMessageError(f"object at {url} is not a JSON object", task_token=token)
    return {**fetched, **envelope}
