"""JoinStore's transactions: conflicts retried, a condition is an answer, the rest raises."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from botocore.exceptions import ClientError

from dependency_tracker.core.enums import PayloadState, utcnow
from dependency_tracker.joins.row_access import MAX_CONFLICT_RETRIES
from dependency_tracker.joins.rows import MAX_JOIN_TOKENS, JoinItem
from dependency_tracker.joins.store import JoinStore
from dependency_tracker.table.items import (
    JOIN_ROW_KEY,
    MembershipItem,
    Resolution,
    join_partition_for,
)

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


def test_a_join_keeps_every_token_of_its_wait_each_once(aws: Aws) -> None:
    store = JoinStore(aws.dynamodb, aws.dependencies.table_name)
    decided_join(aws, store, "first")
    assert not store.add_token("adopt", "first")  # the first send's own token
    assert store.add_token("adopt", "second")
    assert not store.add_token("adopt", "second")  # a redelivery of the retried send
    join = store.get("adopt")
    assert join is not None
    assert join.task_token == "first"  # never handed from one token to another
    assert set(join.tokens().values()) == {"first", "second"}
    assert join.holds("first")
    assert join.holds("second")


def test_a_join_holds_at_most_max_join_tokens(aws: Aws) -> None:
    store = JoinStore(aws.dynamodb, aws.dependencies.table_name)
    decided_join(aws, store, "t0")
    added = [store.add_token("adopt", f"t{index}") for index in range(1, MAX_JOIN_TOKENS + 3)]
    assert added.count(True) == MAX_JOIN_TOKENS - 1
    join = store.get("adopt")
    assert join is not None
    assert len(join.tokens()) == MAX_JOIN_TOKENS


def test_a_row_is_told_only_once_every_token_it_holds_is_answered(aws: Aws) -> None:
    # GIVEN a decided join whose callback read it with one token, then a retried send added one
    store = JoinStore(aws.dynamodb, aws.dependencies.table_name)
    decided_join(aws, store, "first")
    read = store.get("adopt")
    assert read is not None
    assert store.mark_answered("adopt", "first", "SENT:SUCCEEDED")
    assert store.add_token("adopt", "second")
    # WHEN the callback marks the row told for the tokens it read
    # THEN the mark is refused: the new token is still to answer, and only it
    assert not store.finish_answering(read, outcome="SENT:SUCCEEDED", retention_days=1)
    current = store.get("adopt")
    assert current is not None
    assert list(current.unanswered().values()) == ["second"]
    assert store.mark_answered("adopt", "second", "SENT:SUCCEEDED")
    assert not store.mark_answered("adopt", "second", "PARENT_GONE:TaskTimedOut")
    assert store.finish_answering(current, outcome="SENT:SUCCEEDED", retention_days=1)
    told = store.get("adopt")
    assert told is not None
    assert told.notified_at is not None
    assert told.unanswered() == {}


def test_a_token_added_to_a_told_join_makes_it_untold_for_that_token_alone(aws: Aws) -> None:
    store = JoinStore(aws.dynamodb, aws.dependencies.table_name)
    decided_join(aws, store, "first")
    join = store.get("adopt")
    assert join is not None
    assert store.mark_answered("adopt", "first", "PARENT_GONE:TaskTimedOut")
    assert store.finish_answering(join, outcome="PARENT_GONE:TaskTimedOut", retention_days=1)
    assert store.add_token("adopt", "second")
    row = store.get("adopt")
    assert row is not None
    assert (row.notified_at, row.workflow_state) == (None, PayloadState.SUCCEEDED)
    assert list(row.unanswered().values()) == ["second"]


def test_a_release_may_replace_a_parent_gone_answer_but_not_a_sent_one(aws: Aws) -> None:
    store = JoinStore(aws.dynamodb, aws.dependencies.table_name)
    decided_join(aws, store, "first")
    assert store.add_token("adopt", "second")
    assert store.mark_answered("adopt", "first", "PARENT_GONE:TaskTimedOut")
    assert store.mark_answered("adopt", "first", "RELEASED:x", over_gone=True)
    assert store.mark_answered("adopt", "second", "SENT:SUCCEEDED")
    assert not store.mark_answered("adopt", "second", "RELEASED:x", over_gone=True)
    join = store.get("adopt")
    assert join is not None
    assert sorted(join.answered.values()) == ["RELEASED:x", "SENT:SUCCEEDED"]


def test_a_row_written_before_the_token_maps_gets_them(aws: Aws) -> None:
    # A join row from before this release: no retry_tokens, no answered attribute.
    store = JoinStore(aws.dynamodb, aws.dependencies.table_name)
    decided_join(aws, store, "first")
    key = {"payload_id": {"S": join_partition_for("adopt")}, "waiter_id": {"S": JOIN_ROW_KEY}}
    aws.dynamodb.update_item(
        TableName=aws.dependencies.table_name,
        Key=key,
        UpdateExpression="REMOVE retry_tokens, answered",
    )
    assert store.add_token("adopt", "second")
    assert store.mark_answered("adopt", "first", "SENT:SUCCEEDED")
    join = store.get("adopt")
    assert join is not None
    assert list(join.unanswered().values()) == ["second"]
