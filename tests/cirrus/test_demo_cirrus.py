"""``dependency-tracker demo --cirrus``: every outcome, with cirrus-geo's own Lambdas."""

from __future__ import annotations

import importlib
import io
import logging
import tempfile
from typing import TYPE_CHECKING

from typer.testing import CliRunner

from dependency_tracker_cli.__main__ import app

if TYPE_CHECKING:
    from pathlib import Path

    import pytest


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


def test_cirrus_s_log_lines_go_to_the_demo_s_log_file_not_to_the_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN cirrus's loggers writing to a stand-in for the terminal (cirrus binds its handler
    # to the stderr of its first import), at INFO so every payload cirrus runs logs a line,
    # and the demo's log file under tmp_path
    logging_config = importlib.import_module("cirrus.lib.logging")
    terminal = io.StringIO()
    handlers = {
        handler
        for name in logging_config.config["loggers"]
        for handler in logging.getLogger(name).handlers
    }
    for handler in handlers:
        monkeypatch.setattr(handler, "stream", terminal)
    for name in logging_config.config["loggers"]:
        monkeypatch.setattr(logging.getLogger(name), "level", logging.INFO)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    # WHEN the demo runs beside cirrus
    result = CliRunner().invoke(
        app, ["demo", "--cirrus", "--parents", "0", "--join-members", "0", "--no-live"]
    )
    # THEN cirrus's lines are in the log file, none on the terminal or in the output
    assert result.exit_code == 0, result.output
    logged = (tmp_path / "dependency-tracker-demo.log").read_text(encoding="utf-8")
    assert '"name": "cirrus.lib' in logged or '"name": "function' in logged
    assert terminal.getvalue() == ""
    assert '"levelname"' not in result.output
