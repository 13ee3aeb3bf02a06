"""Exception hierarchy: one root, one ``exit_code`` per class for the CLI."""

from __future__ import annotations


class DependencyTrackerError(Exception):
    """Root of every error the tracker raises on purpose."""

    exit_code = 1


class ConfigurationError(DependencyTrackerError):
    """A required setting is missing or malformed."""

    exit_code = 2

    def __init__(self, variable: str, reason: str = "is not set") -> None:
        self.variable = variable
        super().__init__(f"configuration: {variable} {reason}")


class InvalidMessageError(DependencyTrackerError):
    """A process-queue message cannot be turned into work.

    ``retryable`` tells the handler whether redelivery could help (a missing S3
    object may appear; malformed JSON never heals). ``task_token`` is whatever
    token could be read from the broken message, so the parent can be told,
    and ``error_name`` is the public error it hears (``InvalidJoin`` for joins).
    """

    exit_code = 3

    def __init__(
        self,
        reason: str,
        *,
        retryable: bool = False,
        task_token: str | None = None,
        payload_id: str | None = None,
        error_name: str = "DependencyInvalid",
    ) -> None:
        self.reason = reason
        self.retryable = retryable
        self.task_token = task_token
        self.payload_id = payload_id
        self.error_name = error_name
        super().__init__(f"invalid message: {reason}")


class UnknownWorkflowError(DependencyTrackerError):
    """No state machine exists for the payload's workflow (yet)."""

    exit_code = 4

    def __init__(self, workflow: str, state_machine_arn: str) -> None:
        self.workflow = workflow
        self.state_machine_arn = state_machine_arn
        super().__init__(f"unknown workflow {workflow!r}: no state machine {state_machine_arn}")


class PayloadNotFoundError(DependencyTrackerError):
    """The state table holds no item for the payload id."""

    exit_code = 5

    def __init__(self, payload_id: str) -> None:
        self.payload_id = payload_id
        super().__init__(f"payload not found: {payload_id}")


class TransitionConflictError(DependencyTrackerError):
    """A conditional write lost its race; expected under concurrency."""

    def __init__(self, what: str) -> None:
        super().__init__(f"transition conflict: {what}")


class StartUnsettledError(DependencyTrackerError):
    """An Express attempt's start may or may not have happened: try the message again later.

    Raised for the claimer's own message when its Express attempt is still ``CLAIMED`` and
    nothing says the start was refused (the claimer died after ``StartExecution``, its
    ``set_processing`` failed, or a twin delivery is starting it now). Starting again could
    be a second live run; the message is retried until the run's report settles the
    attempt or the Express lease runs out and a new attempt may start.
    """

    def __init__(self, payload_id: str, attempt: int) -> None:
        self.payload_id = payload_id
        self.attempt = attempt
        super().__init__(
            f"{payload_id} attempt {attempt}: the Express start may have happened; "
            "retried until its report or the lease"
        )


class CallbackDeliveryError(DependencyTrackerError):
    """``SendTaskSuccess``/``SendTaskFailure`` failed and should be retried."""

    def __init__(self, code: str, token_hash: str) -> None:
        self.code = code
        super().__init__(f"callback delivery failed ({code}) for token {token_hash}")


class StartDeferredError(DependencyTrackerError):
    """Step Functions' quota let no start through before the invocation's deadline.

    Not a fault: the work goes back to its queue (a join chunk is sent again, a
    message is reported as a batch item failure) and the next invocation carries on;
    every start it made stays made (a start is idempotent by name).
    """

    def __init__(self, payload_id: str, code: str) -> None:
        self.payload_id = payload_id
        self.code = code
        super().__init__(
            f"{payload_id}: StartExecution refused ({code}) until the invocation's deadline"
        )


class RecordDeferredError(DependencyTrackerError):
    """Too little of the invocation is left to start this record: it goes back to the queue."""

    def __init__(self, remaining_seconds: float, needed_seconds: float) -> None:
        self.remaining_seconds = remaining_seconds
        self.needed_seconds = needed_seconds
        super().__init__(
            f"{remaining_seconds:.1f} s left, a record is started with at least "
            f"{needed_seconds:.0f} s: returned to the queue"
        )
