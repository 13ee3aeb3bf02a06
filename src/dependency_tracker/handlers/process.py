"""``process`` Lambda: SQS process queue → the router (intake/route.py), partial batch failures."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import (
    BatchProcessor,
    EventType,
    process_partial_response,
)

from dependency_tracker import app
from dependency_tracker.core.errors import (
    InvalidMessageError,
    RecordDeferredError,
    StartDeferredError,
    StartUnsettledError,
    UnknownWorkflowError,
)
from dependency_tracker.core.observability import log_context, logger, metrics, set_correlation_id
from dependency_tracker.core.pacing import deadline_scope
from dependency_tracker.handlers.deadline import RECORD_START_SECONDS, deadline_of
from dependency_tracker.joins.fan_out import ORIGIN_MESSAGE_ID
from dependency_tracker.joins.messages import JoinCancelMessage, JoinChunkMessage, JoinMessage
from dependency_tracker.table.items import join_partition_for

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
    from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
    from aws_lambda_powertools.utilities.typing import LambdaContext

    from dependency_tracker.intake.parse import Message
    from dependency_tracker.intake.route import Intake

processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)


def process_flow() -> Intake:
    """The flow of this Lambda environment (:func:`dependency_tracker.app.current`)."""
    return app.current().process


def record_handler(record: SQSRecord, lambda_context: LambdaContext | None = None) -> None:
    """Handle one message; raising marks only this record as failed (it is retried).

    A record is started only with :data:`RECORD_START_SECONDS` of the invocation
    left; the rest of the batch goes back as batch item failures, untouched. A join
    message that did not come from the join queue is handed to it (joins/fan_out.py),
    so its registration never shares an invocation with other messages.

    A message that fails on its last receive (see :func:`_last_receive`) has its
    parent answered first, then fails all the same: SQS moves it to the DLQ, whole,
    for the operator to redrive (docs/reliability.md, "The last receive").
    """
    _check_time_left(lambda_context)
    flow = process_flow()
    message: Message | None = None
    message_id = _origin_id(record)
    with log_context(message_id=message_id), deadline_scope(deadline_of(lambda_context)):
        try:
            message = flow.parse(record.body, message_id=message_id)
            set_correlation_id(
                join_partition_for(message.join_id)
                if isinstance(message, JoinMessage | JoinChunkMessage | JoinCancelMessage)
                else message.payload_id
            )
            if isinstance(message, JoinMessage) and _hands_off(record):
                flow.hand_off(record.body, message_id)
                return
            flow.handle(message)
        except StartDeferredError as exc:
            # Step Functions' quota outlasted the invocation: the message comes back.
            logger.info("start deferred to a later delivery", extra={"reason": str(exc)})
            metrics.add_metric(name="StartsDeferred", unit=MetricUnit.Count, value=1)
            _answer_if_last(record, message, str(exc))
            raise
        except InvalidMessageError as exc:
            if not exc.retryable:
                flow.invalid.record(exc, body=record.body, message_id=record.message_id)
                return
            logger.error("message cannot be read yet", extra={"reason": exc.reason})
            metrics.add_metric(name="UnreadableMessages", unit=MetricUnit.Count, value=1)
            _answer_if_last(record, message, exc.reason, task_token=exc.task_token)
            raise
        except UnknownWorkflowError as exc:
            logger.error("unknown workflow", extra={"reason": str(exc)})
            _answer_if_last(record, message, str(exc))
            raise
        except StartUnsettledError as exc:
            # Expected after a crash around an Express start: retried, not a fault.
            logger.info("express start unsettled: retried later", extra={"reason": str(exc)})
            _answer_if_last(record, message, str(exc))
            raise
        except Exception as exc:
            # Retried by SQS (then the DLQ); say why, or the DLQ alone tells nothing.
            logger.exception("message failed: it will be retried")
            _answer_if_last(record, message, f"processing failed: {type(exc).__name__}: {exc}")
            raise


def _check_time_left(context: LambdaContext | None) -> None:
    """Refuse to start a record the invocation may not have the time to finish.

    Raises:
        RecordDeferredError: Less than :data:`RECORD_START_SECONDS` is left.
    """
    if context is None:
        return
    left = context.get_remaining_time_in_millis() / 1000
    if left < RECORD_START_SECONDS:
        logger.info("record not started: too little time left", extra={"seconds_left": left})
        metrics.add_metric(name="RecordsDeferred", unit=MetricUnit.Count, value=1)
        raise RecordDeferredError(left, RECORD_START_SECONDS)


def _origin_id(record: SQSRecord) -> str:
    """The id SQS gave the message first (a join message handed off keeps it)."""
    # Powertools' mapping answers a missing name with None on indexing (``get`` is dict's).
    origin = record.message_attributes[ORIGIN_MESSAGE_ID]
    value = origin.string_value if origin is not None else None
    return value or record.message_id


def _hands_off(record: SQSRecord) -> bool:
    """Whether a join message goes to the join queue: there is one, and it came from elsewhere."""
    join_queue = app.current().settings.join_queue_url
    if join_queue is None:
        return False
    # A queue's URL ends with its name, as its ARN does.
    return record.event_source_arn.rsplit(":", 1)[-1] != join_queue.rsplit("/", 1)[-1]


def _last_receive(record: SQSRecord) -> int | None:
    """The receive count when this is the message's last receive before the DLQ, else None.

    Lambda's SQS records carry ``attributes.ApproximateReceiveCount``; the queue's
    ``maxReceiveCount`` is the setting ``process_max_receive_count`` (unset: never).
    """
    limit = app.current().settings.process_max_receive_count
    raw = record.attributes.approximate_receive_count
    if limit is None or raw is None or not raw.isdigit():
        return None
    count = int(raw)
    return count if count >= limit else None


def _answer_if_last(
    record: SQSRecord,
    message: Message | None,
    reason: str,
    *,
    task_token: str | None = None,
) -> None:
    """On the last receive, answer the parent with ``reason``; the caller raises anyway."""
    count = _last_receive(record)
    if count is None:
        return
    try:
        process_flow().last_receive.answer(
            body=record.body,
            message_id=record.message_id,
            message=message,
            reason=reason,
            receive_count=count,
            task_token=task_token,
        )
    except Exception:  # noqa: BLE001  (the message's own error is the one to raise)
        # It still reaches the DLQ, where the operator finds it; the parent times out.
        logger.exception("could not answer the parent on the last receive")


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    """SQS event → ``{"batchItemFailures": [...]}`` (``ReportBatchItemFailures``)."""
    return process_partial_response(
        event=event, record_handler=record_handler, processor=processor, context=context
    )
