"""What a parent receives: callback outputs and failure causes."""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel

from dependency_tracker.models.enums import DependencyError, PayloadState


class CallbackSuccess(BaseModel):
    """Output sent with ``SendTaskSuccess`` for a single wait."""

    payload_id: str
    state: Literal[PayloadState.SUCCEEDED] = PayloadState.SUCCEEDED
    execution_arn: str | None
    replayed: bool
    result: dict[str, Any] | None = None


class CallbackFailure(BaseModel):
    """``SendTaskFailure`` error name and the JSON cause a parent can read."""

    error: DependencyError
    payload_id: str
    state: PayloadState
    execution_arn: str | None
    payload_error: str | None = None
    payload_cause: str | None = None

    def cause_json(self) -> str:
        """The cause: payload id, final state and its last error, as JSON."""
        return json.dumps(
            {
                "payload_id": self.payload_id,
                "state": self.state,
                "execution_arn": self.execution_arn,
                "error": self.payload_error,
                "cause": self.payload_cause,
            }
        )
