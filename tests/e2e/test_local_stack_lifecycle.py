"""LocalStack start/stop, in a module of its own (no other stack is running)."""

from __future__ import annotations

import os
import threading

import pytest

from dependency_tracker.local import LocalStack
from dependency_tracker.local.runner import StackStoppedError

pytestmark = pytest.mark.e2e


def test_stop_restores_the_environment() -> None:
    before = os.environ.get("DEPTRACK_STATE_TABLE")
    with LocalStack(prefix="other") as inner:
        assert os.environ["DEPTRACK_STATE_TABLE"] == "other-state"
        assert inner.outputs["StateTableName"] == "other-state"
    assert os.environ.get("DEPTRACK_STATE_TABLE") == before


def test_stop_delivers_nothing_after_it_begins() -> None:
    """A pump in the middle of a round hands no more events to handlers once stop() runs."""
    stack = LocalStack(prefix="stopping")
    stack.start()
    invoker = stack._invoker
    assert invoker is not None
    calls: list[str] = []
    handler = invoker.wrap(lambda event, _context: calls.append(event["id"]))
    handler({"id": "before"}, None)
    stack.stop()
    # the pump threads are gone, and a late delivery is refused, not run without a stack
    assert not [t for t in threading.enumerate() if t.name.startswith("pump-") and t.is_alive()]
    with pytest.raises(StackStoppedError):
        handler({"id": "after"}, None)
    assert calls == ["before"]
