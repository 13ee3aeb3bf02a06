"""``sweeper`` Lambda: a schedule → :class:`SweeperFlow`, one bounded sweep per invocation."""

from __future__ import annotations

import time
from functools import cache
from typing import TYPE_CHECKING, Any

from dependency_tracker.flows.sweeper import SweeperFlow
from dependency_tracker.observability import logger, metrics
from dependency_tracker.settings import Settings

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext

# Kept back from the function's timeout: the last row's send (botocore's own retries
# included), saving the cursor and publishing the metrics.
DEADLINE_RESERVE_SECONDS = 15.0


@cache
def sweeper_flow() -> SweeperFlow:
    """The flow of this Lambda environment, built on first use."""
    return SweeperFlow.from_settings(Settings.sweeper_from_env())


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Scheduled event (its content is not read) → the run's :class:`SweepReport`."""
    remaining = context.get_remaining_time_in_millis() / 1000
    deadline = time.monotonic() + max(0.0, remaining - DEADLINE_RESERVE_SECONDS)
    return sweeper_flow().run(deadline=deadline).model_dump(mode="json")
