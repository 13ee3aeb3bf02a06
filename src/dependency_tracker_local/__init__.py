"""Local mode: the deployed handlers against moto, fed by event pumps.

Requires the ``local`` extra (moto).
"""

from dependency_tracker_local.stack import EmbeddedStack, LocalStack

__all__ = ["EmbeddedStack", "LocalStack"]
