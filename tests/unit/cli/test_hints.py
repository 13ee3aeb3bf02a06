"""Hints name the program as it was started, so they run as printed after the README's steps."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dependency_tracker_cli import hints

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def installed(tmp_path: Path) -> Path:
    """An executable named like the CLI, in a venv-like folder below ``tmp_path``."""
    script = tmp_path / ".venv" / "bin" / hints.PROGRAM
    script.parent.mkdir(parents=True)
    script.write_text('#!/bin/sh\necho ran "$@"\n')
    script.chmod(0o755)
    return script


def test_a_program_not_on_path_is_named_by_the_path_that_ran_it(
    installed: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN the CLI started as .venv/bin/dependency-tracker, the venv not activated
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    # THEN a hint names it by that path, from where the user stands
    assert hints.program(str(installed), cwd=tmp_path) == ".venv/bin/dependency-tracker"
    # AND by its absolute path from elsewhere
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert hints.program(str(installed), cwd=elsewhere) == str(installed)


def test_a_program_found_on_path_is_named_plainly(
    installed: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN the venv activated (its bin first on PATH)
    monkeypatch.setenv("PATH", f"{installed.parent}{os.pathsep}/usr/bin:/bin")
    assert hints.program(str(installed), cwd=tmp_path) == hints.PROGRAM


def test_another_start_gets_the_plain_name(tmp_path: Path) -> None:
    # python -m dependency_tracker_cli, or a name the CLI does not have
    assert hints.program("-m", cwd=tmp_path) == hints.PROGRAM
    assert hints.program(str(tmp_path / "other"), cwd=tmp_path) == hints.PROGRAM


def test_each_word_is_quoted_for_the_shell(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", [hints.PROGRAM])
    line = hints.command("graph", "--root", "s2/it's $HOME")
    assert line == "dependency-tracker graph --root 's2/it'\"'\"'s $HOME'"


def test_a_printed_hint_runs_as_printed_in_a_shell_without_the_venv(tmp_path: Path) -> None:
    # GIVEN the CLI the README's steps install, started by its path from the checkout, with
    # the venv not on PATH
    cli = ROOT / ".venv" / "bin" / hints.PROGRAM
    if not cli.exists():
        pytest.skip("no .venv/bin/dependency-tracker in this checkout (make venv makes it)")
    environment = {**os.environ, "PATH": "/usr/bin:/bin"}
    printed = subprocess.run(
        [
            sys.executable,
            "-c",
            (
                "import sys; from dependency_tracker_cli import hints; "
                "sys.argv[0] = '.venv/bin/dependency-tracker'; "
                "print(hints.command('status', '--help'))"
            ),
        ],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert printed == ".venv/bin/dependency-tracker status --help"
    # WHEN the user pastes it into a shell there
    ran = subprocess.run(  # noqa: S603 - the line the test itself printed
        ["/bin/sh", "-c", printed],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        check=False,
    )
    # THEN it runs (a bare "dependency-tracker" would be "not found", exit 127)
    assert ran.returncode == 0, ran.stderr
    assert "Usage" in ran.stdout
