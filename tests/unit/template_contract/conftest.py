"""Fixtures shared by the contract test modules."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.template_contract.cfn import Stack


@pytest.fixture
def stack(template: dict[str, Any]) -> Stack:
    """The template deployed with its default parameters."""
    return Stack(template)
