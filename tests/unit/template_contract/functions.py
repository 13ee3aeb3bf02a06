"""The template's functions as the contract tests read them: handlers, variables, events."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from dependency_tracker.core import settings
from dependency_tracker.handlers import callback, cirrus_events, process, sweeper, update_state

if TYPE_CHECKING:
    from collections.abc import Callable

    from tests.unit.template_contract.cfn import Stack

FUNCTIONS = ("ProcessFunction", "UpdateStateFunction", "CallbackFunction", "SweeperFunction")
CIRRUS_EVENTS_FUNCTION = "CirrusEventsFunction"  # cirrus mode only (CirrusPrefix set)
HANDLERS: dict[str, Callable[..., Any]] = {
    "ProcessFunction": process.lambda_handler,
    "UpdateStateFunction": update_state.lambda_handler,
    "CallbackFunction": callback.lambda_handler,
    "SweeperFunction": sweeper.lambda_handler,
    "CirrusEventsFunction": cirrus_events.lambda_handler,  # cirrus mode only
}
POWERTOOLS_VARIABLES = {
    "POWERTOOLS_SERVICE_NAME",
    "POWERTOOLS_LOG_LEVEL",
    "POWERTOOLS_METRICS_NAMESPACE",
}


def setting_variables(function: str | None = None) -> set[str]:
    """Every environment variable ``settings.py`` reads (its ``ENV_*`` names) for ``function``.

    The ``DEPTRACK_SWEEPER_*`` variables are read by the sweeper alone, and
    ``settings.PROCESS_VARIABLES`` by the process function alone.
    """
    names = {value for name, value in vars(settings).items() if name.startswith("ENV_")}
    if function is None:
        return names
    if function != "ProcessFunction":
        names -= set(settings.PROCESS_VARIABLES)
    if function == "SweeperFunction":
        return names
    return names - {variable for variable, _, _ in settings.SWEEPER_VARIABLES}


def environment(stack: Stack, function: str) -> dict[str, str]:
    """``function``'s environment variables as the template sets them, resolved."""
    variables = stack.resolved_properties(function).get("Environment", {}).get("Variables", {})
    return {str(name): str(value) for name, value in variables.items()}


def event_properties(
    stack: Stack, function: str, kind: str, name: str | None = None
) -> dict[str, Any]:
    """The properties of ``function``'s one ``kind`` event (or of the one named ``name``)."""
    events = stack.resolved_properties(function)["Events"].items()
    found = [e["Properties"] for n, e in events if e["Type"] == kind and name in (None, n)]
    assert len(found) == 1, f"{function} needs exactly one {kind} event {name or ''}"
    properties: dict[str, Any] = found[0]
    return properties


def unresolved_event(
    stack: Stack, function: str, kind: str, name: str | None = None
) -> dict[str, Any]:
    """Like ``event_properties``, but as written (intrinsic functions unresolved)."""
    events = stack.properties(function)["Events"].items()
    (found,) = (e["Properties"] for n, e in events if e["Type"] == kind and name in (None, n))
    properties: dict[str, Any] = found
    return properties


def stream_filter(stack: Stack) -> dict[str, Any]:
    """The callback mapping's FilterCriteria pattern, parsed."""
    filters = event_properties(stack, "CallbackFunction", "DynamoDB")["FilterCriteria"]["Filters"]
    assert len(filters) == 1, "one filter: Lambda ORs several, which would widen it"
    pattern: dict[str, Any] = json.loads(filters[0]["Pattern"])
    return pattern
