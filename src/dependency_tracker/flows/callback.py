"""Callback flow: tell a parent how its dependency ended, once.

Send first, mark second: a crash in between re-sends on redelivery, which
Step Functions refuses harmlessly (``InvalidToken``/``TaskTimedOut``), while
marking first could lose the wake-up for good.
"""

from __future__ import annotations

from enum import StrEnum, unique
from typing import TYPE_CHECKING, Self

from aws_lambda_powertools.metrics import MetricUnit
from botocore.exceptions import ClientError

from dependency_tracker.clients import client
from dependency_tracker.errors import CallbackDeliveryError
from dependency_tracker.models import (
    CallbackFailure,
    CallbackSuccess,
    DependencyError,
    PayloadState,
    WaiterItem,
)
from dependency_tracker.observability import logger, metrics, redact_token
from dependency_tracker.stores import DependencyTable

if TYPE_CHECKING:
    from mypy_boto3_stepfunctions import SFNClient

    from dependency_tracker.models import Resolution
    from dependency_tracker.settings import Settings

# The parent finished, timed out or was already resumed: nobody to tell.
PARENT_GONE_CODES = frozenset({"TaskTimedOut", "InvalidToken", "TaskDoesNotExist"})
MAX_FAILURE_CAUSE = 32_768


@unique
class CallbackAction(StrEnum):
    """What the callback flow did with a waiter row."""

    SENT = "sent"
    PARENT_GONE = "parent_gone"
    ALREADY_NOTIFIED = "already_notified"
    NOT_READY = "not_ready"

    @property
    def metric_name(self) -> str:
        """CloudWatch metric counting this action, e.g. ``CallbackSent``."""
        return "Callback" + self.value.title().replace("_", "")


class CallbackFlow:
    """Sends ``SendTaskSuccess``/``SendTaskFailure`` for terminal waiter rows."""

    def __init__(
        self, *, settings: Settings, dependencies: DependencyTable, sfn: SFNClient
    ) -> None:
        self.settings = settings
        self.dependencies = dependencies
        self._sfn = sfn

    @classmethod
    def from_settings(cls, settings: Settings) -> Self:
        """Flow wired to the default boto3 clients."""
        return cls(
            settings=settings,
            dependencies=DependencyTable(client("dynamodb"), settings.dependency_table),
            sfn=client("stepfunctions"),
        )

    def handle(self, image: WaiterItem) -> CallbackAction:
        """Notify the parent of the waiter in ``image`` (a stream's new image).

        Raises:
            CallbackDeliveryError: Step Functions refused for a reason that a
                retry may fix (throttling, 5xx); the stream record is retried.
        """
        logger.set_correlation_id(image.payload_id)
        logger.append_keys(token_hash=redact_token(image.task_token))
        action = self._handle(image)
        logger.info("callback handled", extra={"action": action.value})
        metrics.add_metric(name=action.metric_name, unit=MetricUnit.Count, value=1)
        return action

    def _handle(self, image: WaiterItem) -> CallbackAction:
        if image.resolution is None:
            return CallbackAction.NOT_READY
        if image.notified_at is not None:
            return CallbackAction.ALREADY_NOTIFIED
        # Streams deliver at least once: check the row, not just the image.
        current = self.dependencies.get(image.payload_id, image.waiter_id)
        if current is None or current.notified_at is not None:
            return CallbackAction.ALREADY_NOTIFIED
        resolution = current.resolution or image.resolution
        action, outcome = self._send(current, resolution)
        self.dependencies.mark_notified(
            current.payload_id,
            current.waiter_id,
            outcome=outcome,
            retention_days=self.settings.waiter_retention_days,
        )
        return action

    def _send(self, waiter: WaiterItem, resolution: Resolution) -> tuple[CallbackAction, str]:
        try:
            if resolution.state is PayloadState.SUCCEEDED:
                success = CallbackSuccess(
                    payload_id=waiter.payload_id,
                    execution_arn=resolution.execution_arn,
                    replayed=resolution.replayed,
                )
                self._sfn.send_task_success(
                    taskToken=waiter.task_token, output=success.model_dump_json()
                )
            else:
                failure = CallbackFailure(
                    error=DependencyError.for_state(resolution.state),
                    payload_id=waiter.payload_id,
                    state=resolution.state,
                    execution_arn=resolution.execution_arn,
                    payload_error=resolution.error,
                    payload_cause=resolution.cause,
                )
                self._sfn.send_task_failure(
                    taskToken=waiter.task_token,
                    error=failure.error.value,
                    cause=failure.cause_json()[:MAX_FAILURE_CAUSE],
                )
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "Unknown")
            if code in PARENT_GONE_CODES:
                logger.info("parent no longer waits", extra={"code": code})
                return CallbackAction.PARENT_GONE, f"PARENT_GONE:{code}"
            raise CallbackDeliveryError(code, redact_token(waiter.task_token) or "") from exc
        return CallbackAction.SENT, f"SENT:{resolution.state.value}"
