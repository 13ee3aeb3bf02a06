"""``update-state`` Lambda: EventBridge execution status change → :class:`UpdateStateFlow`."""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.data_classes import EventBridgeEvent, event_source
from pydantic import ValidationError

from dependency_tracker.flows.update_state import UpdateStateFlow
from dependency_tracker.models import StatusChange
from dependency_tracker.observability import logger, metrics
from dependency_tracker.settings import get_settings

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext


@cache
def update_state_flow() -> UpdateStateFlow:
    """The flow of this Lambda environment, built on first use."""
    return UpdateStateFlow.from_settings(get_settings())


@logger.inject_lambda_context(clear_state=True, correlation_id_path=correlation_paths.EVENT_BRIDGE)
@metrics.log_metrics
@event_source(data_class=EventBridgeEvent)
def lambda_handler(event: EventBridgeEvent, context: LambdaContext) -> dict[str, str]:
    """Handle one status change; raising lets Lambda's async retries, then the DLQ, take it."""
    logger.append_keys(event_id=event.get_id)
    try:
        change = StatusChange.model_validate(event.detail)
    except ValidationError:
        logger.exception("not a Step Functions execution status change")
        metrics.add_metric(name="InvalidStatusEvents", unit=MetricUnit.Count, value=1)
        raise
    action = update_state_flow().handle(change)
    return {"action": action.value}
