"""Reading a Step Functions execution history: transitions, integrations, timestamps.

moto has no billing, so state transitions are derived from the history: one
per ``*StateEntered`` event, which is what AWS bills for standard workflows
(every state entered, including the states inside each Map iteration).
"""

from __future__ import annotations

import json
from collections import Counter
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from datetime import datetime

# The state every parent (ours and the baseline) enters right after its wait ends.
RESUME_STATE = "Succeeded"


def fetch(sfn: Any, execution_arn: str) -> list[dict[str, Any]]:
    """Every event of an execution, oldest first."""
    events: list[dict[str, Any]] = []
    for page in sfn.get_paginator("get_execution_history").paginate(executionArn=execution_arn):
        events.extend(page["events"])
    return events


def transitions(events: list[dict[str, Any]]) -> int:
    """Billed state transitions: states entered."""
    return sum(1 for event in events if str(event["type"]).endswith("StateEntered"))


def entered(events: list[dict[str, Any]], state: str) -> list[dict[str, Any]]:
    """The ``StateEntered`` events of the state named ``state``."""
    return [
        event
        for event in events
        if str(event["type"]).endswith("StateEntered")
        and event.get("stateEnteredEventDetails", {}).get("name") == state
    ]


def resumed_at(events: list[dict[str, Any]]) -> datetime | None:
    """When the parent entered the state after its wait (None if it never did)."""
    found = entered(events, RESUME_STATE)
    return found[0]["timestamp"] if found else None


def integration_calls(events: list[dict[str, Any]]) -> Counter[str]:
    """Service integration calls the interpreter made, as ``service.Operation``."""
    calls: Counter[str] = Counter()
    for event in events:
        if event["type"] != "TaskScheduled":
            continue
        details = event["taskScheduledEventDetails"]
        resource = str(details["resource"]).split(".", 1)[0]  # sendMessage.waitForTaskToken
        calls[f"{details['resourceType']}.{resource[:1].upper()}{resource[1:]}"] += 1
    return calls


def sqs_message_sizes(events: list[dict[str, Any]]) -> list[int]:
    """Bytes of each SQS message body the interpreter sent (JSON bodies as serialized)."""
    sizes: list[int] = []
    for event in events:
        if event["type"] != "TaskScheduled":
            continue
        details = event["taskScheduledEventDetails"]
        if details["resourceType"] != "sqs":
            continue
        body = json.loads(details["parameters"]).get("MessageBody")
        text = body if isinstance(body, str) else json.dumps(body, separators=(",", ":"))
        sizes.append(len(text.encode("utf-8")))
    return sizes
