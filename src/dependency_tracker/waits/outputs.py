"""What a parent receives: callback outputs and failure causes, each within AWS's limits.

Step Functions refuses a ``SendTaskSuccess`` output over 262,144 bytes and a
``SendTaskFailure`` cause over 32,768 characters; the parent's whole state is
limited to 256 KiB too. The tracker keeps every output far below that: past a
bound, the full document goes to the payload bucket (``callback-outputs/``) and
the output carries its ``s3://`` url plus the fields a parent branches on.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel

from dependency_tracker.core.enums import DependencyError, PayloadState
from dependency_tracker.core.limits import KIB, SFN_MAX_CAUSE_CHARS, utf8_size
from dependency_tracker.core.text import fit_json

# A single wait's output is at most 8 KiB inline: a stored result is inline up to
# 4 KiB (payloads/results.py) and a long cirrus id (~40 items) takes ~2.5 KiB. A
# parent that waits on several single waits side by side holds one output each.
MAX_WAIT_OUTPUT_BYTES = 8 * KIB


class CallbackSuccess(BaseModel):
    """Output sent with ``SendTaskSuccess`` for a single wait."""

    payload_id: str
    state: Literal[PayloadState.SUCCEEDED] = PayloadState.SUCCEEDED
    execution_arn: str | None
    replayed: bool
    result: dict[str, Any] | None = None

    def to_json(self) -> str:
        """The full output, compact JSON."""
        return self.model_dump_json()

    def reference(self, output_url: str | None, limit: int = MAX_WAIT_OUTPUT_BYTES) -> str:
        """The output sent in place of one over ``limit`` bytes.

        It keeps ``payload_id``, ``state``, ``execution_arn`` and ``replayed``,
        leaves ``result`` out, and says ``truncated: true``; ``output_url`` names
        the full output in the payload bucket when it could be stored.
        """
        fields: dict[str, Any] = {
            "payload_id": self.payload_id,
            "state": self.state.value,
            "execution_arn": self.execution_arn,
            "replayed": self.replayed,
            "truncated": True,
        }
        if output_url is not None:
            fields["output_url"] = output_url
        return fit_json(fields, ["payload_id", "execution_arn"], limit, utf8_size)


class CallbackFailure(BaseModel):
    """``SendTaskFailure`` error name and the JSON cause a parent can read."""

    error: DependencyError
    payload_id: str
    state: PayloadState
    execution_arn: str | None
    payload_error: str | None = None
    payload_cause: str | None = None

    def cause_json(self, limit: int = SFN_MAX_CAUSE_CHARS) -> str:
        """The cause: payload id, final state and its last error, as JSON.

        At most ``limit`` characters and always valid JSON: the child's cause is
        clipped first, then the payload id (both marked ``...[truncated]``).
        """
        fields = {
            "payload_id": self.payload_id,
            "state": self.state.value,
            "execution_arn": self.execution_arn,
            "error": self.payload_error,
            "cause": self.payload_cause,
        }
        return fit_json(fields, ["cause", "payload_id", "error", "execution_arn"], limit, len)
