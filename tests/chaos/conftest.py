"""Capture the handlers' log lines exactly as Lambda would ship them (JSON, extra keys included)."""

from __future__ import annotations

import io
import logging
from typing import TYPE_CHECKING

import pytest

from dependency_tracker.observability import logger

if TYPE_CHECKING:
    from collections.abc import Iterator


@pytest.fixture
def log_lines() -> Iterator[io.StringIO]:
    """Every record of the tracker's logger, formatted by its own powertools formatter."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logger.registered_formatter)
    target = logging.getLogger(logger.name)
    previous = target.level
    target.addHandler(handler)
    target.setLevel(logging.DEBUG)
    try:
        yield stream
    finally:
        target.removeHandler(handler)
        target.setLevel(previous)
