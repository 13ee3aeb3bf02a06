"""``process`` Lambda: SQS process queue → :class:`ProcessFlow`, with partial batch failures."""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import (
    BatchProcessor,
    EventType,
    process_partial_response,
)

from dependency_tracker.errors import InvalidMessageError, UnknownWorkflowError
from dependency_tracker.flows.process import ProcessFlow
from dependency_tracker.models import JoinChunkMessage, JoinMessage, join_partition_for
from dependency_tracker.observability import logger, metrics
from dependency_tracker.settings import get_settings

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
    from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
    from aws_lambda_powertools.utilities.typing import LambdaContext

processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)


@cache
def process_flow() -> ProcessFlow:
    """The flow of this Lambda environment, built on first use."""
    return ProcessFlow.from_settings(get_settings())


def record_handler(record: SQSRecord) -> None:
    """Handle one message; raising marks only this record as failed (it is retried)."""
    flow = process_flow()
    with logger.append_context_keys(message_id=record.message_id):
        try:
            message = flow.parse(record.body, message_id=record.message_id)
            logger.set_correlation_id(
                join_partition_for(message.join_id)
                if isinstance(message, JoinMessage | JoinChunkMessage)
                else message.payload_id
            )
            flow.handle(message)
        except InvalidMessageError as exc:
            if exc.retryable:
                logger.error("message cannot be read yet", extra={"reason": exc.reason})
                metrics.add_metric(name="UnreadableMessages", unit=MetricUnit.Count, value=1)
                raise
            flow.record_invalid(exc, body=record.body, message_id=record.message_id)
        except UnknownWorkflowError as exc:
            logger.error("unknown workflow", extra={"reason": str(exc)})
            raise
        except Exception:
            # Retried by SQS (then the DLQ); say why, or the DLQ alone tells nothing.
            logger.exception("message failed: it will be retried")
            raise


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    """SQS event → ``{"batchItemFailures": [...]}`` (``ReportBatchItemFailures``)."""
    return process_partial_response(
        event=event, record_handler=record_handler, processor=processor, context=context
    )
