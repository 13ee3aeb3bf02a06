"""Join deadlines: refused at once when invalid, decided once when due, cancelled by a decision."""

from __future__ import annotations

import json
from datetime import timedelta, timezone
from typing import TYPE_CHECKING, Any

import pytest

from dependency_tracker.core.enums import DependencyError, PayloadState, utcnow
from dependency_tracker.core.errors import InvalidMessageError
from dependency_tracker.intake.parse import read_message
from dependency_tracker.joins.deadlines import (
    DECIDED_BY_DEADLINE,
    MAX_DEADLINE_SECONDS,
    JoinDeadlines,
    deadline_fields,
)
from dependency_tracker.joins.rows import JoinItem
from dependency_tracker.joins.store import JoinStore
from tests.conftest import payload
from tests.unit.flows.test_join_registration import Harness
from tests.unit.flows.test_join_registration import join_body as registered_body
from tests.unit.flows.test_join_reruns import Join

if TYPE_CHECKING:
    from tests.conftest import Aws

OK, BAD = PayloadState.SUCCEEDED, PayloadState.FAILED


def join_body(**fields: Any) -> str:
    members = [payload(f"d{index}") for index in range(3)]
    return json.dumps({"join": {"task_token": "tok", **fields}, "payloads": members})


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"deadline": "2001-01-01T00:00:00Z"}, "join.deadline 2001-01-01T00:00:00Z is in the past"),
        ({"deadline": "2999-01-01T00:00:00"}, "has no offset"),
        ({"deadline": "tomorrow"}, "join.deadline must be an RFC 3339 time or whole seconds"),
        ({"deadline": "20261201T060000Z"}, "join.deadline must be an RFC 3339 time"),
        ({"deadline": "2026-W49-1T06:00:00Z"}, "join.deadline must be an RFC 3339 time"),
        # Full-width digits, which Python's int() would read
        ({"deadline": "\uff12\uff10\uff12\uff16-12-01T06:00:00Z"}, "an RFC 3339 time"),
        ({"deadline": "2026-12-01T24:00:00Z"}, "join.deadline must be an RFC 3339 time"),
        ({"deadline": True}, "join.deadline must be an RFC 3339 time or whole seconds"),
        ({"deadline": 1.5}, "join.deadline must be an RFC 3339 time or whole seconds"),
        ({"deadline": [60]}, "join.deadline must be an RFC 3339 time or whole seconds"),
        ({"deadline": 0}, "join.deadline must be between 1 and"),
        ({"deadline": MAX_DEADLINE_SECONDS + 1}, "join.deadline must be between 1 and"),
        ({"deadline": "2999-01-01T00:00:00Z"}, "s away"),
        ({"min_succeeded": 1}, "join.min_succeeded needs a join.deadline"),
        ({"deadline": 60, "min_succeeded": -1}, "join.min_succeeded must be a whole number"),
        ({"deadline": 60, "min_succeeded": "2"}, "join.min_succeeded must be a whole number"),
        ({"deadline": 60, "min_succeeded": True}, "join.min_succeeded must be a whole number"),
        ({"deadline": 60, "min_succeeded": 3, "quorum": 2}, "is more than the quorum 2"),
        ({"deadline": 60, "min_succeeded": 4}, "join.min_succeeded 4 is more than the 3"),
    ],
)
def test_an_invalid_deadline_is_refused_at_once_naming_the_field(
    fields: dict[str, Any], reason: str
) -> None:
    # WHEN a join carries a deadline or min_succeeded it cannot use
    with pytest.raises(InvalidMessageError) as refused:
        read_message(join_body(**fields))
    # THEN it is refused before anything is written, InvalidJoin to its parent, naming the field
    assert reason in refused.value.reason
    assert refused.value.error_name is DependencyError.INVALID_JOIN
    assert refused.value.task_token == "tok"


def test_a_deadline_in_seconds_or_with_an_offset_is_read() -> None:
    # GIVEN joins with a deadline in seconds and one at a time with an offset
    seconds = read_message(join_body(deadline=600, min_succeeded=2))
    ahead = (utcnow() + timedelta(days=2)).astimezone(timezone(timedelta(hours=2))).isoformat()
    timed = read_message(join_body(deadline=ahead))
    # THEN both are accepted as sent
    assert seconds.join.deadline == 600  # type: ignore[union-attr]
    assert timed.join.deadline == ahead  # type: ignore[union-attr]
    # AND the row's deadline is the time in UTC, or registration plus the seconds
    now = utcnow()
    fields = deadline_fields("j", "2026-12-01T06:00:00+01:00", None, now)
    assert fields["deadline_at"].isoformat() == "2026-12-01T05:00:00+00:00"
    assert deadline_fields("j", 90, 3, now)["deadline_at"] == now + timedelta(seconds=90)


class DeadlineJoin(Join):
    """A join of ``members`` whose deadline is ``ago`` in the past (or ahead, if negative)."""

    def __init__(
        self, aws: Aws, members: list[str], *, quorum: int | None, least: int | None, ago: float
    ) -> None:
        super().__init__(aws, members, quorum, join_id=f"dl-{len(members)}-{quorum}-{least}")
        now = utcnow()
        fields = deadline_fields(self.join_id, 1, least, now - timedelta(seconds=ago + 1))
        # The row as registration writes it (the base class wrote one without a deadline).
        row = self.store.get(self.join_id)
        assert row is not None
        aws.dynamodb.put_item(
            TableName=aws.dependencies.table_name,
            Item=JoinItem.model_validate(row.model_dump() | fields).to_item(),
        )
        self.deadlines = JoinDeadlines(
            joins=self.store, client=aws.dynamodb, table_name=aws.dependencies.table_name
        )


def test_at_its_deadline_a_join_succeeds_with_what_succeeded_or_fails_naming_pending(
    aws: Aws,
) -> None:
    # GIVEN two 2-of-5 joins past their deadline, needing 2 at the deadline: one with 2
    # succeeded, one with 1
    enough = DeadlineJoin(aws, ["a", "b", "c", "d", "e"], quorum=4, least=2, ago=1)
    few = DeadlineJoin(aws, ["f", "g", "h"], quorum=3, least=2, ago=1)
    enough.end("a", OK)
    enough.end("b", OK)
    enough.end("c", BAD)
    few.end("f", OK)
    # WHEN the deadlines run
    report = enough.deadlines.run()
    # THEN each is decided once, by its deadline
    assert report == {"deadlines_due": 2, "deadlines_decided": 2}
    decided, succeeded, _ = enough.read()
    assert (decided.workflow_state, decided.error, decided.decided_by) == (
        OK,
        None,
        DECIDED_BY_DEADLINE,
    )
    assert succeeded == 2
    failed = few.read()[0]
    assert (failed.workflow_state, failed.error) == (BAD, DependencyError.DEADLINE_EXCEEDED.value)
    # AND a decided join leaves the index: the next run finds nothing
    assert enough.deadlines.run() == {"deadlines_due": 0, "deadlines_decided": 0}


def test_a_join_decided_before_its_deadline_is_not_decided_again(aws: Aws) -> None:
    # GIVEN a quorum-1 join with a deadline ahead, decided by its first success
    join = DeadlineJoin(aws, ["a", "b"], quorum=1, least=None, ago=-3600)
    join.end("a", OK)
    decided = join.read()[0]
    assert decided.workflow_state is OK
    # THEN its deadline is cancelled: it is no longer in the index, even once due
    assert list(join.deadlines.due(utcnow() + timedelta(hours=2))) == []
    assert not join.deadlines.decide(join.join_id, utcnow() + timedelta(hours=2))
    assert join.read()[0].decided_by is None


def test_a_deadline_not_reached_decides_nothing(aws: Aws) -> None:
    join = DeadlineJoin(aws, ["a", "b"], quorum=2, least=1, ago=-3600)
    join.end("a", OK)
    assert join.deadlines.run() == {"deadlines_due": 0, "deadlines_decided": 0}
    assert not join.deadlines.decide(join.join_id)
    assert join.read()[0].workflow_state is PayloadState.PROCESSING


def test_with_a_deadline_a_join_fails_early_only_once_min_succeeded_is_out_of_reach(
    aws: Aws,
) -> None:
    # GIVEN an all-of join of 4 with a deadline ahead, needing 2 at the deadline
    join = DeadlineJoin(aws, ["a", "b", "c", "d"], quorum=None, least=2, ago=-3600)
    # WHEN 2 members fail: without a deadline the first failure would decide it
    join.end("a", BAD)
    join.end("b", BAD)
    # THEN it still waits: 2 successes are still possible
    assert join.read()[0].workflow_state is PayloadState.PROCESSING
    # AND a third failure decides it QuorumUnreachable at once
    join.end("c", BAD)
    decided = join.read()[0]
    assert (decided.workflow_state, decided.error) == (
        BAD,
        DependencyError.QUORUM_UNREACHABLE.value,
    )


def test_the_store_refuses_a_deadline_decision_after_a_take_back(aws: Aws) -> None:
    # GIVEN a join past its deadline whose member A failed; a rerun takes it back
    join = DeadlineJoin(aws, ["a", "b"], quorum=2, least=1, ago=1)
    join.end("a", BAD)
    stale, succeeded, _ = join.read()
    assert join.reopening.reopen("a") == 1
    # THEN a deadline decision from the read before it is refused, and a fresh one decides
    store = JoinStore(aws.dynamodb, aws.dependencies.table_name)
    state, error = stale.at_deadline(succeeded)
    assert not store.decide_join(join.join_id, state, error=error, reopened=stale.reopened)
    assert join.deadlines.decide(join.join_id)
    assert join.read()[0].error == DependencyError.DEADLINE_EXCEEDED.value


def test_min_succeeded_over_the_members_a_manifest_turned_out_to_have_is_invalid(
    aws: Aws,
) -> None:
    # GIVEN a join by manifest (n unknown when sent) needing 5 at its deadline
    join = DeadlineJoin(aws, ["a", "b", "c"], quorum=None, least=5, ago=-3600)
    # WHEN a member's end is counted once n (3) is known
    join.end("a", OK)
    # THEN it is decided InvalidJoin, the cause naming the field and n
    decided = join.read()[0]
    assert (decided.workflow_state, decided.error) == (BAD, DependencyError.INVALID_JOIN.value)
    assert decided.cause is not None
    assert decided.cause.startswith("join.min_succeeded 5 is more than the 3 distinct payloads")


def test_a_redelivery_and_a_retried_send_keep_the_first_deadline(
    aws: Aws, workflows: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a join whose deadline is 60 s after registration, sent by a parent execution
    harness = Harness(aws)
    body = registered_body("kept", ["k1", "k2"])
    body["join"] |= {"deadline": 60, "parent_execution": "arn:aws:states:::execution:p:1"}
    harness.send(body)
    first = harness.row("kept")[0].deadline_at
    # WHEN it is delivered again later, and the parent's retried send (a new token) asks
    # for another deadline
    later = utcnow() + timedelta(minutes=5)
    monkeypatch.setattr("dependency_tracker.joins.registration.utcnow", lambda: later)
    harness.send(body, message_id="m-again")
    retried = json.loads(json.dumps(body))
    retried["join"] |= {"task_token": "token-retried", "deadline": 3600}
    harness.send(retried, message_id="m-retry")
    # THEN the join holds both tokens and the deadline it was registered with
    row = harness.row("kept")[0]
    assert row.deadline_at == first
    assert row.holds("token-retried")
