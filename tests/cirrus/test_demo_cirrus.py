"""``dependency-tracker demo --cirrus``: every outcome, with cirrus-geo's own Lambdas."""

from __future__ import annotations

from typer.testing import CliRunner

from dependency_tracker_cli.__main__ import app


def test_demo_beside_cirrus_shows_every_outcome_and_exits_zero() -> None:
    result = CliRunner().invoke(
        app, ["demo", "--cirrus", "--parents", "1", "--join-members", "5", "--no-live"]
    )
    assert result.exit_code == 0, result.output
    assert "beside cirrus-geo" in result.output
    assert "every parent ended as expected" in result.output
    for parent in ("share-1", "replay", "rerun", "replace", "fails", "invalid", "timed-out"):
        assert parent in result.output
    for outcome in ("DependencyFailed", "DependencyInvalid", "DependencyTimedOut"):
        assert outcome in result.output
    assert "QuorumUnreachable" in result.output
