"""Joins through the real handlers: one token, k of n members, fires once."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest

from dependency_tracker.core.enums import PayloadState
from dependency_tracker.core.tokens import token_hash
from dependency_tracker.joins.store import JoinStore
from dependency_tracker.table.items import waiter_id_for
from tests.conftest import Aws, payload, payload_id
from tests.harness import Pumps

if TYPE_CHECKING:
    from dependency_tracker.joins.outputs import MemberOutcome
    from dependency_tracker.joins.rows import JoinItem


def send(aws: Aws, body: dict[str, Any]) -> None:
    aws.sqs.send_message(QueueUrl=aws.queue_url, MessageBody=json.dumps(body))


def join(*members: dict[str, Any], **spec: Any) -> dict[str, Any]:
    spec.setdefault("task_token", "tok")
    return {"join": spec, "payloads": list(members)}


def join_row(aws: Aws, task_token: str | None = None, join_id: str | None = None) -> JoinItem:
    row = aws.joins.get(join_id or token_hash(task_token or "tok"))
    assert row is not None
    return row


def store(aws: Aws) -> JoinStore:
    return JoinStore(aws.dynamodb, aws.dependencies.table_name)


def counts(aws: Aws) -> tuple[int, int]:
    """(succeeded, failed) of the join of token "tok", from its count shards."""
    _, succeeded, failed = store(aws).read(token_hash("tok"))
    return succeeded, failed


def outcomes(aws: Aws) -> dict[str, MemberOutcome]:
    """Each member's outcome in the join of token "tok" (membership rows), by member id."""
    members, _ = store(aws).members(token_hash("tok"))
    return {member.payload_id: member for member in members}


@pytest.mark.usefixtures("workflows")
def test_quorum_reached_fires_once_with_the_summary(aws: Aws) -> None:
    pumps = Pumps.create(aws)
    members = [payload("q1"), payload("q2"), payload("q3", workflow="fail")]
    send(aws, join(*members, quorum=2))
    pumps.settle()
    row = join_row(aws)
    assert row.workflow_state is PayloadState.SUCCEEDED
    assert (row.quorum, row.total, row.registered) == (2, 3, 3)
    assert counts(aws) == (2, 1)
    ended = outcomes(aws)
    assert list(ended) == [payload_id("q1"), payload_id("q2"), payload_id("q3", "fail")]
    assert [m.state for m in ended.values()] == [
        PayloadState.SUCCEEDED,
        PayloadState.SUCCEEDED,
        PayloadState.FAILED,
    ]
    assert ended[payload_id("q3", "fail")].error == "TaskFailed"
    # the (fake) token is unknown to Step Functions: the attempt is recorded, once
    assert row.notify_outcome == "PARENT_GONE:InvalidToken"
    for member in members:
        (membership,) = [
            r
            for r in aws.dependencies.rows(
                payload_id(member["features"][0]["id"], member["process"][0]["workflow"])
            )
            if r.waiter_id.startswith("join#")
        ]
        # each outcome was counted once, the membership row says which
        assert membership.notify_outcome == f"COUNTED:{membership.workflow_state.value}"


@pytest.mark.usefixtures("workflows")
def test_quorum_unreachable_as_soon_as_too_many_failed(aws: Aws) -> None:
    pumps = Pumps.create(aws)
    members = [payload("u1", "fail"), payload("u2", "invalid"), payload("u3")]
    send(aws, join(*members, quorum=2))
    pumps.settle()
    row = join_row(aws)
    assert (row.workflow_state, row.error) == (PayloadState.FAILED, "QuorumUnreachable")
    assert outcomes(aws)[payload_id("u2", "invalid")].state is PayloadState.INVALID


@pytest.mark.usefixtures("workflows")
def test_either_or_names_its_winner(aws: Aws) -> None:
    pumps = Pumps.create(aws)
    send(aws, join(payload("e1", "fail"), payload("e2"), quorum=1))
    pumps.settle()
    row = join_row(aws)
    assert row.workflow_state is PayloadState.SUCCEEDED
    assert row.winner == payload_id("e2")


@pytest.mark.usefixtures("workflows")
def test_member_finished_before_registration_is_replayed(aws: Aws) -> None:
    pumps = Pumps.create(aws)
    send(aws, payload("done"))
    pumps.settle()
    runs = aws.sfn.list_executions(stateMachineArn=f"{aws.settings.workflow_arn_prefix}pass")
    send(aws, join(payload("done"), payload("fresh")))
    pumps.settle()
    row = join_row(aws)
    assert row.workflow_state is PayloadState.SUCCEEDED
    again = aws.sfn.list_executions(stateMachineArn=f"{aws.settings.workflow_arn_prefix}pass")
    assert len(again["executions"]) == len(runs["executions"]) + 1  # only "fresh" ran


@pytest.mark.usefixtures("workflows")
def test_two_joins_share_members_and_each_fires(aws: Aws) -> None:
    pumps = Pumps.create(aws)
    send(aws, join(payload("s1"), payload("s2"), task_token="t-a"))
    send(aws, join(payload("s2"), payload("s3"), task_token="t-b", quorum=1))
    pumps.settle()
    assert join_row(aws, "t-a").workflow_state is PayloadState.SUCCEEDED
    assert join_row(aws, "t-b").workflow_state is PayloadState.SUCCEEDED
    for item in ("s1", "s2", "s3"):
        state = aws.states.get(payload_id(item))
        assert state is not None
        assert len(state.executions) == 1


@pytest.mark.usefixtures("workflows")
def test_duplicate_deliveries_fire_the_join_once(aws: Aws) -> None:
    pumps = Pumps.create(aws)
    pumps.deliver_twice()
    calls: list[str] = []
    from dependency_tracker.core import clients  # noqa: PLC0415  (the handlers' cached client)

    clients.client("stepfunctions").meta.events.register(
        "before-call.sfn.*", lambda model, **_: calls.append(model.name)
    )
    send(aws, join(payload("d1"), payload("d2", "fail"), quorum=1))
    pumps.settle()
    assert join_row(aws).workflow_state is PayloadState.SUCCEEDED
    assert [call for call in calls if call.startswith("SendTask")] == ["SendTaskSuccess"]


@pytest.mark.usefixtures("workflows")
def test_results_after_the_join_fired_are_recorded_not_sent(aws: Aws) -> None:
    pumps = Pumps.create(aws)
    send(aws, join(payload("l1"), payload("l2"), quorum=1))
    pumps.settle()
    row = join_row(aws)
    assert row.workflow_state is PayloadState.SUCCEEDED
    # both members ended; the second is counted too, the join did not change hands
    assert counts(aws) == (2, 0)
    assert {m.state for m in outcomes(aws).values()} == {PayloadState.SUCCEEDED}
    assert row.winner in {payload_id("l1"), payload_id("l2")}
    assert row.notified_at is not None


@pytest.mark.usefixtures("workflows")
def test_invalid_join_tells_the_parent_invalid_join(aws: Aws) -> None:
    pumps = Pumps.create(aws)
    send(aws, join(payload("i1"), quorum=5))
    pumps.settle()
    rows = aws.dynamodb.scan(TableName=aws.dependencies.table_name)["Items"]
    (row,) = [r for r in rows if r["waiter_id"]["S"] == waiter_id_for("tok")]
    assert row["error_name"]["S"] == "InvalidJoin"
    assert row["workflow_state"]["S"] == "INVALID"
    assert row["notify_outcome"]["S"] == "PARENT_GONE:InvalidToken"


@pytest.mark.usefixtures("workflows")
def test_join_id_of_another_token_is_refused(aws: Aws) -> None:
    pumps = Pumps.create(aws)
    send(aws, join(payload("r1"), task_token="first", join_id="shared"))
    send(aws, join(payload("r1"), task_token="second", join_id="shared"))
    pumps.settle()
    assert join_row(aws, "first", "shared").task_token == "first"
    rows = aws.dynamodb.scan(TableName=aws.dependencies.table_name)["Items"]
    (refused,) = [r for r in rows if r["waiter_id"]["S"] == waiter_id_for("second")]
    assert refused["error_name"]["S"] == "InvalidJoin"
    assert "already used" in refused["cause"]["S"]
