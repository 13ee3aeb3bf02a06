"""Join rows within DynamoDB's 400 KB: a join that could outgrow it is refused at once.

The worst case (every member failed, with the longest state and error, the row
decided and notified) is computed on the serialized row; the tests check the
boundary, that the estimate really bounds what DynamoDB stores (the strict layer
refuses an update past 400 KB), and the refusal through the process handler.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pytest

from dependency_tracker.errors import InvalidMessageError
from dependency_tracker.flows.callback import CallbackFlow
from dependency_tracker.flows.join_limits import (
    MAX_JOIN_ROW_BYTES,
    MAX_MEMBER_ERROR_CHARS,
    check_join_row,
    worst_case_bytes,
)
from dependency_tracker.handlers.process import lambda_handler as process_handler
from dependency_tracker.limits import DDB_MAX_ITEM_BYTES, item_size
from dependency_tracker.models import (
    JOIN_ROW_KEY,
    JoinItem,
    MembershipItem,
    PayloadState,
    join_partition_for,
    membership_id_for,
    waiter_id_for,
)
from tests.unit.handlers.conftest import sqs_event

if TYPE_CHECKING:
    from dependency_tracker.local.context import LocalContext
    from tests.conftest import Aws

NOW = datetime.now(UTC)
TOKEN = "tok-" + "t" * 996  # real task tokens run to about a thousand characters
# A typical cirrus id: {collection}/workflow-{workflow}/{item id}, 61 bytes.
CIRRUS_ID = "sentinel-2-l2a/workflow-cog-archive/S2B_10TFK_2021{:05d}_0_L2A"


def join_row(members: list[str], join_id: str = "j-rows") -> JoinItem:
    return JoinItem(
        payload_id=join_partition_for(join_id),
        waiter_id=JOIN_ROW_KEY,
        join_id=join_id,
        task_token=TOKEN,
        quorum=len(members),
        total=len(members),
        members=members,
        parent_execution="arn:aws:states:us-east-1:123456789012:execution:deptrack-wait-for-join:p",
        waiter_payload_id="sentinel-2-l2a/workflow-mosaic/parent",
        created_at=NOW,
        updated_at=NOW,
    )


def ids(count: int, length: int) -> list[str]:
    return [f"c/workflow-pass/{index:04d}-".ljust(length, "m") for index in range(count)]


def largest_accepted(length: int) -> int:
    """How many members with ids of ``length`` bytes a join may have."""
    low, high = 1, 20_000
    while low < high:
        middle = (low + high + 1) // 2
        if worst_case_bytes(join_row(ids(middle, length))) <= MAX_JOIN_ROW_BYTES:
            low = middle
        else:
            high = middle - 1
    return low


def test_typical_cirrus_ids_allow_about_1400_members() -> None:
    def fits(count: int) -> bool:
        row = join_row([CIRRUS_ID.format(index) for index in range(count)])
        return worst_case_bytes(row) <= MAX_JOIN_ROW_BYTES

    # the e2e and demo joins (200, 1,000 members) stay well inside
    assert fits(1400)
    assert not fits(1500)


def test_just_under_the_row_limit_is_accepted_and_just_over_refused() -> None:
    # GIVEN the largest last member id a join of 100 members can have
    members = ids(100, 1000)

    def with_last(extra: int) -> JoinItem:
        return join_row([*members[:-1], members[-1] + "z" * extra])

    low, high = 0, 100_000
    while low < high:
        middle = (low + high + 1) // 2
        if worst_case_bytes(with_last(middle)) <= MAX_JOIN_ROW_BYTES:
            low = middle
        else:
            high = middle - 1
    under = with_last(low)
    assert worst_case_bytes(under) <= MAX_JOIN_ROW_BYTES
    check_join_row(under)
    # WHEN one more byte is added to it THEN the join is refused, naming the limit and count
    with pytest.raises(InvalidMessageError) as refused:
        check_join_row(with_last(low + 1))
    assert refused.value.error_name == "InvalidJoin"
    assert refused.value.task_token == TOKEN
    assert f"{DDB_MAX_ITEM_BYTES}-byte item limit" in refused.value.reason
    assert "join of 100 members" in refused.value.reason


def test_the_estimate_bounds_what_dynamodb_stores(aws: Aws) -> None:
    # GIVEN the largest join accepted with 2,000-byte ids, registered as the process flow does
    count = largest_accepted(2000)
    members = ids(count, 2000)
    row = join_row(members)
    check_join_row(row)
    assert aws.dependencies.register(row)
    callback = CallbackFlow(settings=aws.settings, dependencies=aws.dependencies, sfn=aws.sfn)
    # WHEN every member ends ABORTED with an over-long error, recorded by the callback flow
    for member in members:
        membership = MembershipItem(
            payload_id=member,
            waiter_id=membership_id_for(row.join_id),
            join_id=row.join_id,
            workflow_state=PayloadState.ABORTED,
            error="E" * 300,
            created_at=NOW,
            updated_at=NOW,
            resolved_at=NOW,
        )
        aws.dependencies.register(membership)
        callback.handle(membership)
    # THEN DynamoDB (strict: it refuses any update past 400 KB) took every one, and the
    # join was decided and its parent told (the fake token is gone)
    stored = aws.dynamodb.get_item(
        TableName=aws.dependencies.table_name,
        Key={"payload_id": {"S": row.payload_id}, "waiter_id": {"S": JOIN_ROW_KEY}},
    )["Item"]
    decided = JoinItem.from_item(stored)
    callback.handle(decided)  # the join row's own stream record
    stored = aws.dynamodb.get_item(
        TableName=aws.dependencies.table_name,
        Key={"payload_id": {"S": row.payload_id}, "waiter_id": {"S": JOIN_ROW_KEY}},
    )["Item"]
    final = JoinItem.from_item(stored)
    assert sorted(final.failed) == sorted(members)
    assert {failure.error for failure in final.failures.values()} == {
        "E" * (MAX_MEMBER_ERROR_CHARS - 14) + "...[truncated]"
    }
    assert final.workflow_state is PayloadState.FAILED
    assert final.notify_outcome == "PARENT_GONE:InvalidToken"
    assert item_size(stored) <= worst_case_bytes(row) <= MAX_JOIN_ROW_BYTES


def test_oversize_join_is_refused_before_anything_is_written(
    aws: Aws, lambda_context: LocalContext
) -> None:
    # GIVEN a join whose row could reach ~450 KB (45 members with 5,000-byte ids)
    members = ids(45, 5000)
    body = {
        "join": {"task_token": "tok-big", "join_id": "j-big"},
        "payloads": [{"id": member, "process": [{"workflow": "pass"}]} for member in members],
    }
    # WHEN the process handler takes it
    response = process_handler(sqs_event(body), lambda_context)
    # THEN the record succeeds, the parent's token gets InvalidJoin with the reason,
    # and no join row, membership or execution exists
    assert response == {"batchItemFailures": []}
    items = aws.dynamodb.scan(TableName=aws.dependencies.table_name)["Items"]
    (row,) = items
    assert row["waiter_id"]["S"] == waiter_id_for("tok-big")
    assert (row["workflow_state"]["S"], row["error_name"]["S"]) == ("INVALID", "InvalidJoin")
    assert "join of 45 members" in row["cause"]["S"]
    assert str(DDB_MAX_ITEM_BYTES) in row["cause"]["S"]
    assert aws.dependencies.get_join("j-big") is None
    states: list[dict[str, Any]] = aws.dynamodb.scan(TableName=aws.states.table_name)["Items"]
    assert [item["payload_id"]["S"] for item in states] == ["invalid-message/msg-0"]
    assert json.loads(json.dumps(row))  # a plain item, nothing else to read
