"""``sweeper`` Lambda: a schedule → :class:`SweeperFlow`, one bounded sweep per invocation.

Its second schedule, every minute, sends ``{"deadlines": true}``: that run only decides
the joins whose deadline passed (joins/deadlines.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dependency_tracker import app
from dependency_tracker.core.observability import logger, metrics
from dependency_tracker.handlers.deadline import deadline_of

# The key of the minute schedule's input (template.yaml, SweeperFunction's Deadlines event).
DEADLINES_EVENT_KEY = "deadlines"

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext

    from dependency_tracker.sweeper.flow import SweeperFlow


def sweeper_flow() -> SweeperFlow:
    """The flow of this Lambda environment (:func:`dependency_tracker.app.current`)."""
    return app.current().sweeper


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Scheduled event → the run's :class:`SweepReport`, or the deadlines decided."""
    if isinstance(event, dict) and event.get(DEADLINES_EVENT_KEY) is True:
        return app.current().deadlines.run()
    return sweeper_flow().run(deadline=deadline_of(context)).model_dump(mode="json")
