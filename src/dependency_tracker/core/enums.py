"""States, statuses and the public error names (the cirrus v2 state names)."""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum, unique


@unique
class PayloadState(StrEnum):
    """Life cycle of a payload (the cirrus v2 names)."""

    CLAIMED = "CLAIMED"
    PROCESSING = "PROCESSING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    INVALID = "INVALID"
    ABORTED = "ABORTED"

    @property
    def is_terminal(self) -> bool:
        """True once no execution of this attempt is live."""
        return self in TERMINAL_STATES

    @property
    def is_success(self) -> bool:
        """True for ``SUCCEEDED``."""
        return self is PayloadState.SUCCEEDED

    @property
    def reruns(self) -> bool:
        """True when the next submission starts a new attempt on its own."""
        return self in {PayloadState.FAILED, PayloadState.ABORTED}


TERMINAL_STATES = frozenset(
    {PayloadState.SUCCEEDED, PayloadState.FAILED, PayloadState.INVALID, PayloadState.ABORTED}
)


@unique
class DependencyError(StrEnum):
    """Error names a parent state machine can ``Catch`` (never ``States.*``)."""

    FAILED = "DependencyFailed"
    INVALID = "DependencyInvalid"
    ABORTED = "DependencyAborted"
    TIMED_OUT = "DependencyTimedOut"
    QUORUM_UNREACHABLE = "QuorumUnreachable"
    INVALID_JOIN = "InvalidJoin"
    CYCLE = "DependencyCycle"
    # A join's deadline passed with fewer than ``min_succeeded`` members succeeded.
    DEADLINE_EXCEEDED = "JoinDeadlineExceeded"
    # Sent by an operator (``dependency-tracker release``), never by the tracker itself.
    RELEASED = "DependencyReleased"

    @classmethod
    def for_state(cls, state: PayloadState) -> DependencyError:
        """Error a waiter receives when its dependency ends in ``state``."""
        try:
            return _ERROR_FOR_STATE[state]
        except KeyError:
            msg = f"{state} is not a failure state"
            raise ValueError(msg) from None


_ERROR_FOR_STATE = {
    PayloadState.FAILED: DependencyError.FAILED,
    PayloadState.INVALID: DependencyError.INVALID,
    PayloadState.ABORTED: DependencyError.ABORTED,
}


@unique
class ExecutionStatus(StrEnum):
    """Step Functions execution statuses as EventBridge reports them."""

    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    TIMED_OUT = "TIMED_OUT"
    ABORTED = "ABORTED"
    PENDING_REDRIVE = "PENDING_REDRIVE"


# Error names a workflow raises when its input, not the run, is at fault.
INVALID_INPUT_ERRORS = frozenset(
    {
        "InvalidInput",
        "InvalidInputError",
        "cirrus.lib.errors.InvalidInput",
        "stactask.exceptions.InvalidInput",
    }
)


def utcnow() -> datetime:
    """Timezone-aware now; one place to read the clock."""
    return datetime.now(UTC)
