"""The one rule for a FILE|- argument, the same in ``publish`` and ``wait``."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest
from typer.testing import CliRunner

from dependency_tracker_cli.__main__ import app

if TYPE_CHECKING:
    from pathlib import Path


@pytest.mark.parametrize("command", ["publish", "wait"])
def test_a_file_that_is_not_utf8_is_an_invalid_message_for_both_commands(
    tmp_path: Path, command: str
) -> None:
    # GIVEN a file that exists but holds Latin-1 bytes
    path = tmp_path / "latin1.json"
    path.write_bytes(b'{"id": "caf\xe9"}')
    # WHEN either command reads it
    result = CliRunner().invoke(app, [command, str(path)])
    # THEN its content is refused as a message (exit 3), in one line, before any AWS call
    assert result.exit_code == 3, result.output
    assert result.stderr == f"error: invalid message: {path}: not UTF-8 text\n"


@pytest.mark.parametrize("command", ["publish", "wait"])
def test_stdin_is_named_stdin_in_every_error(command: str) -> None:
    # GIVEN text on stdin that is not JSON
    result = CliRunner().invoke(app, [command, "-"], input="{not json")
    # THEN the error names stdin, as the published sources do
    assert result.exit_code == 3, result.output
    assert result.stderr.startswith("error: invalid message: stdin: not valid JSON")


@pytest.mark.parametrize("command", ["publish", "wait"])
def test_a_directory_is_a_usage_error_that_says_why(tmp_path: Path, command: str) -> None:
    # GIVEN a FILE argument that is a directory
    result = CliRunner().invoke(app, [command, str(tmp_path)])
    # THEN it is a usage error (exit 2) naming it, in one line
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"error: {tmp_path}: cannot read: ")
    assert result.stderr.count("\n") == 1


@pytest.mark.parametrize("command", ["publish", "wait"])
def test_an_empty_array_is_an_invalid_message(tmp_path: Path, command: str) -> None:
    path = tmp_path / "empty.json"
    path.write_text(json.dumps([]))
    result = CliRunner().invoke(app, [command, str(path)])
    assert result.exit_code == 3, result.output
    assert result.stderr == f"error: invalid message: {path}: empty JSON array\n"
