"""JoinStore's transactions: conflicts retried, a condition is an answer, the rest raises."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from botocore.exceptions import ClientError

from dependency_tracker.core.enums import PayloadState, utcnow
from dependency_tracker.joins.row_access import MAX_CONFLICT_RETRIES
from dependency_tracker.joins.store import JoinStore
from dependency_tracker.table.items import (
    JOIN_ROW_KEY,
    MembershipItem,
    Resolution,
    join_partition_for,
)
from dependency_tracker.table.join_items import JoinItem

if TYPE_CHECKING:
    from tests.conftest import Aws


def cancelled(code: str) -> ClientError:
    return ClientError(
        {
            "Error": {"Code": "TransactionCanceledException", "Message": f"[{code}, None]"},
            "CancellationReasons": [{"Code": code}, {"Code": "None"}],
        },
        "TransactWriteItems",
    )


class Flaky:
    """A client whose first ``failures`` transactions fail with ``error``."""

    def __init__(self, real: Any, error: ClientError, failures: int) -> None:
        self.real, self.error, self.failures, self.calls = real, error, failures, 0

    def transact_write_items(self, **kwargs: Any) -> Any:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return self.real.transact_write_items(**kwargs)


def member(aws: Aws) -> MembershipItem:
    now = utcnow()
    row = MembershipItem(
        payload_id="p", waiter_id="join#j", join_id="j", chunk=0, created_at=now, updated_at=now
    )
    aws.dependencies.register(row)
    aws.dependencies.resolve("p", "join#j", Resolution(state=PayloadState.SUCCEEDED))
    return row


def test_a_conflict_is_retried_and_counts_once(aws: Aws, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("dependency_tracker.joins.row_access.time.sleep", lambda _: None)
    flaky = Flaky(aws.dynamodb, cancelled("TransactionConflict"), failures=2)
    store = JoinStore(flaky, aws.dependencies.table_name)  # type: ignore[arg-type]
    row, done = member(aws), Resolution(state=PayloadState.SUCCEEDED)
    assert store.count(row, done, retention_days=7)
    assert not store.count(row, done, retention_days=7)  # the condition answers: counted
    assert flaky.calls == 4
    assert JoinStore(aws.dynamodb, aws.dependencies.table_name).read("j")[1:] == (1, 0)


def test_conflicts_past_the_retries_go_back_to_the_stream(
    aws: Aws, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("dependency_tracker.joins.row_access.time.sleep", lambda _: None)
    flaky = Flaky(aws.dynamodb, cancelled("TransactionConflict"), failures=99)
    store = JoinStore(flaky, aws.dependencies.table_name)  # type: ignore[arg-type]
    with pytest.raises(ClientError):
        store.count(member(aws), Resolution(state=PayloadState.SUCCEEDED), retention_days=7)
    assert flaky.calls == MAX_CONFLICT_RETRIES + 1


def test_throttling_is_not_retried_here(aws: Aws) -> None:
    throttled = ClientError(
        {"Error": {"Code": "ThrottlingException", "Message": "slow down"}}, "TransactWriteItems"
    )
    flaky = Flaky(aws.dynamodb, throttled, failures=1)
    store = JoinStore(flaky, aws.dependencies.table_name)  # type: ignore[arg-type]
    with pytest.raises(ClientError, match="slow down"):
        store.count(member(aws), Resolution(state=PayloadState.SUCCEEDED), retention_days=7)
    assert flaky.calls == 1


def decided_join(aws: Aws, store: JoinStore, token: str) -> None:
    now = utcnow()
    row = JoinItem(
        payload_id=join_partition_for("adopt"),
        waiter_id=JOIN_ROW_KEY,
        join_id="adopt",
        task_token=token,
        created_at=now,
        updated_at=now,
    )
    assert store.create(row)
    store.decide_join("adopt", PayloadState.SUCCEEDED)


def test_a_join_passes_to_a_new_token_only_from_the_token_that_holds_it(aws: Aws) -> None:
    store = JoinStore(aws.dynamodb, aws.dependencies.table_name)
    decided_join(aws, store, "first")
    assert not store.adopt("adopt", old_token="someone-else", new_token="second")
    assert store.adopt("adopt", old_token="first", new_token="second")
    join = store.get("adopt")
    assert join is not None
    assert join.task_token == "second"


def test_a_join_told_to_a_token_it_no_longer_holds_stays_untold(aws: Aws) -> None:
    # GIVEN a decided join whose callback read the first token, then the join was adopted
    store = JoinStore(aws.dynamodb, aws.dependencies.table_name)
    decided_join(aws, store, "first")
    key = (join_partition_for("adopt"), JOIN_ROW_KEY)
    assert store.adopt("adopt", old_token="first", new_token="second")
    # WHEN the callback marks the row told, for the token it told
    told = aws.dependencies.mark_notified(
        *key, outcome="PARENT_GONE", retention_days=1, task_token="first"
    )
    # THEN the row stays un-notified: the adoption's stream record tells the new token
    assert not told
    row = aws.dependencies.get_row(*key)
    assert row is not None
    assert row.notified_at is None
    assert aws.dependencies.mark_notified(
        *key, outcome="SENT", retention_days=1, task_token="second"
    )


def test_adopting_a_join_told_already_makes_it_untold_for_the_new_token(aws: Aws) -> None:
    store = JoinStore(aws.dynamodb, aws.dependencies.table_name)
    decided_join(aws, store, "first")
    key = (join_partition_for("adopt"), JOIN_ROW_KEY)
    assert aws.dependencies.mark_notified(*key, outcome="PARENT_GONE", retention_days=1)
    assert store.adopt("adopt", old_token="first", new_token="second")
    row = aws.dependencies.get_row(*key)
    assert row is not None
    assert (row.notified_at, row.workflow_state) == (None, PayloadState.SUCCEEDED)
