"""Helpers to build SQS events from the real event shape in tests/events."""

from __future__ import annotations

import copy
import json
from typing import Any

from tests.conftest import load_event


def sqs_event(*bodies: str | dict[str, Any], ids: list[str] | None = None) -> dict[str, Any]:
    """The real SQS event shape with one record per body."""
    template = load_event("sqs_process.json")["Records"][0]
    records = []
    for index, body in enumerate(bodies):
        record = copy.deepcopy(template)
        record["messageId"] = ids[index] if ids else f"msg-{index}"
        record["body"] = body if isinstance(body, str) else json.dumps(body)
        records.append(record)
    return {"Records": records}
