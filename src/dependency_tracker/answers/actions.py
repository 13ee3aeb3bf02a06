"""What the callback path did with one stream row: each flow's answer, one metric each."""

from __future__ import annotations

from enum import StrEnum, unique

# How a refused send is passed to the row's record (REFUSED:<code>); never a notify_outcome.
REFUSED_OUTCOME = "REFUSED:"
# How an answer that reached its parent is recorded (SENT:<state>).
SENT_OUTCOME = "SENT:"


@unique
class CallbackAction(StrEnum):
    """What the callback flow did with a dependency-table row."""

    SENT = "sent"
    PARENT_GONE = "parent_gone"
    ALREADY_NOTIFIED = "already_notified"
    NOT_READY = "not_ready"
    RECORDED = "recorded"  # a join member's outcome was added to its join
    REFUSED = "refused"  # Step Functions refused the send (the grant): left for the sweeper

    @property
    def metric_name(self) -> str:
        """CloudWatch metric counting this action, e.g. ``CallbackSent``."""
        return "Callback" + self.value.title().replace("_", "")
