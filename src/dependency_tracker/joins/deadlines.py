"""Join deadlines: a join decided at a set time with the members that succeeded by then.

A join may carry ``deadline``, an RFC 3339 time with an offset or whole seconds
after the tracker registers the join, and ``min_succeeded`` (1 unless given).
Before the deadline the join is decided as any join is: it succeeds once k (or
every member) succeeded; it fails early only once even ``min_succeeded`` is out
of reach. At the deadline an undecided join succeeds if at least
``min_succeeded`` members succeeded, else fails ``JoinDeadlineExceeded``; the
summary lists the members still pending. The decision is the same conditional
write as every other, so it is taken once.

How a due deadline is found: the join row carries the keys of a sparse index
(``deadline_shard``, one of :data:`DEADLINE_SHARDS`, and ``deadline_epoch``) while
undecided; any decision removes ``deadline_shard``, so a join decided earlier
leaves the index (its deadline is cancelled). The sweeper function runs every
minute on its own schedule and queries each shard for deadlines up to now: on
AWS a join is decided within about a minute of its deadline (the schedule's
period, plus one run), on the embedded stack within a few seconds. The index
lives in the table, so deadlines survive any restart, and a run reads only the
joins that are due.
"""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.metrics import MetricUnit

from dependency_tracker.core.enums import PayloadState, utcnow
from dependency_tracker.core.observability import logger, metrics
from dependency_tracker.joins.decision import MAX_DECIDE_READS
from dependency_tracker.table.dynamodb import pages, values
from dependency_tracker.table.prefixes import JOIN_PARTITION_PREFIX
from dependency_tracker.table.schema import DEADLINE_INDEX_KEYS, DEADLINES_INDEX

if TYPE_CHECKING:
    from collections.abc import Iterator

    from mypy_boto3_dynamodb import DynamoDBClient

    from dependency_tracker.joins.store import JoinStore

# RFC 3339's date-time (section 5.6), ASCII digits only; the offset is checked apart.
_RFC3339 = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?"
    r"([Zz]|[+-][0-9]{2}:[0-9]{2})?"
)
# A deadline is at most this far after registration (the stack's longest MaxWaitSeconds).
MAX_DEADLINE_SECONDS = 31_536_000
# Shard keys of the deadlines index. One holds every undecided join with a deadline: an
# index partition takes 1,000 writes a second, and each such join writes its entry twice
# (made, removed by its decision). More shards would spread a busier stack, each one more
# Query a minute.
DEADLINE_SHARDS = 1
# What a join row's ``decided_by`` says when its deadline decided it.
DECIDED_BY_DEADLINE = "deadline"


def deadline_problem(
    deadline: object, min_succeeded: object, *, quorum: int | None, now: datetime
) -> str | None:
    """Why a join's ``deadline`` / ``min_succeeded`` are refused, naming the field; None if fine.

    ``min_succeeded`` over the distinct members is checked with the quorum's own bound
    (joins/messages.py), and over n once a manifest's n is known (``JoinItem.decision``).
    """
    if deadline is None:
        return None if min_succeeded is None else "join.min_succeeded needs a join.deadline"
    return _deadline_problem(deadline, now) or _least_problem(min_succeeded, quorum)


def _deadline_problem(deadline: object, now: datetime) -> str | None:
    """Why ``deadline`` is not a time ahead (within a year) or whole seconds (1 to a year)."""
    if isinstance(deadline, int) and not isinstance(deadline, bool):
        if 1 <= deadline <= MAX_DEADLINE_SECONDS:
            return None
        return f"join.deadline must be between 1 and {MAX_DEADLINE_SECONDS} seconds, got {deadline}"
    return _time_problem(deadline, now)


def _time_problem(deadline: object, now: datetime) -> str | None:
    """Why ``deadline`` is not an RFC 3339 time with an offset, ahead, within a year."""
    at = _time(deadline)
    if at is None:
        return f"join.deadline must be an RFC 3339 time or whole seconds, got {deadline!r}"
    if at.tzinfo is None:
        return f"join.deadline {deadline!r} has no offset: add Z or +HH:MM"
    if at <= now:
        return f"join.deadline {deadline} is in the past (now {now.isoformat()})"
    if at - now > timedelta(seconds=MAX_DEADLINE_SECONDS):
        return f"join.deadline {deadline} is more than {MAX_DEADLINE_SECONDS} s away"
    return None


def _time(deadline: object) -> datetime | None:
    """``deadline`` read as an RFC 3339 time; None when it is not one.

    Only RFC 3339's form: Python reads more of ISO 8601 (week dates, ``20261201T0600Z``),
    which a parent in another language would not send and a reader would not expect.
    A time without an offset matches too, so that the refusal can say what is missing.
    """
    if not isinstance(deadline, str) or _RFC3339.fullmatch(deadline) is None:
        return None
    text = deadline.upper().replace(" ", "T").removesuffix("Z")
    try:
        at = datetime.fromisoformat(text)
    except ValueError:  # a day or an hour out of range
        return None
    return at.replace(tzinfo=UTC) if deadline.upper().endswith("Z") else at


def _least_problem(min_succeeded: object, quorum: int | None) -> str | None:
    """Why ``min_succeeded`` is not a count the join could reach by its quorum."""
    if min_succeeded is None:
        return None
    if not isinstance(min_succeeded, int) or isinstance(min_succeeded, bool) or min_succeeded < 0:
        return f"join.min_succeeded must be a whole number of at least 0, got {min_succeeded!r}"
    if quorum is not None and min_succeeded > quorum:
        return f"join.min_succeeded {min_succeeded} is more than the quorum {quorum}"
    return None


def deadline_at(deadline: str | int, registered_at: datetime) -> datetime:
    """When a checked ``deadline`` falls for a join registered at ``registered_at`` (UTC)."""
    if isinstance(deadline, str):
        at = _time(deadline)
        if at is None or at.tzinfo is None:
            msg = f"not a checked deadline: {deadline!r}"
            raise ValueError(msg)
        return at.astimezone(UTC)
    return registered_at + timedelta(seconds=deadline)


def deadline_fields(
    join_id: str, deadline: str | int | None, min_succeeded: int | None, now: datetime
) -> dict[str, Any]:
    """A new join row's deadline fields (none without a deadline): checked values only."""
    if deadline is None:
        return {}
    at = deadline_at(deadline, now)
    return {"deadline_at": at, "min_succeeded": min_succeeded, **index_keys(join_id, at)}


def index_keys(join_id: str, at: datetime) -> dict[str, Any]:
    """The deadlines index's keys for a join row: its shard and the deadline in epoch seconds."""
    digest = int(hashlib.sha256(join_id.encode("utf-8")).hexdigest()[:8], 16)
    return {
        "deadline_shard": f"deadline#{digest % DEADLINE_SHARDS}",
        "deadline_epoch": int(at.timestamp()),
    }


class JoinDeadlines:
    """Finds undecided joins whose deadline passed and decides them, once each."""

    def __init__(self, *, joins: JoinStore, client: DynamoDBClient, table_name: str) -> None:
        self.joins = joins
        self._client = client
        self.table_name = table_name

    def due(self, now: datetime) -> Iterator[str]:
        """Ids of the joins in the index whose deadline is at or before ``now``."""
        shard_key, epoch_key = DEADLINE_INDEX_KEYS
        for shard in range(DEADLINE_SHARDS):
            query: dict[str, Any] = {
                "TableName": self.table_name,
                "IndexName": DEADLINES_INDEX,
                "KeyConditionExpression": f"{shard_key} = :shard AND {epoch_key} <= :now",
                "ExpressionAttributeValues": values(
                    shard=f"deadline#{shard}", now=int(now.timestamp())
                ),
            }
            for items in pages(self._client.query, query):
                for item in items:
                    yield item["payload_id"]["S"].removeprefix(JOIN_PARTITION_PREFIX)

    def decide(self, join_id: str, now: datetime | None = None) -> bool:
        """Decide ``join_id`` at its deadline if it is due and undecided; True if this did.

        The index is read eventually consistently: the join row is read again, with
        its counts, and the decision is conditional on it (and on the take-backs read).
        """
        now = now or utcnow()
        for _ in range(MAX_DECIDE_READS):
            join, succeeded, _ = self.joins.read(join_id)
            if join is None or join.workflow_state is not PayloadState.PROCESSING:
                return False
            if join.deadline_at is None or join.deadline_at > now:
                return False
            state, error = join.at_deadline(succeeded)
            if self.joins.decide_join(
                join_id,
                state,
                error=error,
                reopened=join.reopened,
                decided_by=DECIDED_BY_DEADLINE,
            ):
                logger.info(
                    "join decided at its deadline",
                    extra={"join_id": join_id, "state": state.value, "succeeded": succeeded},
                )
                metrics.add_metric(name="JoinDeadlinesReached", unit=MetricUnit.Count, value=1)
                return True
        return False

    def run(self, now: datetime | None = None) -> dict[str, int]:
        """Decide every due join: what the sweeper's minute schedule runs; a report."""
        now = now or utcnow()
        due = decided = 0
        for join_id in self.due(now):
            due += 1
            decided += self.decide(join_id, now)
        return {"deadlines_due": due, "deadlines_decided": decided}
