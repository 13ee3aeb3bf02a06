"""``cirrus-events`` Lambda: cirrus's workflow events (SQS) → :class:`CirrusEvents`.

The queue is subscribed to cirrus-geo's ``${CirrusPrefix}-workflow-event`` SNS
topic (cirrus mode, docs/cirrus.md); bodies arrive raw or in an SNS envelope.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import (
    BatchProcessor,
    EventType,
    process_partial_response,
)

from dependency_tracker import app
from dependency_tracker.cirrus.models import WorkflowEvent
from dependency_tracker.core.observability import log_context, logger, metrics, set_correlation_id

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
    from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
    from aws_lambda_powertools.utilities.typing import LambdaContext

    from dependency_tracker.cirrus.flow import CirrusEvents

processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)


def cirrus_events_flow() -> CirrusEvents:
    """The flow of this Lambda environment (:func:`dependency_tracker.app.current`)."""
    return app.current().cirrus_events


def record_handler(record: SQSRecord) -> None:
    """One workflow event; raising fails only this record (retried, then its DLQ)."""
    with log_context(message_id=record.message_id):
        try:
            event = WorkflowEvent.from_body(record.body)
        except ValueError:
            logger.exception("not a cirrus workflow event: left for the DLQ")
            metrics.add_metric(name="InvalidCirrusEvents", unit=MetricUnit.Count, value=1)
            raise
        set_correlation_id(event.payload_id)
        cirrus_events_flow().handle(event)


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    """SQS event → ``{"batchItemFailures": [...]}`` (``ReportBatchItemFailures``)."""
    return process_partial_response(
        event=event, record_handler=record_handler, processor=processor, context=context
    )
