"""What a join's parent receives: who succeeded, who failed, who is pending, within bounds."""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from dependency_tracker.core.enums import PayloadState
from dependency_tracker.core.limits import KIB, utf8_size
from dependency_tracker.core.text import fit_json
from dependency_tracker.joins.rows import JoinCounts
from dependency_tracker.table.keys import partition_key

if TYPE_CHECKING:
    from dependency_tracker.joins.rows import JoinItem

# A join's output is at most 32 KiB inline. The same summary is the cause of a
# QuorumUnreachable failure, whose limit is 32,768 characters (a string of at
# most 32,768 UTF-8 bytes has at most that many characters), so one bound serves
# both; and it leaves the parent's 256 KiB of state for its own input and for
# several joins side by side. About 500 members with typical cirrus ids fit.
MAX_JOIN_OUTPUT_BYTES = 32 * KIB


class FailedMember(BaseModel):
    """A member of a join that did not succeed."""

    payload_id: str
    state: PayloadState
    error: str | None = None


class MemberOutcome(BaseModel):
    """One member of a join as its membership row records it (``state`` None: pending)."""

    payload_id: str
    state: PayloadState | None = None
    error: str | None = None
    ended_at: datetime | None = None  # when its row turned terminal (the page's timeline)


class JoinSummary(BaseModel):
    """Output (or failure cause) of a join: who succeeded, failed, is pending."""

    join_id: str
    quorum: int
    total: int
    counts: JoinCounts
    succeeded: list[str]
    failed: list[FailedMember]
    pending: list[str]
    winner: str | None = None
    duplicates: list[str] = []
    cycle: list[str] | None = None  # only when the join was refused with DependencyCycle
    # Members of n in no list: the join was decided before their chunk was registered,
    # so it never started them (only for a join decided early; n is known).
    unregistered: int = 0
    # A join with a deadline: when it falls, and "deadline" once the deadline decided it.
    deadline: datetime | None = None
    decided_by: str | None = None
    # The join's results manifest (joins/results.py): every member's outcome, one line
    # each; None without a payload bucket.
    results_url: str | None = None

    @classmethod
    def of(
        cls,
        join: JoinItem,
        counts: JoinCounts,
        members: list[MemberOutcome],
        duplicates: list[str] | None = None,
        *,
        total: int | None = None,
    ) -> JoinSummary:
        """The summary of a join: its counts and each member's outcome, in manifest order.

        ``quorum`` and ``total`` are the join's k and n; while members are still
        being registered (a decision taken early) n is ``total`` if given, else
        the members registered. :meth:`from_members` derives the counts instead.
        """
        if total is None:
            total = join.known_total if join.known_total is not None else join.registered
        return cls(
            join_id=join.join_id,
            quorum=join.quorum if join.quorum is not None else total,
            total=total,
            counts=counts,
            succeeded=[m.payload_id for m in members if m.state is PayloadState.SUCCEEDED],
            failed=[
                FailedMember(payload_id=m.payload_id, state=m.state, error=m.error)
                for m in members
                if m.state is not None and m.state is not PayloadState.SUCCEEDED
            ],
            pending=[m.payload_id for m in members if m.state is None],
            winner=_winner(join, members) if join.quorum == 1 else None,
            duplicates=duplicates or [],
            cycle=join.cycle,
            deadline=join.deadline_at,
            decided_by=join.decided_by,
        )

    @classmethod
    def from_members(
        cls, join: JoinItem, members: list[MemberOutcome], duplicates: list[str] | None = None
    ) -> JoinSummary:
        """The summary of one read of a join's members: each count is its list's length.

        ``members`` are every member named so far, once each. Until n is known,
        ``total`` counts them; once known it is n, and the members a join decided
        early never registered are ``unregistered``: the counts and it add up to
        ``total``.
        """
        ended = [m for m in members if m.state is not None]
        succeeded = sum(m.state is PayloadState.SUCCEEDED for m in ended)
        counts = JoinCounts(
            succeeded=succeeded, failed=len(ended) - succeeded, pending=len(members) - len(ended)
        )
        total = join.known_total if join.known_total is not None else len(members)
        summary = cls.of(join, counts, members, duplicates, total=total)
        return summary.model_copy(update={"unregistered": max(0, total - len(members))})

    def to_json(self) -> str:
        """The full summary, compact JSON; ``winner`` only for either-or joins."""
        exclude = {"winner"} if self.quorum != 1 else set()
        if not self.duplicates:
            exclude.add("duplicates")
        if not self.unregistered:
            exclude.add("unregistered")
        # Fields that only some joins have are left out when unset.
        optional = ("cycle", "deadline", "decided_by", "results_url")
        exclude.update(name for name in optional if getattr(self, name) is None)
        return self.model_dump_json(exclude=exclude)

    def reference(self, summary_url: str | None, limit: int = MAX_JOIN_OUTPUT_BYTES) -> str:
        """The output (or cause) sent in place of a summary over ``limit`` bytes.

        The lists (``succeeded``, ``failed``, ``pending``, ``duplicates``) are
        left out, never cut: a parent sees either every id or none, and
        ``truncated: true``. ``counts``, ``unregistered``, ``winner`` (either-or)
        and ``cycle`` stay; ``summary_url`` names the full summary when it could
        be stored, ``results_url`` the results manifest when one was written.
        """
        fields: dict[str, Any] = {
            "join_id": self.join_id,
            "quorum": self.quorum,
            "total": self.total,
            "counts": self.counts.model_dump(),
        }
        if self.unregistered:
            fields["unregistered"] = self.unregistered
        if self.quorum == 1:
            fields["winner"] = self.winner
        if self.cycle is not None:
            fields["cycle"] = self.cycle
        fields["truncated"] = True
        if summary_url is not None:
            fields["summary_url"] = summary_url
        if self.results_url is not None:
            fields["results_url"] = self.results_url
        if utf8_size(json.dumps(fields, separators=(",", ":"))) > limit and "cycle" in fields:
            # Only ids of pathological length get here; the row and the object keep it.
            del fields["cycle"]
        return fit_json(fields, ["winner"], limit, utf8_size)


def _winner(join: JoinItem, members: list[MemberOutcome]) -> str | None:
    """The join's winner as the lists name it.

    The join row keeps the winner in its key form (the row stays small), while
    the lists carry whole ids: a winner longer than a key is named by its whole
    id, as in ``succeeded``.
    """
    if join.winner is None:
        return None
    for member in members:
        if member.state is PayloadState.SUCCEEDED and join.winner in (
            member.payload_id,
            partition_key(member.payload_id),
        ):
            return member.payload_id
    return join.winner
