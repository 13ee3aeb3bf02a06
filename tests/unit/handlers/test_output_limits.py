"""Callback outputs and failure causes within AWS's limits, just under and just over each bound.

Step Functions refuses a ``SendTaskSuccess`` output over 262,144 bytes and a
``SendTaskFailure`` cause over 32,768 characters (the strict layer of the
``aws`` fixture refuses them here too). The tracker sends whole outputs up to
its own, smaller bounds and a reference into the payload bucket past them.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pytest
from botocore.exceptions import ClientError

from dependency_tracker.answers.actions import CallbackAction
from dependency_tracker.answers.parent import CALLBACK_OUTPUTS_PREFIX
from dependency_tracker.callbacks.flow import CallbackFlow
from dependency_tracker.core.enums import DependencyError, PayloadState
from dependency_tracker.core.limits import SFN_MAX_CAUSE_CHARS, SFN_MAX_PAYLOAD_BYTES, utf8_size
from dependency_tracker.joins.outputs import MAX_JOIN_OUTPUT_BYTES, JoinSummary, MemberOutcome
from dependency_tracker.joins.registration_rows import Registration
from dependency_tracker.joins.results import results_key
from dependency_tracker.joins.rows import (
    JOIN_COUNT_SHARDS,
    ChunkItem,
    CountShardItem,
    JoinCounts,
    JoinItem,
    count_partition_for,
    shard_of,
)
from dependency_tracker.joins.store import JoinStore
from dependency_tracker.payloads.bucket import PayloadBucket
from dependency_tracker.table.items import (
    JOIN_ROW_KEY,
    MembershipItem,
    Resolution,
    WaiterItem,
    join_partition_for,
    membership_id_for,
    waiter_id_for,
)
from dependency_tracker.waits.outputs import (
    MAX_WAIT_OUTPUT_BYTES,
    CallbackFailure,
    CallbackSuccess,
)
from dependency_tracker_local.strict import strict_limits

if TYPE_CHECKING:
    from dependency_tracker.callbacks.flow import CallbackFlow
    from tests.conftest import Aws

NOW = datetime.now(UTC)
BUCKET = "deptrack-test-payloads"
ARN = "arn:aws:states:us-east-1:123456789012:execution:deptrack-pass:a-0123456789-1"
PAYLOAD_ID = "sentinel-2-l2a/workflow-pass/item-1"

Sent = list[tuple[str, dict[str, Any]]]


@pytest.fixture
def bucket(aws: Aws) -> PayloadBucket:
    aws.s3.create_bucket(Bucket=BUCKET)
    return PayloadBucket(aws.s3, BUCKET)


@pytest.fixture
def sent(aws: Aws) -> Sent:
    """Every SendTaskSuccess/SendTaskFailure the flow makes, with its parameters."""
    calls: Sent = []

    def record(params: dict[str, Any], model: Any, **_: Any) -> None:
        if model.name.startswith("SendTask"):
            calls.append((model.name, dict(params)))

    aws.sfn.meta.events.register("provide-client-params.sfn", record)
    return calls


def flow(aws: Aws, bucket: PayloadBucket | None) -> CallbackFlow:
    # No bucket: one without a name, which can write nothing (as no bucket at all).
    return aws.app(bucket=bucket or PayloadBucket(aws.s3)).callback


def stored_objects(aws: Aws) -> dict[str, str]:
    listed = aws.s3.list_objects_v2(Bucket=BUCKET).get("Contents", [])
    return {
        o["Key"]: aws.s3.get_object(Bucket=BUCKET, Key=o["Key"])["Body"].read().decode()
        for o in listed
    }


def read_url(aws: Aws, url: str) -> Any:
    assert url.startswith(f"s3://{BUCKET}/{CALLBACK_OUTPUTS_PREFIX}/")
    key = url.removeprefix(f"s3://{BUCKET}/")
    return json.loads(aws.s3.get_object(Bucket=BUCKET, Key=key)["Body"].read())


# ---------------------------------------------------------------- single waits


def succeeded_waiter(output_bytes: int) -> WaiterItem:
    """A resolved waiter whose full callback output is exactly ``output_bytes``."""

    def waiter(pad: int) -> WaiterItem:
        return WaiterItem(
            payload_id=PAYLOAD_ID,
            waiter_id=waiter_id_for("tok-wait"),
            task_token="tok-wait",
            workflow_state=PayloadState.SUCCEEDED,
            created_at=NOW,
            updated_at=NOW,
            resolved_at=NOW,
            execution_arn=ARN,
            result_json=json.dumps({"output": "x" * pad}),
        )

    base = utf8_size(full_output(waiter(0)))
    row = waiter(output_bytes - base)
    assert utf8_size(full_output(row)) == output_bytes
    return row


def full_output(row: WaiterItem) -> str:
    resolution = row.resolution
    assert resolution is not None
    return CallbackSuccess(
        payload_id=row.payload_id,
        execution_arn=resolution.execution_arn,
        replayed=resolution.replayed,
        result=json.loads(resolution.result_json or "null"),
    ).to_json()


def test_single_output_at_its_bound_is_sent_whole(
    aws: Aws, bucket: PayloadBucket, sent: Sent
) -> None:
    row = succeeded_waiter(MAX_WAIT_OUTPUT_BYTES)
    aws.dependencies.register(row)
    # the (fake) token is unknown: Step Functions accepted the size, then refused the token
    assert flow(aws, bucket).handle(row) is CallbackAction.PARENT_GONE
    ((name, params),) = sent
    assert name == "SendTaskSuccess"
    assert params["output"] == full_output(row)
    assert stored_objects(aws) == {}


def test_single_output_one_byte_over_goes_by_url(
    aws: Aws, bucket: PayloadBucket, sent: Sent
) -> None:
    row = succeeded_waiter(MAX_WAIT_OUTPUT_BYTES + 1)
    aws.dependencies.register(row)
    assert flow(aws, bucket).handle(row) is CallbackAction.PARENT_GONE
    ((_, params),) = sent
    output = json.loads(params["output"])
    assert utf8_size(params["output"]) <= MAX_WAIT_OUTPUT_BYTES
    assert output["payload_id"] == PAYLOAD_ID
    assert (output["state"], output["execution_arn"], output["replayed"]) == (
        "SUCCEEDED",
        ARN,
        False,
    )
    assert output["truncated"] is True
    assert "result" not in output
    assert read_url(aws, output["output_url"]) == json.loads(full_output(row))


def test_single_output_over_its_bound_without_a_bucket_is_cut_not_sent_whole(
    aws: Aws, sent: Sent
) -> None:
    row = succeeded_waiter(MAX_WAIT_OUTPUT_BYTES + 1)
    aws.dependencies.register(row)
    assert flow(aws, None).handle(row) is CallbackAction.PARENT_GONE
    ((_, params),) = sent
    output = json.loads(params["output"])
    assert output == {
        "payload_id": PAYLOAD_ID,
        "state": "SUCCEEDED",
        "execution_arn": ARN,
        "replayed": False,
        "truncated": True,
    }


def test_a_redelivery_writes_the_same_object(aws: Aws, bucket: PayloadBucket, sent: Sent) -> None:
    row = succeeded_waiter(MAX_WAIT_OUTPUT_BYTES + 1)
    aws.dependencies.register(row)
    callback = flow(aws, bucket)
    callback.handle(row)
    # as if the first delivery died before marking the row notified
    aws.dynamodb.put_item(TableName=aws.dependencies.table_name, Item=row.to_item())
    callback.handle(row)
    first, second = (params["output"] for _, params in sent)
    assert first == second
    assert len(stored_objects(aws)) == 1


def failed_waiter(cause: str, payload_id: str = PAYLOAD_ID) -> WaiterItem:
    return WaiterItem(
        payload_id=payload_id,
        waiter_id=waiter_id_for("tok-fail"),
        task_token="tok-fail",
        workflow_state=PayloadState.FAILED,
        created_at=NOW,
        updated_at=NOW,
        resolved_at=NOW,
        execution_arn=ARN,
        error="TaskFailed",
        cause=cause,
    )


def failure_cause(row: WaiterItem) -> str:
    return CallbackFailure(
        error="DependencyFailed",
        payload_id=row.payload_id,
        state=row.workflow_state,
        execution_arn=row.execution_arn,
        payload_error=row.error,
        payload_cause=row.cause,
    ).cause_json(limit=10**9)


@pytest.mark.parametrize("over", [0, 1, 20_000])
def test_failure_cause_is_json_within_32768_characters(aws: Aws, sent: Sent, over: int) -> None:
    base = len(failure_cause(failed_waiter("")))
    row = failed_waiter("c" * (SFN_MAX_CAUSE_CHARS - base + over))
    assert len(failure_cause(row)) == SFN_MAX_CAUSE_CHARS + over
    aws.dependencies.register(row)
    # the strict layer checked the lengths first (over them: ValidationException, raised)
    assert flow(aws, None).handle(row) is CallbackAction.PARENT_GONE
    ((name, params),) = sent
    assert (name, params["error"]) == ("SendTaskFailure", "DependencyFailed")
    assert len(params["cause"]) <= SFN_MAX_CAUSE_CHARS
    cause = json.loads(params["cause"])
    assert (cause["payload_id"], cause["error"], cause["execution_arn"]) == (
        PAYLOAD_ID,
        "TaskFailed",
        ARN,
    )
    if over:
        assert cause["cause"].endswith("...[truncated]")
    else:
        assert params["cause"] == failure_cause(row)


# ----------------------------------------------------------------------- joins

JOIN_ID = "j-limits"
FAILED = Resolution(state=PayloadState.FAILED, error="TaskFailed")
SUCCEEDED = Resolution(state=PayloadState.SUCCEEDED)


def join_header(members: list[str], quorum: int | None) -> JoinItem:
    """The join row once every member is registered (``quorum`` None: all of them)."""
    return JoinItem(
        payload_id=join_partition_for(JOIN_ID),
        waiter_id=JOIN_ROW_KEY,
        join_id=JOIN_ID,
        task_token="tok-join",
        quorum=quorum,
        total=len(members),
        registered=len(members),
        created_at=NOW,
        updated_at=NOW,
    )


def expected_summary(
    members: list[str],
    ended: dict[str, Resolution],
    *,
    quorum: int | None = None,
    winner: str | None = None,
    with_bucket: bool = True,
) -> JoinSummary:
    """The full summary of a join whose members ended as ``ended`` says (the rest pending).

    With a payload bucket it names the join's results manifest (joins/results.py).
    """
    succeeded = sum(1 for r in ended.values() if r.state is PayloadState.SUCCEEDED)
    failed = len(ended) - succeeded
    header = join_header(members, quorum).model_copy(update={"winner": winner})
    outcomes = [
        MemberOutcome(payload_id=m, state=ended[m].state, error=ended[m].error)
        if m in ended
        else MemberOutcome(payload_id=m)
        for m in members
    ]
    counts = JoinCounts(
        succeeded=succeeded, failed=failed, pending=len(members) - succeeded - failed
    )
    summary = JoinSummary.of(header, counts, outcomes)
    if with_bucket:
        summary.results_url = f"s3://{BUCKET}/{results_key(JOIN_ID)}"
    return summary


def stored_join(
    aws: Aws,
    members: list[str],
    ended: dict[str, Resolution],
    *,
    quorum: int | None = None,
    winner: str | None = None,
    count_each: bool = True,
) -> JoinItem:
    """A join stored as the flows leave it: registered in chunks, outcomes counted, decided.

    Membership rows are written with their members' outcomes (as update-state leaves
    them); each is counted as the callback flow counts it, or with ``count_each``
    False the count shards are written at once (thousands of transactions are slow
    in moto).
    """
    joins = JoinStore(aws.dynamodb, aws.dependencies.table_name)
    chunk_rows = aws.chunk_rows
    header = join_header(members, quorum)
    assert joins.create(header.model_copy(update={"total": None, "registered": 0}))
    size = aws.settings.join_chunk_size
    chunks = [members[i : i + size] for i in range(0, len(members), size)]
    membership_id = membership_id_for(JOIN_ID)

    def membership(member: str, index: int) -> MembershipItem:
        resolution = ended.get(member)
        return MembershipItem(
            payload_id=member,
            waiter_id=membership_id,
            join_id=JOIN_ID,
            chunk=index,
            workflow_state=PayloadState.PROCESSING if resolution is None else resolution.state,
            error=None if resolution is None else resolution.error,
            created_at=NOW,
            updated_at=NOW,
            resolved_at=None if resolution is None else NOW,
        )

    for index, chunk in enumerate(chunks):
        found = chunk_rows.register_members([membership(m, index) for m in chunk])
        assert set(found) == {Registration.NEW}
        last = index == len(chunks) - 1
        assert chunk_rows.finish_chunk(
            ChunkItem.of(JOIN_ID, index, chunk, [], NOW), chunks=len(chunks) if last else None
        )
    chunk_rows.set_total(JOIN_ID, len(members))
    if count_each:
        for index, chunk in enumerate(chunks):
            for member in chunk:
                if member in ended:
                    assert joins.count(membership(member, index), ended[member], retention_days=1)
    else:
        shards = [
            CountShardItem(payload_id=count_partition_for(JOIN_ID, n), join_id=JOIN_ID)
            for n in range(JOIN_COUNT_SHARDS)
        ]
        for member, resolution in ended.items():
            shard = shards[shard_of(member)]
            if resolution.state is PayloadState.SUCCEEDED:
                shard.succeeded += 1
            else:
                shard.failed += 1
        for shard in shards:
            aws.dynamodb.put_item(TableName=aws.dependencies.table_name, Item=shard.to_item())
    row, succeeded, failed = joins.read(JOIN_ID)
    assert row is not None
    decided = row.decision(succeeded, failed)
    assert decided is not None
    state, error = decided
    assert joins.decide_join(JOIN_ID, state, error=error, winner=winner)
    stored = aws.joins.get(JOIN_ID)
    assert stored is not None
    return stored


def member_ids(count: int, length: int) -> list[str]:
    return [f"c/workflow-pass/{index:04d}-".ljust(length, "m") for index in range(count)]


def all_of_join(summary_bytes: int, *, with_bucket: bool = True) -> list[str]:
    """Members of an all-of join, every one succeeded, whose summary is ``summary_bytes``."""
    members = member_ids(32, 1000)

    def size() -> int:
        ended = dict.fromkeys(members, SUCCEEDED)
        return utf8_size(expected_summary(members, ended, with_bucket=with_bucket).to_json())

    members[-1] += "z" * (summary_bytes - size())
    assert size() == summary_bytes
    return members


def test_join_summary_at_its_bound_is_sent_whole(
    aws: Aws, bucket: PayloadBucket, sent: Sent
) -> None:
    members = all_of_join(MAX_JOIN_OUTPUT_BYTES)
    row = stored_join(aws, members, dict.fromkeys(members, SUCCEEDED))
    assert flow(aws, bucket).handle(row) is CallbackAction.PARENT_GONE
    ((_, params),) = sent
    assert utf8_size(params["output"]) == MAX_JOIN_OUTPUT_BYTES
    output = json.loads(params["output"])
    assert output["succeeded"] == members
    assert output["counts"] == {"succeeded": 32, "failed": 0, "pending": 0}
    assert (output["failed"], output["pending"]) == ([], [])
    assert "summary_url" not in output
    # (the one object written is the join's results manifest, which the summary names)
    assert output["results_url"] == f"s3://{BUCKET}/{results_key(JOIN_ID)}"
    assert list(stored_objects(aws)) == [results_key(JOIN_ID)]


def test_join_summary_one_byte_over_goes_by_summary_url(
    aws: Aws, bucket: PayloadBucket, sent: Sent
) -> None:
    members = all_of_join(MAX_JOIN_OUTPUT_BYTES + 1)
    ended = dict.fromkeys(members, SUCCEEDED)
    row = stored_join(aws, members, ended)
    assert flow(aws, bucket).handle(row) is CallbackAction.PARENT_GONE
    ((_, params),) = sent
    assert utf8_size(params["output"]) <= MAX_JOIN_OUTPUT_BYTES
    output = json.loads(params["output"])
    url = output.pop("summary_url")
    assert output.pop("results_url") == f"s3://{BUCKET}/{results_key(JOIN_ID)}"
    assert output == {
        "join_id": "j-limits",
        "quorum": 32,
        "total": 32,
        "counts": {"succeeded": 32, "failed": 0, "pending": 0},
        "truncated": True,
    }
    summary = read_url(aws, url)
    assert summary == json.loads(expected_summary(members, ended).to_json())
    assert summary["succeeded"] == members


def test_quorum_unreachable_cause_is_bounded_the_same_way(
    aws: Aws, bucket: PayloadBucket, sent: Sent
) -> None:
    members = member_ids(40, 1000)
    ended = dict.fromkeys(members[:3], FAILED)
    assert utf8_size(expected_summary(members, ended, quorum=38).to_json()) > MAX_JOIN_OUTPUT_BYTES
    row = stored_join(aws, members, ended, quorum=38)
    assert (row.workflow_state, row.error) == (
        PayloadState.FAILED,
        DependencyError.QUORUM_UNREACHABLE,
    )
    assert flow(aws, bucket).handle(row) is CallbackAction.PARENT_GONE
    ((name, params),) = sent
    assert (name, params["error"]) == ("SendTaskFailure", "QuorumUnreachable")
    assert len(params["cause"]) <= SFN_MAX_CAUSE_CHARS
    cause = json.loads(params["cause"])
    assert cause["counts"] == {"succeeded": 0, "failed": 3, "pending": 37}
    assert "failed" not in cause
    summary = read_url(aws, cause["summary_url"])
    assert [m["payload_id"] for m in summary["failed"]] == members[:3]
    assert {m["error"] for m in summary["failed"]} == {"TaskFailed"}
    assert summary["pending"] == members[3:]


def test_either_or_does_not_list_every_pending_member(
    aws: Aws, bucket: PayloadBucket, sent: Sent
) -> None:
    members = member_ids(40, 1000)
    row = stored_join(aws, members, {members[7]: SUCCEEDED}, quorum=1, winner=members[7])
    assert flow(aws, bucket).handle(row) is CallbackAction.PARENT_GONE
    ((_, params),) = sent
    output = json.loads(params["output"])
    assert output["winner"] == members[7]
    assert output["counts"] == {"succeeded": 1, "failed": 0, "pending": 39}
    assert "pending" not in output
    assert len(read_url(aws, output["summary_url"])["pending"]) == 39


def test_join_over_its_bound_without_a_bucket_is_cut_not_sent_whole(aws: Aws, sent: Sent) -> None:
    members = all_of_join(MAX_JOIN_OUTPUT_BYTES + 1, with_bucket=False)
    row = stored_join(aws, members, dict.fromkeys(members, SUCCEEDED))
    assert flow(aws, None).handle(row) is CallbackAction.PARENT_GONE
    ((_, params),) = sent
    output = json.loads(params["output"])
    assert output["truncated"] is True
    assert "summary_url" not in output
    assert "succeeded" not in output


def test_the_real_output_limit_holds_at_1400_members(aws: Aws, bucket: PayloadBucket) -> None:
    # GIVEN an all-of join of 1,400 members (ids of 190 bytes), all succeeded, stored as
    # the flows leave it (its rows are of constant size), whose whole summary would cross
    # SendTaskSuccess's 262,144 bytes
    members = member_ids(1400, 190)
    ended = dict.fromkeys(members, SUCCEEDED)
    row = stored_join(aws, members, ended, count_each=False)
    full = expected_summary(members, ended).to_json()
    assert utf8_size(full) > SFN_MAX_PAYLOAD_BYTES
    # AWS (the strict layer here, on even under DEPTRACK_STRICT=0) refuses the whole summary
    with strict_limits(), pytest.raises(ClientError) as refused:
        aws.sfn.send_task_success(taskToken="tok-join", output=full)
    assert refused.value.response["Error"]["Code"] == "ValidationException"
    # WHEN the callback flow builds the join's output
    output = flow(aws, bucket).joins.join_output(row)
    # THEN it is within the bound, and Step Functions takes it (then refuses the fake token)
    assert utf8_size(output) <= MAX_JOIN_OUTPUT_BYTES
    with strict_limits(), pytest.raises(ClientError) as accepted:
        aws.sfn.send_task_success(taskToken="tok-join", output=output)
    assert accepted.value.response["Error"]["Code"] == "InvalidToken"
    stored = read_url(aws, json.loads(output)["summary_url"])
    assert stored == json.loads(full)
