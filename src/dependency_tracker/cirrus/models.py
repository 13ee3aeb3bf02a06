"""cirrus-geo v2 at its boundary: its state table items and its workflow events.

The tracker reads both and writes neither: cirrus's state table is the source
of truth about a payload it runs, and a workflow event only says *when* to
look again (events are best effort: duplicated, reordered, sometimes lost).
Field names follow cirrus-geo 2.0.0 (``cirrus/lib/statedb.py`` and
``cirrus/lib/events.py``).
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from enum import StrEnum, unique
from typing import Any, Self

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError

from dependency_tracker.core.enums import PayloadState
from dependency_tracker.core.envelopes import open_body
from dependency_tracker.core.errors import InvalidMessageError
from dependency_tracker.core.limits import DDB_MAX_PARTITION_KEY_BYTES, DDB_MAX_SORT_KEY_BYTES

# cirrus's own rule (cirrus/lib/utils.py PAYLOAD_ID_REGEX): it refuses any other id.
CIRRUS_PAYLOAD_ID = re.compile(r"(?P<collections>.+)/workflow-(?P<workflow>[^/]+)/(?P<itemids>.+)")
# cirrus splits "{collections}_{workflow}" on its last "_": a workflow may not hold one.
CIRRUS_WORKFLOW = re.compile(r"^[A-Za-z0-9-]{1,64}$")


def cirrus_key(payload_id: str) -> dict[str, str]:
    """The key in cirrus's state table of a payload id (``StateDB.payload_id_to_key``)."""
    collections, _, rest = payload_id.partition("/workflow-")
    workflow, _, itemids = rest.partition("/")
    return {"collections_workflow": f"{collections}_{workflow}", "itemids": itemids}


def is_cirrus_id(payload_id: str) -> bool:
    """True when cirrus can key this id (events about ``"unknown"`` payloads cannot)."""
    return payload_id.count("/workflow-") == 1 and bool(CIRRUS_PAYLOAD_ID.fullmatch(payload_id))


def cirrus_id_problem(payload_id: str, workflow: str) -> str | None:
    """Why cirrus would refuse this payload id or workflow name; None when it would not."""
    if payload_id.count("/workflow-") > 1:
        # cirrus's key takes the part between the first two: another id's key.
        return (
            f"payload id {payload_id[:200]!r} holds '/workflow-' twice: cirrus would key it "
            "as the shorter id it starts with"
        )
    if not CIRRUS_PAYLOAD_ID.fullmatch(payload_id):
        return (
            f"payload id {payload_id[:200]!r} does not follow cirrus's rule "
            "'{collections}/workflow-{workflow}/{itemids}' (an idempotency_key id cannot "
            "be run by cirrus)"
        )
    if not CIRRUS_WORKFLOW.fullmatch(workflow):
        return f"workflow {workflow!r} cannot be run by cirrus: its names hold no '_'"
    key = cirrus_key(payload_id)
    # cirrus keys its table on the id's parts as they are (no hashing of long ids).
    limits = (
        ("collections_workflow", DDB_MAX_PARTITION_KEY_BYTES),
        ("itemids", DDB_MAX_SORT_KEY_BYTES),
    )
    for name, limit in limits:
        size = len(key[name].encode("utf-8"))
        if size > limit:
            return (
                f"payload id too long for cirrus's state table: its {name} key is {size} "
                f"bytes, DynamoDB allows {limit}"
            )
    return None


class CirrusStateItem(BaseModel):
    """One payload's item in cirrus's state table (``${CirrusPrefix}-state``)."""

    model_config = ConfigDict(extra="ignore")

    collections_workflow: str
    itemids: str
    state_updated: str  # "{STATE}_{iso timestamp}"
    executions: list[str] = Field(default_factory=list)
    outputs: list[str] | None = None
    last_error: str | None = None

    @property
    def payload_id(self) -> str:
        """The payload id (``StateDB.key_to_payload_id``)."""
        collections, _, workflow = self.collections_workflow.rpartition("_")
        return f"{collections}/workflow-{workflow}/{self.itemids}"

    @property
    def state(self) -> PayloadState:
        """The state; ``TIMED_OUT`` runs are recorded by cirrus as ``FAILED``."""
        return PayloadState(self.state_updated.partition("_")[0])

    @property
    def updated(self) -> datetime:
        """When the state was written (cirrus's clock)."""
        return datetime.fromisoformat(self.state_updated.partition("_")[2])

    @property
    def last_execution(self) -> str | None:
        """The newest run's ARN: cirrus appends it when it claims the payload."""
        return self.executions[-1] if self.executions else None

    @classmethod
    def from_item(cls, item: dict[str, Any]) -> Self:
        """Model from a low-level ``GetItem`` attribute-value map."""
        plain: dict[str, Any] = {}
        for name, value in item.items():
            if "S" in value:
                plain[name] = value["S"]
            elif "L" in value:
                plain[name] = [entry.get("S") for entry in value["L"] if "S" in entry]
            elif "SS" in value:
                plain[name] = sorted(value["SS"])
        return cls.model_validate(plain)


@unique
class WorkflowEventType(StrEnum):
    """cirrus's workflow event types (v2, and the v1 names it replaced)."""

    CLAIMED_PROCESSING = "CLAIMED_PROCESSING"
    STARTED_PROCESSING = "STARTED_PROCESSING"
    ALREADY_INVALID = "ALREADY_INVALID"
    ALREADY_PROCESSING = "ALREADY_PROCESSING"
    ALREADY_CLAIMED = "ALREADY_CLAIMED"
    ALREADY_SUCCEEDED = "ALREADY_SUCCEEDED"
    DUPLICATE_ID_ENCOUNTERED = "DUPLICATE_ID_ENCOUNTERED"
    FAILED = "FAILED"
    TIMED_OUT = "TIMED_OUT"
    SUCCEEDED = "SUCCEEDED"
    INVALID = "INVALID"
    ABORTED = "ABORTED"
    RECORD_EXTRACT_FAILED = "RECORD_EXTRACT_FAILED"
    NOT_A_PROCESS_PAYLOAD = "NOT_A_PROCESS_PAYLOAD"
    COMPLETED = "COMPLETED"  # before v2: SUCCEEDED
    ALREADY_COMPLETED = "ALREADY_COMPLETED"  # before v2: ALREADY_SUCCEEDED

    @property
    def may_end(self) -> bool:
        """True when the payload may have ended: cirrus's state table is read again."""
        return self in _MAY_END

    @property
    def refused(self) -> bool:
        """True when cirrus refused the payload itself (it writes no state for it)."""
        return self in {
            WorkflowEventType.NOT_A_PROCESS_PAYLOAD,
            WorkflowEventType.RECORD_EXTRACT_FAILED,
        }


_MAY_END = frozenset(
    {
        WorkflowEventType.ALREADY_INVALID,
        WorkflowEventType.ALREADY_SUCCEEDED,
        WorkflowEventType.FAILED,
        WorkflowEventType.TIMED_OUT,
        WorkflowEventType.SUCCEEDED,
        WorkflowEventType.INVALID,
        WorkflowEventType.ABORTED,
        WorkflowEventType.COMPLETED,
        WorkflowEventType.ALREADY_COMPLETED,
    }
)


def subscription_attributes() -> dict[str, str]:
    """The SNS subscription's attributes: raw delivery, and only the types acted on.

    cirrus sets ``event_type`` as a message attribute on every event; progress
    events (claims, starts, skips) never reach the tracker's queue.
    """
    acted_on = sorted(kind.value for kind in WorkflowEventType if kind.may_end or kind.refused)
    return {
        "RawMessageDelivery": "true",
        "FilterPolicyScope": "MessageAttributes",
        "FilterPolicy": json.dumps({"event_type": acted_on}),
    }


class WorkflowEvent(BaseModel):
    """One message of cirrus's ``${CirrusPrefix}-workflow-event`` topic."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    event_type: str
    payload_id: str
    isotimestamp: str | None = None
    execution: str | None = None  # a console URL: the ARN follows its last "/"
    input_payload_url: str | None = None
    output_payload_url: str | None = Field(
        default=None, validation_alias=AliasChoices("output_payload_url", "payload_url")
    )
    error: str | None = None

    @property
    def kind(self) -> WorkflowEventType | None:
        """The event type, or None for a type this version does not know."""
        try:
            return WorkflowEventType(self.event_type)
        except ValueError:
            return None

    @property
    def execution_arn(self) -> str | None:
        """The execution's ARN, from the console URL (or the ARN itself)."""
        if not self.execution:
            return None
        return self.execution.rsplit("/", 1)[-1]

    @classmethod
    def from_body(cls, body: str) -> Self:
        """Parse an SQS body: the event itself, or wrapped in an SNS envelope.

        Raises:
            ValueError: The body is not a workflow event.
        """
        try:
            return cls.model_validate(open_body(body, "cirrus workflow event"))
        except (InvalidMessageError, ValidationError) as exc:
            msg = f"not a cirrus workflow event: {exc}"
            raise ValueError(msg) from exc
