"""The summary a decided join sends its parent: counts always, member lists while they fit."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from dependency_tracker.core.text import clip
from dependency_tracker.joins.outputs import JoinSummary
from dependency_tracker.table.keys import whole_ids

if TYPE_CHECKING:
    from dependency_tracker.joins.rows import JoinItem
    from dependency_tracker.joins.store import JoinStore

# Error names kept per failed member in a summary; real ones are far shorter
# ("States.TaskFailed", "cirrus.lib.errors.InvalidInput"), and an Express status
# report may carry any text.
MAX_MEMBER_ERROR_CHARS = 64


def read_summary(joins: JoinStore, join: JoinItem) -> JoinSummary:
    """The join's full summary: counts and lists from one read of its membership rows.

    Reads every chunk row and membership row once (one ``BatchGetItem`` per 100
    members); the callback flow then sends it inline or stores it.
    """
    # Not the count shards: read apart from the rows, a member ending in between
    # lands in one and not the other. The rows are also the fresher record (a row
    # turns terminal before it is counted), so every outcome the decision counted
    # is in the summary, and it never contradicts the decision.
    members, duplicates = joins.members(join.join_id)
    members = [
        member.model_copy(update={"error": clip(member.error, MAX_MEMBER_ERROR_CHARS)})
        if member.error
        else member
        for member in members
    ]
    if join.cycle is not None:
        # A cycle too long for the join row keeps some ids in their key form: the
        # join's own waiter and members name theirs (the rest are not recorded here).
        known = [join.waiter_payload_id, *(member.payload_id for member in members)]
        join = join.model_copy(update={"cycle": whole_ids(join.cycle, known)})
    return JoinSummary.from_members(join, members, duplicates)


def invalid_join_cause(join: JoinItem) -> str:
    """The cause of an ``InvalidJoin`` decided after registration began (a bad manifest chunk)."""
    return json.dumps(
        {"join_id": join.join_id, "reason": join.cause, "registered": join.registered},
        separators=(",", ":"),
    )
