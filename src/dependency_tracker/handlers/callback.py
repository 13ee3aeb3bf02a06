"""``callback`` Lambda: dependency-table stream → :class:`CallbackFlow`, per-record failures."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import (
    BatchProcessor,
    EventType,
    process_partial_response,
)
from pydantic import ValidationError

from dependency_tracker import app
from dependency_tracker.core.observability import log_context, logger, metrics
from dependency_tracker.handlers.deadline import deadline_of
from dependency_tracker.joins.rows import row_from_plain

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
    from aws_lambda_powertools.utilities.data_classes.dynamo_db_stream_event import (
        DynamoDBRecord,
    )
    from aws_lambda_powertools.utilities.typing import LambdaContext

    from dependency_tracker.callbacks.flow import CallbackFlow

processor = BatchProcessor(
    event_type=EventType.DynamoDBStreams, raise_on_entire_batch_failure=False
)


def callback_flow() -> CallbackFlow:
    """The flow of this Lambda environment (:func:`dependency_tracker.app.current`)."""
    return app.current().callback


def record_handler(record: DynamoDBRecord, lambda_context: LambdaContext | None = None) -> None:
    """Hand one row to the callback flow (waiter, join or membership); raising fails only it.

    Powertools passes ``lambda_context``: a throttled send is retried here only
    while the invocation has time left (:mod:`~dependency_tracker.handlers.deadline`).
    """
    if record.dynamodb is None:
        return
    image = record.dynamodb.new_image
    if not image:  # a REMOVE (TTL expiry): nothing to tell anyone
        return
    with log_context(sequence_number=record.dynamodb.sequence_number):
        try:
            row = row_from_plain(image)
        except ValidationError as exc:
            # Not logger.exception: the message would quote the image, token included.
            logger.error(
                "stream image is not a waiter row",
                extra={"errors": exc.errors(include_url=False, include_input=False)},
            )
            metrics.add_metric(name="InvalidWaiterImages", unit=MetricUnit.Count, value=1)
            raise
        callback_flow().handle(row, deadline=deadline_of(lambda_context))


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    """DynamoDB stream event → ``{"batchItemFailures": [...]}``."""
    return process_partial_response(
        event=event, record_handler=record_handler, processor=processor, context=context
    )
