"""Unit tests run with the tracker's settings pointing at per-test moto tables."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.template_contract.cfn import load_template
from tests.unit.template_contract.transformed import transformed_template


@pytest.fixture(autouse=True)
def _unit_env(aws_env: None) -> None:
    """Every unit test gets the settings environment."""


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    """``template.yaml`` as plain data (short-form tags expanded)."""
    return load_template()


@pytest.fixture(scope="module")
def transformed() -> dict[str, Any]:
    """The template after the SAM transform (template_contract.transformed)."""
    return transformed_template()
