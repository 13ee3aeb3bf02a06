"""``dependency-tracker demo`` end to end: the command a newcomer types."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from dependency_tracker_cli.__main__ import app

pytestmark = pytest.mark.e2e


def test_demo_runs_every_case_and_exits_zero() -> None:
    result = CliRunner().invoke(
        app, ["demo", "--parents", "2", "--join-members", "20", "--no-live"]
    )
    assert result.exit_code == 0, result.output
    assert "every parent ended as expected" in result.output
    for parent in ("share-1", "late", "replay", "fails", "invalid", "impatient", "random-2"):
        assert parent in result.output
    assert "DependencyTimedOut" in result.output
