"""Chaining: a succeeded payload whose ``process`` has more steps publishes the next one.

The next payload is the output's features (optionally narrowed by the step's
``chain_filter`` JSONPath) with ``process`` shifted by one. Its id follows the
usual rule, so publishing it twice (a repeated status change) runs it once.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from jsonpath_ng.exceptions import JSONPathError
from jsonpath_ng.ext.parser import parse as parse_jsonpath
from pydantic import ValidationError

from dependency_tracker.payloads.bucket import MAX_INLINE_MESSAGE_BYTES
from dependency_tracker.payloads.model import ProcessPayload

# Key prefix, in the payload bucket, of next-step bodies too large for the queue.
CHAINED_PREFIX = "chained"
# A next step's body goes inline up to the rule of every body the tracker sends itself
# (payloads/bucket.py), by reference past it.
MAX_INLINE_CHAIN_BYTES = MAX_INLINE_MESSAGE_BYTES


class ChainError(ValueError):
    """The next step cannot be built (bad filter, invalid payload)."""


def next_payload(payload: ProcessPayload, output_text: str | None) -> dict[str, Any] | None:
    """The payload for the next step, or None when there is none (or nothing was selected).

    Raises:
        ChainError: The ``chain_filter`` is not valid JSONPath, or the result is
            not a valid payload.
    """
    if len(payload.process) < 2:
        return None
    try:
        output = json.loads(output_text) if output_text else None
    except json.JSONDecodeError:
        output = None
    if not isinstance(output, dict) or not isinstance(output.get("features"), list):
        # An output that is not a payload: the step passes its input features on.
        output = payload.model_dump(mode="json", exclude_none=True)
    features: list[Any] = output["features"]
    expression = payload.process[0].chain_filter
    if expression is not None:
        try:
            compiled = parse_jsonpath(expression)
        except JSONPathError as exc:
            raise ChainError(f"chain_filter {expression!r} is not valid JSONPath: {exc}") from exc
        features = [match.value for match in compiled.find(output)]
    if not features:
        return None
    body = {
        "type": "FeatureCollection",
        "features": features,
        "process": [
            step.model_dump(mode="json", exclude_none=True) for step in payload.process[1:]
        ],
    }
    try:
        ProcessPayload.model_validate(body)
    except ValidationError as exc:
        raise ChainError(
            f"the next step is not a valid payload: {exc.error_count()} errors"
        ) from exc
    return body


def chained_key(body: dict[str, Any]) -> str:
    """Bucket key of a next step's body: from its payload id, so a repeat writes the same."""
    payload_id = ProcessPayload.model_validate(body).id
    return f"{CHAINED_PREFIX}/{hashlib.sha256(payload_id.encode('utf-8')).hexdigest()}.json"
