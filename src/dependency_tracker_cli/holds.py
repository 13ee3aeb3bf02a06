"""What holds a wait: the pending and failed dependencies of a join, a parent, a payload.

``why`` reads here. A wait is a task-token row (one dependency) or a join (k of n
members); what holds it is each dependency that has not succeeded. Rows come from the
dependency table's own readers (``JoinStore.read``/``members``, ``DependencyTable.rows``
and ``scan_pages``), payload state from the read model (either mode's state table).
"""

from __future__ import annotations

import hashlib
import sys
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel

from dependency_tracker.core.enums import PayloadState
from dependency_tracker.joins.rows import JoinItem, row_from_item
from dependency_tracker.table.dynamodb import batch_get
from dependency_tracker.table.items import (
    MembershipItem,
    WaiterItem,
    key_attributes,
    membership_id_for,
)
from dependency_tracker.table.rows import is_bookkeeping_item
from dependency_tracker_cli.commands.join_members import FAILED_OUTCOMES
from dependency_tracker_cli.readmodel import (
    Expression,
    PageRequest,
    PayloadView,
    decode_token,
    encode_token,
    scan_page,
)

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from dependency_tracker.joins.outputs import MemberOutcome
    from dependency_tracker.joins.rows import Row
    from dependency_tracker.table.items import DependencyRow
    from dependency_tracker_cli.target import Target

# A dependency that has no state item: nothing ever ran it (its message sits in the DLQ,
# or a wait-only reference names a payload nobody started).
NOT_STARTED = "not started"
# The one key of a ``why --next-token``: the position of the last hold shown.
_TOKEN_KEY = ("after",)
# A whole-table Scan read to its end (a waiting payload's rows carry no key of their own).
_WHOLE_SCAN = PageRequest(limit=sys.maxsize, max_pages=sys.maxsize)


class Wait(BaseModel):
    """One wait: a task-token row on one payload, or a join of k of n members."""

    kind: Literal["token", "join"]
    join_id: str | None = None
    payload_id: str | None = None  # a token wait's dependency
    parent_execution: str | None = None
    waiter_payload_id: str | None = None
    since: datetime
    state: str  # the row's: PROCESSING until resolved (a join: until decided)
    answered: bool  # the parent was told (every token of a join)
    quorum: int | None = None
    total: int | None = None
    registered: int | None = None
    succeeded: int | None = None
    failed: int | None = None
    pending: int | None = None

    @property
    def decided(self) -> bool:
        """True once the row is resolved (a join: decided)."""
        return self.state != PayloadState.PROCESSING.value

    @property
    def position(self) -> str:
        """Where the wait sorts: by age, then a digest of what it is (ids of any length)."""
        name = f"join\0{self.join_id}" if self.kind == "join" else f"token\0{self.payload_id}"
        digest = hashlib.sha256(name.encode("utf-8")).hexdigest()[:16]
        return f"{self.since.isoformat()}|{digest}"


class Hold(BaseModel):
    """A dependency that holds a wait: pending, or failed."""

    payload_id: str
    state: str  # the payload's state, or NOT_STARTED
    row_state: str | None  # the waiting row's (None: a member whose row is not written yet)
    wait: str  # "token", or "join:<join_id>"
    join_id: str | None = None
    since: datetime | None  # the run's start (claim), else when the row was written
    attempt: int | None = None
    execution_arn: str | None = None
    error: str | None = None
    cause: str | None = None
    error_source: Literal["payload", "row"] | None = None


@dataclass(frozen=True)
class Candidate:
    """A hold before its payload state is read (only the page shown is read)."""

    position: str
    payload_id: str
    wait: Wait
    row_state: PayloadState | None
    row: WaiterItem | MembershipItem | None = None


class Why(BaseModel):
    """What ``why TARGET`` found: the waits, one page of what holds them."""

    target: str
    kind: Literal["join", "parent", "payload"]
    payload: PayloadView | None = None  # a payload target's own state
    waited_on_by: list[Wait] = []
    waits: list[Wait] = []
    holds: list[Hold] = []
    total_holds: int = 0
    next_token: str | None = None


def join_wait(row: JoinItem, succeeded: int, failed: int) -> Wait:
    """A join's wait with its counts (from its count shards)."""
    total = row.known_total
    return Wait(
        kind="join",
        join_id=row.join_id,
        parent_execution=row.parent_execution,
        waiter_payload_id=row.waiter_payload_id,
        since=row.created_at,
        state=row.workflow_state.value,
        answered=not row.unanswered(),
        quorum=row.quorum if row.quorum is not None else total,
        total=total,
        registered=row.registered,
        succeeded=succeeded,
        failed=failed,
        pending=row.counts(succeeded, failed).pending,
    )


def token_wait(row: WaiterItem) -> Wait:
    """A task-token row's wait on its payload."""
    return Wait(
        kind="token",
        payload_id=row.payload_id,
        parent_execution=row.parent_execution,
        waiter_payload_id=row.waiter_payload_id,
        since=row.created_at,
        state=row.workflow_state.value,
        answered=row.notified_at is not None,
    )


def read_join(target: Target, join_id: str) -> tuple[Wait, list[Candidate]] | None:
    """A join's wait and its members that have not succeeded, in manifest order (None: no join)."""
    row, succeeded, failed = target.joins.read(join_id)
    if row is None:
        return None
    wait = join_wait(row, succeeded, failed)
    members, _ = target.joins.members(join_id)
    return wait, member_candidates(wait, members)


def member_candidates(wait: Wait, members: Sequence[MemberOutcome]) -> list[Candidate]:
    """A join's members that have not succeeded, in manifest order (``members`` read once)."""
    return [
        Candidate(f"{wait.position}|{index:09d}", member.payload_id, wait, member.state)
        for index, member in enumerate(members)
        if member.state is None or member.state in FAILED_OUTCOMES
    ]


def parent_waits(target: Target, arn: str) -> list[tuple[Wait, list[Candidate]]]:
    """The waits of a parent execution (every row naming it, answered or not)."""
    pages = target.dependencies.scan_pages(parent_execution=arn)
    return _expand(target, [row for page in pages for row in page])


def waits_of_payload(target: Target, payload_id: str) -> list[tuple[Wait, list[Candidate]]]:
    """The waits of a waiting payload: the rows whose ``waiter_payload_id`` it is.

    One Scan of the dependency table, filtered by DynamoDB (the rows are keyed by the
    payload waited on, not by the waiter).
    """
    expression = Expression("waiter_payload_id = :waiter", values={":waiter": {"S": payload_id}})
    found = scan_page(
        target.dependencies.client,
        target.dependencies.table_name,
        ("payload_id", "waiter_id"),
        expression,
        parse=_waiting_row,
        keep=lambda _: True,
        page=_WHOLE_SCAN,
    )
    return _expand(target, found.rows)


def waited_on_by(target: Target, payload_id: str) -> list[Wait]:
    """Who waits on a payload: its task-token rows and the joins it is a member of."""
    waits: list[Wait] = []
    for row in target.dependencies.rows(payload_id):
        if isinstance(row, WaiterItem):
            waits.append(token_wait(row))
        elif isinstance(row, MembershipItem):
            join, succeeded, failed = target.joins.read(row.join_id)
            if join is not None:
                waits.append(join_wait(join, succeeded, failed))
    return sorted(waits, key=lambda wait: wait.position)


def page_of(
    candidates: list[Candidate], *, limit: int, next_token: str | None
) -> tuple[list[Candidate], str | None]:
    """The holds after ``next_token``'s position, at most ``limit``, and the next token.

    The token names the last hold shown, not an offset: a dependency that succeeds
    between two pages drops out without shifting the others.

    Raises:
        InvalidNextTokenError: Not a token ``why`` printed.
    """
    ordered = sorted(candidates, key=lambda candidate: candidate.position)
    if next_token is not None:
        after = decode_token(next_token, _TOKEN_KEY)["after"]["S"]
        ordered = [candidate for candidate in ordered if candidate.position > after]
    shown = ordered[:limit]
    if len(ordered) <= limit:
        return shown, None
    return shown, encode_token({"after": {"S": shown[-1].position}})


def holds_of(target: Target, candidates: list[Candidate]) -> list[Hold]:
    """The holds of ``candidates``: one read of their states, and of their join rows."""
    views = target.payloads.get_many(candidate.payload_id for candidate in candidates)
    rows = _membership_rows(target, [c for c in candidates if c.wait.kind == "join"])
    holds: list[Hold] = []
    for candidate in candidates:
        row = candidate.row or rows.get((candidate.payload_id, candidate.wait.join_id))
        holds.append(_hold(candidate, views.get(candidate.payload_id), row))
    return holds


def _hold(
    candidate: Candidate, view: PayloadView | None, row: WaiterItem | MembershipItem | None
) -> Hold:
    error, cause, source = None, None, None
    if view is not None and (view.last_error or view.last_cause):
        error, cause, source = view.last_error, view.last_cause, "payload"
    elif row is not None and (row.error or row.cause):
        error, cause, source = row.error, row.cause, "row"
    started = None if view is None else (view.claimed_at or view.created_at)
    join_id = candidate.wait.join_id
    return Hold(
        payload_id=candidate.payload_id,
        state=NOT_STARTED if view is None else view.state.value,
        row_state=None if row is None else row.workflow_state.value,
        wait="token" if join_id is None else f"join:{join_id}",
        join_id=join_id,
        since=started or (None if row is None else row.created_at),
        attempt=None if view is None else view.attempt,
        execution_arn=None if view is None else view.last_execution,
        error=error,
        cause=cause,
        error_source=source,
    )


def _expand(target: Target, rows: Iterable[DependencyRow]) -> list[tuple[Wait, list[Candidate]]]:
    """Each waiting row's wait and its candidates: a join's members, a token row's payload."""
    waits: list[tuple[Wait, list[Candidate]]] = []
    for row in rows:
        if isinstance(row, JoinItem):
            read = read_join(target, row.join_id)
            if read is not None:
                waits.append(read)
        elif isinstance(row, WaiterItem):
            wait = token_wait(row)
            state = row.workflow_state
            holding = state is PayloadState.PROCESSING or state in FAILED_OUTCOMES
            candidate = Candidate(f"{wait.position}|{0:09d}", row.payload_id, wait, state, row)
            waits.append((wait, [candidate] if holding else []))
    return sorted(waits, key=lambda pair: pair[0].position)


def _waiting_row(item: dict[str, Any]) -> Row | None:
    # A wait edge carries its waiter's id too: only waiter and join rows are waits.
    if is_bookkeeping_item(item):
        return None
    row = row_from_item(item)
    return row if isinstance(row, WaiterItem | JoinItem) else None


def _membership_rows(
    target: Target, candidates: list[Candidate]
) -> dict[tuple[str, str | None], MembershipItem]:
    """The membership rows of join members (strongly consistent, 100 keys a request)."""
    if not candidates:
        return {}
    keys = [
        key_attributes(
            payload_id=candidate.payload_id,
            waiter_id=membership_id_for(candidate.wait.join_id or ""),
        )
        for candidate in candidates
    ]
    dependencies = target.dependencies
    rows = (
        MembershipItem.from_item(item)
        for item in batch_get(dependencies.client, dependencies.table_name, keys)
    )
    return {(row.payload_id, row.join_id): row for row in rows}
