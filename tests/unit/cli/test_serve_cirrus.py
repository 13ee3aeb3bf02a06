"""``serve --cirrus`` where cirrus-geo is not installed: exit 2, and where to run it instead."""

from __future__ import annotations

import importlib.metadata
from typing import TYPE_CHECKING

from typer.testing import CliRunner

from dependency_tracker_cli.__main__ import app

if TYPE_CHECKING:
    import pytest


def test_serve_cirrus_without_cirrus_geo_exits_2_with_a_hint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN a Python where cirrus-geo is not installed (the project's .venv, 3.11)
    def not_installed(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    # WHEN serve is asked for cirrus mode
    result = CliRunner().invoke(app, ["serve", "--cirrus", "--port", "0"])
    # THEN it starts nothing and says how to get cirrus-geo, in one error and one hint line
    assert result.exit_code == 2
    error, hint = result.stderr.splitlines()
    assert error.startswith("error: serve --cirrus runs cirrus-geo's own Lambdas")
    assert hint == (
        "hint: make venv-cirrus, then run .venv-cirrus/bin/dependency-tracker serve --cirrus "
        "(cirrus-geo 2.0.0 needs Python >= 3.12)"
    )
    assert result.stdout == ""
