"""Event filters the deployment declares, and a matcher so local mode applies the same ones.

``template.yaml`` declares these patterns for the callback stream mapping and the
update-state rule; the local pumps evaluate them with :func:`matches`, so a
record is delivered locally exactly when it would be on AWS.
"""

from __future__ import annotations

from typing import Any

from dependency_tracker.core.enums import TERMINAL_STATES, ExecutionStatus

TERMINAL_EXECUTION_STATUSES = sorted(
    {
        ExecutionStatus.SUCCEEDED,
        ExecutionStatus.FAILED,
        ExecutionStatus.TIMED_OUT,
        ExecutionStatus.ABORTED,
    }
)

# Lambda event-source-mapping FilterCriteria pattern for the callback function:
# waiter rows that are terminal and not yet notified.
CALLBACK_STREAM_FILTER: dict[str, Any] = {
    "eventName": ["INSERT", "MODIFY"],
    "dynamodb": {
        "NewImage": {
            "workflow_state": {"S": sorted(TERMINAL_STATES)},
            "notified_at": {"S": [{"exists": False}]},
        }
    },
}


def update_state_event_pattern(workflow_arn_prefix: str) -> dict[str, Any]:
    """EventBridge pattern for terminal status changes of managed state machines."""
    return {
        "source": ["aws.states"],
        "detail-type": ["Step Functions Execution Status Change"],
        "detail": {
            "status": list(TERMINAL_EXECUTION_STATUSES),
            "stateMachineArn": [{"prefix": workflow_arn_prefix}],
        },
    }


def matches(pattern: dict[str, Any], event: dict[str, Any]) -> bool:
    """Evaluate the subset of event-pattern syntax these filters use.

    Supported: nested objects, lists of literal values, ``{"exists": bool}``
    and ``{"prefix": str}``.
    """
    for key, expected in pattern.items():
        present = isinstance(event, dict) and key in event
        value = event.get(key) if present else None
        if isinstance(expected, dict):
            if not _matches_object(expected, value, present=present):
                return False
        elif not any(_matches_rule(rule, value, present=present) for rule in expected):
            return False
    return True


def _matches_object(expected: dict[str, Any], value: Any, *, present: bool) -> bool:
    if present and isinstance(value, dict):
        return matches(expected, value)
    # An absent object can still satisfy a pattern made only of "exists: false".
    return matches(expected, {})


def _matches_rule(rule: Any, value: Any, *, present: bool) -> bool:
    if isinstance(rule, dict):
        if "exists" in rule:
            return bool(rule["exists"]) == present
        if "prefix" in rule:
            return present and isinstance(value, str) and value.startswith(rule["prefix"])
        msg = f"unsupported pattern rule {rule!r}"
        raise ValueError(msg)
    return present and value == rule
