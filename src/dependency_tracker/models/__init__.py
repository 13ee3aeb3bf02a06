"""Pydantic models at every boundary: payloads, queue messages, table items, events, outputs.

Field and error names here are part of the public contract (docs/architecture.md).
"""

from dependency_tracker.models.enums import (
    INVALID_INPUT_ERRORS,
    TERMINAL_STATES,
    DependencyError,
    ExecutionStatus,
    PayloadState,
    utcnow,
)
from dependency_tracker.models.events import InputDetails, StatusChange
from dependency_tracker.models.items import (
    WAITER_KEY_PREFIX,
    InvalidMessageItem,
    PayloadStateItem,
    Resolution,
    TableItem,
    WaiterItem,
    waiter_id_for,
)
from dependency_tracker.models.messages import Callback, ProcessMessage
from dependency_tracker.models.outputs import CallbackFailure, CallbackSuccess
from dependency_tracker.models.payload import (
    WORKFLOW_PATTERN,
    Feature,
    ProcessDefinition,
    ProcessPayload,
    payload_id_for,
)

__all__ = [
    "INVALID_INPUT_ERRORS",
    "TERMINAL_STATES",
    "WAITER_KEY_PREFIX",
    "WORKFLOW_PATTERN",
    "Callback",
    "CallbackFailure",
    "CallbackSuccess",
    "DependencyError",
    "ExecutionStatus",
    "Feature",
    "InputDetails",
    "InvalidMessageItem",
    "PayloadState",
    "PayloadStateItem",
    "ProcessDefinition",
    "ProcessMessage",
    "ProcessPayload",
    "Resolution",
    "StatusChange",
    "TableItem",
    "WaiterItem",
    "payload_id_for",
    "utcnow",
    "waiter_id_for",
]
