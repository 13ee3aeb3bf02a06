"""The models by their first address: payloads, queue messages, table items, events, outputs.

Each lives with its feature now (``payloads/``, ``waits/``, ``joins/``, ``table/``); this
package keeps the public names importable where docs/versioning.md promises them
(``dependency_tracker.models.ProcessPayload``). Code in the project imports from the features.
"""

from dependency_tracker.core.enums import (
    INVALID_INPUT_ERRORS,
    TERMINAL_STATES,
    DependencyError,
    ExecutionStatus,
    PayloadState,
    utcnow,
)
from dependency_tracker.core.envelopes import PayloadLoader
from dependency_tracker.intake.parse import read_message
from dependency_tracker.joins.messages import (
    JOIN_ID_PATTERN,
    JoinChunkMessage,
    JoinMessage,
    JoinSpec,
)
from dependency_tracker.joins.outputs import FailedMember, JoinSummary, MemberOutcome
from dependency_tracker.joins.rows import (
    JOIN_COUNT_SHARDS,
    ChunkItem,
    CountShardItem,
    JoinCounts,
    JoinItem,
    Row,
    chunk_id_for,
    count_partition_for,
    row_from_item,
    row_from_plain,
    shard_of,
)
from dependency_tracker.payloads.events import InputDetails, StatusChange, StatusReport
from dependency_tracker.payloads.model import (
    RESERVED_ID_PREFIXES,
    WORKFLOW_PATTERN,
    Feature,
    ProcessDefinition,
    ProcessPayload,
    ReplaceIf,
    keyed_payload_id,
    payload_id_for,
)
from dependency_tracker.table.items import (
    EDGE_PARTITION_PREFIX,
    JOIN_PARTITION_PREFIX,
    JOIN_ROW_KEY,
    MEMBERSHIP_KEY_PREFIX,
    WAITER_KEY_PREFIX,
    DependencyRow,
    EdgeItem,
    InvalidMessageItem,
    MembershipItem,
    PayloadStateItem,
    Resolution,
    TableItem,
    WaiterItem,
    edge_id_for,
    edge_partition_for,
    is_edge_item,
    join_partition_for,
    membership_id_for,
    waiter_id_for,
)
from dependency_tracker.table.rows import is_bookkeeping_item
from dependency_tracker.waits.messages import Callback, ProcessMessage, WaitMessage
from dependency_tracker.waits.outputs import CallbackFailure, CallbackSuccess

__all__ = [
    "EDGE_PARTITION_PREFIX",
    "INVALID_INPUT_ERRORS",
    "JOIN_COUNT_SHARDS",
    "JOIN_ID_PATTERN",
    "JOIN_PARTITION_PREFIX",
    "JOIN_ROW_KEY",
    "MEMBERSHIP_KEY_PREFIX",
    "RESERVED_ID_PREFIXES",
    "TERMINAL_STATES",
    "WAITER_KEY_PREFIX",
    "WORKFLOW_PATTERN",
    "Callback",
    "CallbackFailure",
    "CallbackSuccess",
    "ChunkItem",
    "CountShardItem",
    "DependencyError",
    "DependencyRow",
    "EdgeItem",
    "ExecutionStatus",
    "FailedMember",
    "Feature",
    "InputDetails",
    "InvalidMessageItem",
    "JoinChunkMessage",
    "JoinCounts",
    "JoinItem",
    "JoinMessage",
    "JoinSpec",
    "JoinSummary",
    "MemberOutcome",
    "MembershipItem",
    "PayloadLoader",
    "PayloadState",
    "PayloadStateItem",
    "ProcessDefinition",
    "ProcessMessage",
    "ProcessPayload",
    "ReplaceIf",
    "Resolution",
    "Row",
    "StatusChange",
    "StatusReport",
    "TableItem",
    "WaitMessage",
    "WaiterItem",
    "chunk_id_for",
    "count_partition_for",
    "edge_id_for",
    "edge_partition_for",
    "is_bookkeeping_item",
    "is_edge_item",
    "join_partition_for",
    "keyed_payload_id",
    "membership_id_for",
    "payload_id_for",
    "read_message",
    "row_from_item",
    "row_from_plain",
    "shard_of",
    "utcnow",
    "waiter_id_for",
]
