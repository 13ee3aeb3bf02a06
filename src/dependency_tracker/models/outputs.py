"""What a parent receives: callback outputs and failure causes."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel

from dependency_tracker.models.enums import DependencyError, PayloadState

if TYPE_CHECKING:
    from dependency_tracker.models.items import JoinItem


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


class FailedMember(BaseModel):
    """A member of a join that did not succeed."""

    payload_id: str
    state: PayloadState
    error: str | None = None


class JoinSummary(BaseModel):
    """Output (or failure cause) of a join: who succeeded, failed, is pending."""

    join_id: str
    quorum: int
    total: int
    succeeded: list[str]
    failed: list[FailedMember]
    pending: list[str]
    winner: str | None = None
    duplicates: list[str] = []
    cycle: list[str] | None = None  # only when the join was refused with DependencyCycle

    @classmethod
    def of(cls, join: JoinItem) -> JoinSummary:
        """The summary of a join row, members in their message order."""
        succeeded = set(join.succeeded)
        failed = set(join.failed)
        return cls(
            join_id=join.join_id,
            quorum=join.quorum,
            total=join.total,
            succeeded=[m for m in join.members if m in succeeded],
            failed=[
                FailedMember(
                    payload_id=m,
                    state=join.failures[m].state if m in join.failures else PayloadState.FAILED,
                    error=join.failures[m].error if m in join.failures else None,
                )
                for m in join.members
                if m in failed
            ],
            pending=join.pending(),
            winner=join.winner if join.quorum == 1 else None,
            duplicates=join.duplicates,
            cycle=join.cycle,
        )

    def to_json(self) -> str:
        """Compact JSON; ``winner`` only for either-or joins."""
        exclude = {"winner"} if self.quorum != 1 else set()
        if not self.duplicates:
            exclude.add("duplicates")
        if self.cycle is None:
            exclude.add("cycle")
        return self.model_dump_json(exclude=exclude)
