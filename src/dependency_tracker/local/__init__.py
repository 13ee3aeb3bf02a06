"""The embedded stack's public names where the contract promises them (docs/versioning.md).

Local mode lives in :mod:`dependency_tracker_local`, outside the Lambda package; this alias
resolves on first access, so the runtime never loads local code (nor moto) by importing it.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["EmbeddedStack", "LocalStack"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("dependency_tracker_local"), name)
    msg = f"module {__name__!r} has no attribute {name!r}"
    raise AttributeError(msg)
