"""The join row's tokens: each send of the same wait adds its token, and each is answered once.

A ``Retry`` of a parent's ``sendMessage.waitForTaskToken`` task sends the same
join again with a new token, and SQS may deliver the sends in any order, and
redeliver either later. The join row keeps every token its own parent execution
sent (``task_token`` and ``retry_tokens``) and records how each was answered
(``answered``): whichever token the parent holds is answered, a closed one
refuses harmlessly, and no delivery hands the join from one token to another.
``notified_at`` means every token on the row was answered; adding a token
removes it, so the stream answers the new token of a join decided before.

The two maps are written entry by entry (``SET m.#key``), which needs the map
to exist: a row written before they did gets them with a second conditional
write (:func:`_set_entry`).
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from dependency_tracker.core.enums import PayloadState, utcnow
from dependency_tracker.core.tokens import PARENT_GONE_OUTCOME, token_hash
from dependency_tracker.joins.rows import MAX_JOIN_TOKENS
from dependency_tracker.table.dynamodb import update_if, values
from dependency_tracker.table.items import join_partition_for, key_attributes
from dependency_tracker.table.prefixes import JOIN_ROW_KEY

if TYPE_CHECKING:
    from dependency_tracker.joins.row_access import RowAccess
    from dependency_tracker.joins.rows import JoinItem
    from dependency_tracker.table.items import ReleaseMark


def add_token(access: RowAccess, join_id: str, token: str) -> bool:
    """Add ``token`` to the join's tokens; False if it holds it already or is full.

    The row turns un-notified and un-released: the new token waits, and a join
    decided before is answered again, to it alone (the others are answered).
    """
    key = token_hash(token)
    return _set_entry(
        access,
        join_id,
        "retry_tokens",
        key,
        token,
        condition=(
            "attribute_exists(join_id) AND task_token <> :token "
            "AND attribute_not_exists(retry_tokens.#key) AND size(retry_tokens) < :most"
        ),
        fresh_condition="attribute_exists(join_id) AND task_token <> :token",
        plain={"token": token, "most": MAX_JOIN_TOKENS - 1},
        remove="notified_at, released_at",
    )


def mark_answered(
    access: RowAccess, join_id: str, token: str, outcome: str, *, over_gone: bool = False
) -> bool:
    """Record how ``token`` was answered, once; False if it was recorded before.

    ``over_gone``: a release that closed the token may replace a ``PARENT_GONE``
    answer the tracker recorded after it (its send was refused because of it).
    """
    condition = "attribute_not_exists(answered.#key)"
    if over_gone:
        condition = f"({condition} OR begins_with(answered.#key, :gone))"
    return _set_entry(
        access,
        join_id,
        "answered",
        token_hash(token),
        outcome,
        condition=f"attribute_exists(join_id) AND {condition}",
        fresh_condition="attribute_exists(join_id)",
        plain={"gone": PARENT_GONE_OUTCOME} if over_gone else {},
    )


def finish_answering(
    access: RowAccess,
    join: JoinItem,
    *,
    outcome: str,
    retention_days: int,
    last: tuple[str, str] | None = None,
) -> bool:
    """Mark the row told once every token ``join`` holds is answered, and let it expire.

    ``last``: the last token answered and its answer, recorded in the same write
    (one write and one stream record for the usual join of one token). False when another token was
    added since ``join`` was read (answer it first), ``token``'s answer was recorded
    already, or the row was marked already.
    """
    now = utcnow()
    expires = int((now + timedelta(days=retention_days)).timestamp())
    sets = [
        "notified_at = :now",
        "notify_outcome = :outcome",
        "expiration_time = :expires",
        "updated_at = :now",
    ]
    condition = (
        f"attribute_exists(join_id) AND attribute_not_exists(notified_at) AND {_same_tokens(join)}"
    )
    extra: dict[str, Any] = {}
    plain: dict[str, object] = {}
    if last is not None:
        token, answer = last
        sets.append("answered.#key = :answer")
        condition += " AND attribute_exists(answered) AND attribute_not_exists(answered.#key)"
        extra["ExpressionAttributeNames"] = {"#key": token_hash(token)}
        plain["answer"] = answer
    return (
        update_if(
            access.client,
            TableName=access.table_name,
            Key=_key(join_id=join.join_id),
            UpdateExpression="SET " + ", ".join(sets),
            ConditionExpression=condition,
            ExpressionAttributeValues=values(
                now=now, outcome=outcome, expires=expires, tokens=len(join.retry_tokens), **plain
            ),
            **extra,
        )
        is not None
    )


def mark_released(access: RowAccess, join: JoinItem, release: ReleaseMark, *, outcome: str) -> bool:
    """Record a release of every token ``join`` holds: it no longer counts as a wait.

    Only while the join is undecided and holds no token added since ``join`` was
    read: a retried parent's new token keeps waiting, and counts.
    """
    sets = [
        "released_at = :now",
        "release_reason = :reason",
        "notify_outcome = :outcome",
        "updated_at = :now",
    ]
    plain: dict[str, object] = {
        "now": release.at,
        "outcome": outcome,
        "reason": release.reason,
        "processing": PayloadState.PROCESSING.value,
        "tokens": len(join.retry_tokens),
    }
    if release.released_by is not None:
        sets.append("released_by = :by")
        plain["by"] = release.released_by
    return (
        update_if(
            access.client,
            TableName=access.table_name,
            Key=_key(join_id=join.join_id),
            UpdateExpression="SET " + ", ".join(sets),
            ConditionExpression=f"workflow_state = :processing AND {_same_tokens(join)}",
            ExpressionAttributeValues=values(**plain),
        )
        is not None
    )


def _same_tokens(join: JoinItem) -> str:
    """A condition: the row holds as many retry tokens as ``join`` (``:tokens``) did."""
    if join.retry_tokens:
        return "size(retry_tokens) = :tokens"
    return "(attribute_not_exists(retry_tokens) OR size(retry_tokens) = :tokens)"


def _set_entry(
    access: RowAccess,
    join_id: str,
    attribute: str,
    entry: str,
    value: str,
    *,
    condition: str,
    fresh_condition: str,
    plain: dict[str, object],
    remove: str | None = None,
) -> bool:
    """``SET attribute.entry = value`` under ``condition``; the map itself if it is missing.

    ``condition`` may assume the map exists; ``fresh_condition`` is what else must
    hold when it does not (a row written before the map was).
    """
    now = utcnow()
    tail = f" REMOVE {remove}" if remove else ""
    used = {name: plain[name] for name in plain if f":{name}" in fresh_condition}
    entry_write = {
        "UpdateExpression": f"SET {attribute}.#key = :value, updated_at = :now{tail}",
        "ConditionExpression": f"attribute_exists({attribute}) AND {condition}",
        "ExpressionAttributeNames": {"#key": entry},
        "ExpressionAttributeValues": values(value=value, now=now, **plain),
    }
    map_write = {
        "UpdateExpression": f"SET {attribute} = :map, updated_at = :now{tail}",
        "ConditionExpression": f"attribute_not_exists({attribute}) AND {fresh_condition}",
        "ExpressionAttributeValues": values(map={entry: value}, now=now, **used),
    }
    return any(
        update_if(access.client, TableName=access.table_name, Key=_key(join_id=join_id), **write)
        is not None
        for write in (entry_write, map_write)
    )


def _key(*, join_id: str) -> dict[str, Any]:
    return key_attributes(payload_id=join_partition_for(join_id), waiter_id=JOIN_ROW_KEY)
