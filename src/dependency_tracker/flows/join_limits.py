"""How large a join's row can grow, checked before the join is accepted.

The join row holds ``members``, and as members end it gains each one in the
``succeeded`` or ``failed`` set and, for a failure, an entry in ``failures``.
DynamoDB refuses an ``UpdateItem`` that makes an item larger than 400 KB: a
member recorded past that point would fail its stream record for good and the
join would never be decided, leaving its parent to its callback timeout. Until
joins get a constant-size row, a join whose worst case exceeds the limit is
refused at once with ``InvalidJoin``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from dependency_tracker.errors import InvalidMessageError
from dependency_tracker.limits import DDB_MAX_ITEM_BYTES, KIB, item_size
from dependency_tracker.models import DependencyError, MemberFailure, PayloadState

if TYPE_CHECKING:
    from dependency_tracker.models import JoinItem

# Error names kept per failed member (the callback flow clips them to this); real
# ones are far shorter ("States.TaskFailed", "cirrus.lib.errors.InvalidInput").
MAX_MEMBER_ERROR_CHARS = 64
# Room for what the worst case does not model exactly: a ``cycle`` path, key
# attributes derived for long ids, attributes added by later versions.
JOIN_ROW_HEADROOM_BYTES = 16 * KIB
# The largest a join row may be when every member has ended.
MAX_JOIN_ROW_BYTES = DDB_MAX_ITEM_BYTES - JOIN_ROW_HEADROOM_BYTES

_LATEST = datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC)


def worst_case_row(row: JoinItem) -> JoinItem:
    """``row`` as large as it can become: decided, notified, every member failed.

    A failure costs more than a success (the set entry plus a ``failures`` map
    entry with the longest state and error), so "all failed" is the worst case.
    """
    longest = max(row.members, key=len)
    return row.model_copy(
        update={
            "workflow_state": PayloadState.SUCCEEDED,  # the longest state name
            "error": max((str(error) for error in DependencyError), key=len),
            "succeeded": [],  # a member ends once: in one set or the other
            "failed": list(row.members),
            "failures": {
                member: MemberFailure(
                    state=PayloadState.ABORTED, error="e" * MAX_MEMBER_ERROR_CHARS
                )
                for member in row.members
            },
            "winner": longest,
            "resolved_at": _LATEST,
            "notified_at": _LATEST,
            "updated_at": _LATEST,
            "notify_outcome": "PARENT_GONE:TaskDoesNotExist",
            "expiration_time": 99_999_999_999,
            "execution_arn": None,
        }
    )


def worst_case_bytes(row: JoinItem) -> int:
    """DynamoDB's size of :func:`worst_case_row`, as it would be serialized."""
    return item_size(worst_case_row(row).to_item())


def check_join_row(row: JoinItem, *, limit: int = MAX_JOIN_ROW_BYTES) -> None:
    """Refuse a join whose row could outgrow DynamoDB's item limit.

    Raises:
        InvalidMessageError: ``InvalidJoin``; the reason names the limit, the
            member count and how many members of this id length would fit.
    """
    size = worst_case_bytes(row)
    if size <= limit:
        return
    members = len(row.members)
    # Each member costs about the same: scale down to what fits, for the message.
    fits = max(0, members * limit // size)
    raise InvalidMessageError(
        f"join of {members} members refused: once every member has ended its row could "
        f"reach {size} bytes, over the {limit} bytes kept under DynamoDB's {DDB_MAX_ITEM_BYTES}-"
        f"byte item limit; about {fits} members of these id lengths fit: split the join",
        task_token=row.task_token,
        error_name=DependencyError.INVALID_JOIN,
    )
