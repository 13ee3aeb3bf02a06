"""Dependency table: idempotent registration, conditional resolution, notification."""

from __future__ import annotations

from datetime import UTC, datetime

from dependency_tracker.core.enums import PayloadState
from dependency_tracker.table.dependency_table import DependencyTable
from dependency_tracker.table.items import Resolution, WaiterItem, waiter_id_for
from tests.conftest import DEPENDENCY_TABLE, Aws, moto_query_page

NOW = datetime.now(UTC)


def waiter(payload_id: str, token: str) -> WaiterItem:
    return WaiterItem(
        payload_id=payload_id,
        waiter_id=waiter_id_for(token),
        task_token=token,
        created_at=NOW,
        updated_at=NOW,
        parent_execution="arn:parent",
    )


def test_register_is_idempotent(aws: Aws) -> None:
    row = waiter("p", "t1")
    assert aws.dependencies.register(row) is True
    assert aws.dependencies.register(row) is False
    stored = aws.dependencies.get("p", row.waiter_id)
    assert stored is not None
    assert stored.task_token == "t1"
    assert stored.workflow_state is PayloadState.PROCESSING


def test_resolve_is_conditional_on_processing(aws: Aws) -> None:
    row = waiter("p", "t1")
    aws.dependencies.register(row)
    first = Resolution(state=PayloadState.FAILED, execution_arn="arn:e", error="E", cause="c")
    assert aws.dependencies.resolve("p", row.waiter_id, first) is True
    # the second resolver loses and changes nothing
    second = Resolution(state=PayloadState.SUCCEEDED, execution_arn="arn:e2")
    assert aws.dependencies.resolve("p", row.waiter_id, second) is False
    stored = aws.dependencies.get("p", row.waiter_id)
    assert stored is not None
    assert stored.resolution == first


def test_resolve_missing_row_is_false(aws: Aws) -> None:
    assert (
        aws.dependencies.resolve("p", "token#none", Resolution(state=PayloadState.SUCCEEDED))
        is False
    )


def test_resolve_all_pages_through_pending_waiters(aws: Aws) -> None:
    # GIVEN 7 waiters, 2 already resolved, and Query pages of about one row
    store = DependencyTable(aws.dynamodb, DEPENDENCY_TABLE, resolve_concurrency=3)
    rows = [waiter("p", f"t{index}") for index in range(7)]
    for row in rows:
        store.register(row)
    store.register(waiter("other", "t0"))
    for row in rows[:2]:
        store.resolve("p", row.waiter_id, Resolution(state=PayloadState.FAILED))
    with moto_query_page(300):
        pages = list(store.pending_ids("p"))
        assert len(pages) >= 5
        assert sum(len(page) for page in pages) == 5
        # WHEN all are resolved, page by page
        resolved = store.resolve_all(
            "p", Resolution(state=PayloadState.SUCCEEDED, execution_arn="e")
        )
    # THEN the five pending ones moved, the resolved ones kept theirs, other payloads untouched
    assert resolved == 5
    states = [row.workflow_state for row in store.waiters("p")]
    assert states.count(PayloadState.SUCCEEDED) == 5
    assert states.count(PayloadState.FAILED) == 2
    other = store.get("other", waiter_id_for("t0"))
    assert other is not None
    assert other.workflow_state is PayloadState.PROCESSING
    assert list(store.pending_ids("p")) == [[]]


def test_mark_notified_sets_ttl_once(aws: Aws) -> None:
    before = datetime.now(UTC)
    row = waiter("p", "t1")
    aws.dependencies.register(row)
    assert aws.dependencies.mark_notified("p", row.waiter_id, outcome="SENT", retention_days=2)
    assert not aws.dependencies.mark_notified("p", row.waiter_id, outcome="X", retention_days=2)
    stored = aws.dependencies.get("p", row.waiter_id)
    assert stored is not None
    assert stored.notify_outcome == "SENT"
    assert stored.notified_at is not None
    assert stored.expiration_time is not None
    expected = before.timestamp() + 2 * 86400
    assert abs(stored.expiration_time - expected) < 120


def test_mark_notified_missing_row_is_false(aws: Aws) -> None:
    assert not aws.dependencies.mark_notified("p", "token#x", outcome="SENT", retention_days=1)
