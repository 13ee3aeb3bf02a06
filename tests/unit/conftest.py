"""Unit tests run with the tracker's settings pointing at per-test moto tables."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _unit_env(aws_env: None) -> None:
    """Every unit test gets the settings environment."""
