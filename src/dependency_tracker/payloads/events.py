"""Events the handlers receive, as models."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from dependency_tracker.core.enums import INVALID_INPUT_ERRORS, ExecutionStatus, PayloadState


class InputDetails(BaseModel):
    """Whether EventBridge carried the execution input inline."""

    included: bool = True


class StatusChange(BaseModel):
    """``detail`` of a "Step Functions Execution Status Change" event."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    execution_arn: str = Field(alias="executionArn")
    state_machine_arn: str = Field(alias="stateMachineArn")
    name: str
    status: ExecutionStatus
    start_date: int | None = Field(default=None, alias="startDate")
    stop_date: int | None = Field(default=None, alias="stopDate")
    input: str | None = None
    input_details: InputDetails = Field(default_factory=InputDetails, alias="inputDetails")
    output: str | None = None
    output_details: InputDetails = Field(default_factory=InputDetails, alias="outputDetails")
    error: str | None = None
    cause: str | None = None
    # RedriveExecution reruns a failed Standard execution under the same ARN; each
    # redrive sends a new terminal event with this count raised.
    redrive_count: int = Field(default=0, alias="redriveCount")
    # An Express workflow's own report may carry its output by pointer instead
    # (``s3://bucket/key``): output and input inline could pass SQS's 256 KiB.
    output_url: str | None = None

    @classmethod
    def from_description(cls, described: dict[str, Any]) -> StatusChange:
        """The status change a ``DescribeExecution`` response stands for (no event needed)."""
        return cls.model_validate(status_change_detail(described))

    @property
    def run_rank(self) -> int:
        """Orders the terminal reports of one execution: later redrive, then later stop.

        A redriven execution keeps its ARN, and EventBridge retries a delivery for
        up to 24 hours, so the first failure's event can arrive after the
        redrive's success; the higher rank is the newer run.
        """
        return self.redrive_count * RANK_PER_REDRIVE + (self.stop_date or 0)

    @property
    def state_machine_name(self) -> str:
        """Name part of the state machine ARN."""
        return self.state_machine_arn.rsplit(":", 1)[-1]

    @property
    def final_state(self) -> PayloadState | None:
        """Payload state this status ends in, or None while the execution lives."""
        match self.status:
            case ExecutionStatus.SUCCEEDED:
                return PayloadState.SUCCEEDED
            case ExecutionStatus.FAILED if self.error in INVALID_INPUT_ERRORS:
                return PayloadState.INVALID
            case ExecutionStatus.FAILED | ExecutionStatus.TIMED_OUT:
                return PayloadState.FAILED
            case ExecutionStatus.ABORTED:
                return PayloadState.ABORTED
            case _:
                return None

    @property
    def failure_error(self) -> str | None:
        """Error to record for a failed run (Step Functions names timeouts itself)."""
        if self.status is ExecutionStatus.TIMED_OUT:
            return self.error or "States.Timeout"
        if self.status is ExecutionStatus.ABORTED:
            return self.error or "Aborted"
        return self.error


# Stop dates are epoch milliseconds (13 digits until the year 2286).
RANK_PER_REDRIVE = 10**13


def status_change_detail(described: dict[str, Any]) -> dict[str, Any]:
    """The status-change event ``detail`` a ``DescribeExecution`` response stands for.

    What EventBridge would carry: the same fields, dates as epoch milliseconds.
    """
    return {
        "executionArn": described["executionArn"],
        "stateMachineArn": described["stateMachineArn"],
        "name": described["name"],
        "status": described["status"],
        "startDate": _millis(described.get("startDate")),
        "stopDate": _millis(described.get("stopDate")),
        "input": described.get("input"),
        "output": described.get("output"),
        "inputDetails": {"included": "input" in described},
        "outputDetails": {"included": "output" in described},
        "error": described.get("error"),
        "cause": described.get("cause"),
        "redriveCount": described.get("redriveCount") or 0,
    }


def _millis(value: object) -> int | None:
    if isinstance(value, datetime):
        return int(value.timestamp() * 1000)
    if isinstance(value, int):
        return value
    return None


class StatusReport(BaseModel):
    """``{"status_report": {...}}``: an Express workflow reporting its own end.

    The fields are those of the EventBridge event's ``detail`` (the workflow's
    final states fill them from ``$$.Execution`` and their own output).
    """

    status_report: StatusChange
