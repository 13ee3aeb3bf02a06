"""LocalStack start/stop, in a module of its own (no other stack is running)."""

from __future__ import annotations

import os
import threading

import pytest
from pydantic import ValidationError

from dependency_tracker import app
from dependency_tracker_local import LocalStack
from dependency_tracker_local.context import StackStoppedError

pytestmark = pytest.mark.e2e


def test_the_handlers_settings_reach_them_through_the_app_not_the_environment() -> None:
    before = dict(os.environ)
    with LocalStack(prefix="other") as inner:
        # the stack's app holds the handlers' settings; no DEPTRACK_* variable is written
        assert inner.app is not None
        assert app.current() is inner.app
        assert inner.app.settings.state_table == inner.outputs["StateTableName"] == "other-state"
        written = {k for k, v in os.environ.items() if before.get(k) != v}
        assert not {k for k in written if k.startswith("DEPTRACK_")}, written
    # AND stopping restores the environment and forgets the app
    assert dict(os.environ) == before
    assert app.current_or_none() is None


def test_configure_changes_a_setting_and_refuses_what_is_not_one() -> None:
    with LocalStack(prefix="configured") as stack:
        assert stack.app is not None
        before = stack.app
        # GIVEN a running stack WHEN a setting is changed THEN the handlers get a new app on it
        changed = stack.configure(claim_lease_seconds=3600)
        assert app.current() is changed is stack.app
        assert changed.settings.claim_lease_seconds == 3600
        assert changed.clients is before.clients
        # AND a value that is no valid setting, or a name that is no setting, changes nothing
        with pytest.raises(ValidationError):
            stack.configure(claim_lease_seconds="soon")
        with pytest.raises(TypeError, match="not settings: claim_lease"):
            stack.configure(claim_lease=1)
        assert app.current() is changed


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
