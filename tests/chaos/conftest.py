"""The stack the scale runs of ``make chaos`` share (one per module, strict layer on)."""

from __future__ import annotations

import io
import os
from typing import TYPE_CHECKING

import pytest

from dependency_tracker_local import LocalStack

if TYPE_CHECKING:
    from collections.abc import Iterator

# Long runs: only under `make chaos`.
chaos_only = pytest.mark.skipif(
    not os.environ.get("DEPTRACK_CHAOS"), reason="make chaos (DEPTRACK_CHAOS=1)"
)


@pytest.fixture(scope="module")
def stack() -> Iterator[LocalStack]:
    """An embedded stack of its own for a scale module."""
    with LocalStack(prefix="deptrack", sink=io.StringIO()) as running:
        assert running.strict
        yield running
