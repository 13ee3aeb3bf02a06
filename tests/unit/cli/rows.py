"""Dependency-table rows for CLI tests, built with the models the tracker writes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from dependency_tracker.core.enums import PayloadState, utcnow
from dependency_tracker.joins.rows import ChunkItem, JoinItem
from dependency_tracker.joins.store import JoinStore
from dependency_tracker.table.items import (
    MembershipItem,
    Resolution,
    WaiterItem,
    membership_id_for,
    waiter_id_for,
)

if TYPE_CHECKING:
    from tests.conftest import Aws

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
TOKEN_PREFIX = "AQCEAAAAKgAAAA-very-secret-task-token-"


def token(name: str) -> str:
    """A recognisable fake task token (tests check it never leaks)."""
    return f"{TOKEN_PREFIX}{name}" * 3


def waiter(
    payload_id: str,
    name: str,
    *,
    parent: str | None = None,
    execution: str | None = None,
    age: timedelta = timedelta(minutes=5),
    state: PayloadState = PayloadState.PROCESSING,
    notified: bool = False,
) -> WaiterItem:
    """``name`` waits on ``payload_id`` since ``age`` ago."""
    return WaiterItem(
        payload_id=payload_id,
        waiter_id=waiter_id_for(token(name)),
        task_token=token(name),
        workflow_state=state,
        created_at=NOW - age,
        updated_at=NOW - age,
        waiter_payload_id=parent,
        parent_execution=execution,
        notified_at=NOW if notified else None,
        notify_outcome=f"SENT:{state}" if notified else None,
    )


def join(
    join_id: str,
    members: list[str],
    *,
    quorum: int | None = None,
    parent: str | None = None,
    execution: str | None = None,
    age: timedelta = timedelta(hours=2),
    succeeded: tuple[str, ...] = (),
) -> tuple[JoinItem, list[MembershipItem]]:
    """A join row and its membership rows."""
    created = NOW - age
    row = JoinItem(
        payload_id=f"join#{join_id}",
        waiter_id="join",
        join_id=join_id,
        task_token=token(join_id),
        quorum=quorum or len(members),
        total=len(members),
        members=members,
        succeeded=list(succeeded),
        created_at=created,
        updated_at=created,
        waiter_payload_id=parent,
        parent_execution=execution,
    )
    memberships = [
        MembershipItem(
            payload_id=member,
            waiter_id=membership_id_for(join_id),
            join_id=join_id,
            workflow_state=PayloadState.SUCCEEDED
            if member in succeeded
            else PayloadState.PROCESSING,
            created_at=created,
            updated_at=created,
        )
        for member in members
    ]
    return row, memberships


def register_join(
    aws: Aws,
    join_id: str,
    members: list[str],
    *,
    quorum: int | None,
    outcomes: dict[str, PayloadState],
    execution: str | None = None,
    parent: str | None = None,
) -> None:
    """A join registered in one chunk, each member of ``outcomes`` resolved and counted."""
    now = utcnow()
    store = JoinStore(aws.dynamodb, aws.dependencies.table_name)
    row = JoinItem(
        payload_id=f"join#{join_id}",
        waiter_id="join",
        join_id=join_id,
        task_token=token(join_id),
        quorum=quorum,
        total=len(members),
        registered=len(members),
        created_at=now,
        updated_at=now,
        parent_execution=execution,
        waiter_payload_id=parent,
    )
    assert store.create(row)
    aws.chunk_rows.start_chunk(ChunkItem.of(join_id, 0, members, [], now))
    rows = {
        member: MembershipItem(
            payload_id=member,
            waiter_id=membership_id_for(join_id),
            join_id=join_id,
            chunk=0,
            created_at=now,
            updated_at=now,
        )
        for member in members
    }
    aws.chunk_rows.register_members(list(rows.values()))
    for member, state in outcomes.items():
        failed = not state.is_success
        resolution = Resolution(
            state=state,
            error="TaskFailed" if failed else None,
            cause="row cause" if failed else None,
        )
        assert aws.dependencies.resolve(member, membership_id_for(join_id), resolution)
        assert store.count(rows[member], resolution, retention_days=7)
