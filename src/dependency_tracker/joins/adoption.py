"""A join sent again by its own parent: the new token joins the wait.

A Step Functions ``Retry`` of a ``sendMessage.waitForTaskToken`` task whose
first send was delivered (the error came after it) sends the same join with a
new token, and SQS may deliver the two sends in either order, or redeliver the
first late. The join row keeps every token of the same wait (joins/token_rows.py)
and each is answered once: no probe of a token's task, no dependence on order.

"The same wait" is: the same ``parent_execution`` (a join sent without one is
never shared), the same quorum, and the same member list: an inline list's
content (its digest), or a manifest's url and the ETag read. Anything else with
the join's id is another wait, refused with ``InvalidJoin``.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.metrics import MetricUnit

from dependency_tracker.core.enums import DependencyError
from dependency_tracker.core.errors import InvalidMessageError
from dependency_tracker.core.observability import logger, metrics
from dependency_tracker.joins.rows import MAX_JOIN_TOKENS

if TYPE_CHECKING:
    from dependency_tracker.joins.rows import JoinItem
    from dependency_tracker.joins.store import JoinStore


def members_digest(entries: list[Any]) -> str:
    """The digest that names an inline member list (whitespace and key order aside)."""
    text = json.dumps(entries, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def same_wait(existing: JoinItem, row: JoinItem) -> bool:
    """Whether ``row`` (a new send) is the wait ``existing`` already is, by its parent."""
    if existing.parent_execution is None or existing.parent_execution != row.parent_execution:
        return False
    if existing.quorum != row.quorum:
        return False
    if existing.members_digest is not None or row.members_digest is not None:
        return existing.members_digest == row.members_digest
    return (existing.source, existing.source_etag) == (row.source, row.source_etag)


class JoinAdoption:
    """Adds a retried send's token to its join, or refuses another wait's send."""

    def __init__(self, joins: JoinStore) -> None:
        self.joins = joins

    def adopt(self, existing: JoinItem, row: JoinItem) -> JoinItem:
        """The join with ``row``'s token added when it is the same wait.

        Raises:
            InvalidMessageError: ``InvalidJoin`` (to the new token): another wait
                uses the join id, or the join holds :data:`MAX_JOIN_TOKENS` already.
        """
        token = row.task_token
        if not same_wait(existing, row):
            raise InvalidMessageError(
                f"join_id {existing.join_id!r} is already used by another task token (a"
                " join_id belongs to the first parent that sends it; the same execution may"
                " send the same join again, with the same quorum and members: give each"
                " other wait its own join_id)",
                task_token=token,
                error_name=DependencyError.INVALID_JOIN,
            )
        if not self.joins.add_token(existing.join_id, token):
            current = self.joins.get(existing.join_id)
            if current is not None and current.holds(token):
                return current  # a redelivery of this send raced its first delivery
            raise InvalidMessageError(
                f"join {existing.join_id!r} was sent {MAX_JOIN_TOKENS} times by its parent"
                " execution: no further send joins it (a Retry with fewer attempts, or a"
                " join_id per attempt)",
                task_token=token,
                error_name=DependencyError.INVALID_JOIN,
            )
        logger.info("join sent again by its parent: its token joins the wait")
        metrics.add_metric(name="JoinTokensAdded", unit=MetricUnit.Count, value=1)
        joined = self.joins.get(existing.join_id)
        return joined if joined is not None else existing
