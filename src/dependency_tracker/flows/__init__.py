"""The business rules: process, update-state and callback, free of event shapes."""

from dependency_tracker.flows.callback import CallbackFlow
from dependency_tracker.flows.process import ProcessFlow
from dependency_tracker.flows.update_state import UpdateStateFlow

__all__ = ["CallbackFlow", "ProcessFlow", "UpdateStateFlow"]
