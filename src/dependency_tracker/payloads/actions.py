"""What the process side did with a message or a payload: one enum for every runner."""

from __future__ import annotations

from enum import StrEnum, unique

from aws_lambda_powertools.metrics import MetricUnit

from dependency_tracker.core.observability import logger, metrics


@unique
class ProcessAction(StrEnum):
    """What the process flow did with a message."""

    STARTED = "started"  # claimed a new attempt and started its execution
    RESUMED_START = "resumed_start"  # finished starting a claim another invocation left
    WAITING = "waiting"  # an execution is live; update-state will resolve the waiter
    TOOK_OVER = "took_over"  # the lease ran out on a dead execution: a new attempt started
    RECOVERED = "recovered"  # the lease ran out on an ended run whose status never came: recorded
    REPLAYED = "replayed"  # already finished: the waiter was resolved from the stored state
    INVALID = "invalid"  # the message was recorded as invalid
    JOINED = "joined"  # a join was registered and each member started, replayed or left
    REFUSED = "refused"  # the wait would close a dependency cycle: DependencyCycle sent
    FORWARDED = "forwarded"  # cirrus mode: sent to cirrus's process queue to run
    ANSWERED = "answered"  # cirrus mode: a redelivery whose waiter had its answer already
    CANCELLED = "cancelled"  # a join's parent is gone: its chunks' cancels sent, or members stopped

    @property
    def metric_name(self) -> str:
        """CloudWatch metric counting this action, e.g. ``ProcessStarted``."""
        return "Process" + self.value.title().replace("_", "")


def count(action: ProcessAction, subject: str, **extra: object) -> ProcessAction:
    """Log and count ``action`` on ``subject`` (a payload id or a join's partition)."""
    logger.info("processed", extra={"action": action.value, "payload_id": subject, **extra})
    metrics.add_metric(name=action.metric_name, unit=MetricUnit.Count, value=1)
    return action
