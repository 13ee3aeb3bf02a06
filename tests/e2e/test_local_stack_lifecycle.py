"""LocalStack start/stop, in a module of its own (no other stack is running)."""

from __future__ import annotations

import os

import pytest

from dependency_tracker.local import LocalStack

pytestmark = pytest.mark.e2e


def test_stop_restores_the_environment() -> None:
    before = os.environ.get("DEPTRACK_STATE_TABLE")
    with LocalStack(prefix="other") as inner:
        assert os.environ["DEPTRACK_STATE_TABLE"] == "other-state"
        assert inner.outputs["StateTableName"] == "other-state"
    assert os.environ.get("DEPTRACK_STATE_TABLE") == before
