"""``update-state`` Lambda: execution status changes → :class:`UpdateStateFlow`.

Two event sources feed it: the EventBridge rule on "Step Functions Execution
Status Change" (standard workflows), and the status-report queue, on which
Express workflows report their own end (they emit no such events).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import (
    BatchProcessor,
    EventType,
    process_partial_response,
)
from aws_lambda_powertools.utilities.data_classes import EventBridgeEvent
from pydantic import ValidationError

from dependency_tracker import app
from dependency_tracker.core.observability import (
    log_context,
    log_keys,
    logger,
    metrics,
    set_correlation_id,
)
from dependency_tracker.payloads.events import StatusChange, StatusReport

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
    from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
    from aws_lambda_powertools.utilities.typing import LambdaContext

    from dependency_tracker.payloads.update_state import UpdateStateFlow

report_processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)


def update_state_flow() -> UpdateStateFlow:
    """The flow of this Lambda environment (:func:`dependency_tracker.app.current`)."""
    return app.current().update_state


def report_record_handler(record: SQSRecord) -> None:
    """One Express workflow's report; raising fails only this record (then its DLQ)."""
    with log_context(message_id=record.message_id):
        try:
            change = StatusReport.model_validate_json(record.body).status_report
        except ValidationError:
            logger.exception("not a status report")
            metrics.add_metric(name="InvalidStatusReports", unit=MetricUnit.Count, value=1)
            raise
        update_state_flow().handle(change)


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def lambda_handler(
    event: dict[str, Any], context: LambdaContext
) -> dict[str, str] | PartialItemFailureResponse:
    """EventBridge event → ``{"action": ...}``; SQS batch of reports → batch item failures.

    Raising on an EventBridge event lets Lambda's async retries, then the DLQ, take it.
    """
    if "Records" in event:
        return process_partial_response(
            event=event,
            record_handler=report_record_handler,
            processor=report_processor,
            context=context,
        )
    status_event = EventBridgeEvent(event)
    set_correlation_id(status_event.get_id)
    log_keys(event_id=status_event.get_id)
    try:
        change = StatusChange.model_validate(status_event.detail)
    except ValidationError:
        logger.exception("not a Step Functions execution status change")
        metrics.add_metric(name="InvalidStatusEvents", unit=MetricUnit.Count, value=1)
        raise
    action = update_state_flow().handle(change)
    return {"action": action.value}
