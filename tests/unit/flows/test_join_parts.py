"""The parts a join's registration is built from, each on its own (moto DynamoDB, S3, SQS)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest

from dependency_tracker.core.enums import DependencyError, PayloadState, utcnow
from dependency_tracker.core.errors import InvalidMessageError
from dependency_tracker.joins.adoption import JoinAdoption
from dependency_tracker.joins.chunks import ChunkRegistrar
from dependency_tracker.joins.fan_out import ORIGIN_MESSAGE_ID, ChunkFanOut
from dependency_tracker.joins.manifest import ManifestReader
from dependency_tracker.joins.member_list import MemberLists, Position
from dependency_tracker.joins.messages import JoinMessage
from dependency_tracker.joins.registration_rows import Registration
from dependency_tracker.joins.rows import ChunkItem, JoinItem
from dependency_tracker.payloads.bucket import PayloadBucket
from dependency_tracker.table.items import (
    JOIN_ROW_KEY,
    MembershipItem,
    join_partition_for,
    membership_id_for,
)

if TYPE_CHECKING:
    from tests.conftest import Aws

BUCKET = "join-parts"
TOKEN = "tok"


def payload(item: str) -> dict[str, Any]:
    return {"features": [{"id": item, "collection": "c"}], "process": [{"workflow": "w"}]}


def join_message(items: list[str]) -> JoinMessage:
    document = {
        "join": {"task_token": TOKEN, "join_id": "j"},
        "payloads": [payload(item) for item in items],
    }
    return JoinMessage.from_document(document, message_id="m-1", load_url=None)


def join_row(*, token: str = TOKEN, **fields: Any) -> JoinItem:
    now = utcnow()
    return JoinItem(
        payload_id=join_partition_for("j"),
        waiter_id=JOIN_ROW_KEY,
        join_id="j",
        task_token=token,
        created_at=now,
        updated_at=now,
        **fields,
    )


def lists(aws: Aws, *, bucket: str | None = BUCKET) -> MemberLists:
    aws.s3.create_bucket(Bucket=BUCKET)
    return MemberLists(
        bucket=PayloadBucket(aws.s3, bucket), manifests=ManifestReader(aws.s3), chunk_size=2
    )


def fan_out(aws: Aws, *, queue_url: str | None) -> ChunkFanOut:
    return ChunkFanOut(
        manifests=ManifestReader(aws.s3), chunk_size=2, sqs=aws.sqs, queue_url=queue_url
    )


def queued(aws: Aws) -> list[dict[str, Any]]:
    response = aws.sqs.receive_message(
        QueueUrl=aws.queue_url, MaxNumberOfMessages=10, MessageAttributeNames=["All"]
    )
    return list(response.get("Messages", []))


# ------------------------------------------------------------------ MemberLists


def test_a_list_of_one_chunk_is_read_whole_with_nothing_after(aws: Aws) -> None:
    # GIVEN member lists read two entries at a time
    reader = lists(aws)
    # WHEN a join of two members is read
    payloads, rest, source = reader.first_chunk(join_message(["a", "b"]), apart=True)
    # THEN both are its first chunk and nothing follows
    assert [p.id for p in payloads] == ["c/workflow-w/a", "c/workflow-w/b"]
    assert (rest, source) == (None, None)


def test_a_longer_inline_list_is_written_once_and_read_back_from_its_position(aws: Aws) -> None:
    # GIVEN a join of five members, later chunks running apart
    reader = lists(aws)
    payloads, rest, source = reader.first_chunk(join_message(list("abcde")), apart=True)
    assert [p.id for p in payloads] == ["c/workflow-w/a", "c/workflow-w/b"]
    assert rest is not None
    assert source is not None
    # WHEN the second chunk is read from where the first ended
    second, after = reader.read(join_row(), 1, rest)
    # THEN it holds the next two members, from the list written to the bucket
    assert [p.id for p in second] == ["c/workflow-w/c", "c/workflow-w/d"]
    assert source.url.startswith(f"s3://{BUCKET}/joins/")
    assert after is not None
    last, end = reader.read(join_row(), 2, after)
    assert ([p.id for p in last], end) == (["c/workflow-w/e"], None)


def test_without_chunks_apart_the_first_read_takes_every_member(aws: Aws) -> None:
    # GIVEN member lists with no bucket to write a long list to
    reader = lists(aws, bucket=None)
    assert not reader.writable
    # WHEN a join of five members is read, later chunks not running apart
    payloads, rest, source = reader.first_chunk(join_message(list("abcde")), apart=False)
    # THEN this one read has them all
    assert len(payloads) == 5
    assert (rest, source) == (None, None)


# ------------------------------------------------------------------ ChunkFanOut


def test_every_later_chunk_gets_its_message_on_the_queue(aws: Aws) -> None:
    # GIVEN a fan-out onto the test queue
    sender = fan_out(aws, queue_url=aws.queue_url)
    assert sender.available
    url = f"s3://{BUCKET}/members.jsonl"
    # WHEN chunks 1 and 2 of a join of three chunks are sent
    sender.send_chunks(join_row(), 1, [Position(url, 10), Position(url, 20)], chunks=3)
    # THEN each has its message: its index, offset and the number of chunks
    bodies = sorted(
        (json.loads(m["Body"])["join_chunk"] for m in queued(aws)), key=lambda c: c["index"]
    )
    assert [(c["index"], c["offset"], c["chunks"]) for c in bodies] == [(1, 10, 3), (2, 20, 3)]
    assert {c["join_id"] for c in bodies} == {"j"}


def test_a_handed_off_join_keeps_the_id_sqs_gave_it_first(aws: Aws) -> None:
    # GIVEN a fan-out onto the test queue
    sender = fan_out(aws, queue_url=aws.queue_url)
    # WHEN a join message is handed off
    sender.hand_off('{"join": {}}', "first-id")
    # THEN it is queued as it came, with its first message id
    (message,) = queued(aws)
    assert message["Body"] == '{"join": {}}'
    assert message["MessageAttributes"][ORIGIN_MESSAGE_ID]["StringValue"] == "first-id"


def test_without_a_queue_no_chunk_is_sent(aws: Aws) -> None:
    # GIVEN a fan-out with no queue
    sender = fan_out(aws, queue_url=None)
    assert not sender.available
    # WHEN a chunk would be sent THEN it refuses, rather than lose it
    with pytest.raises(RuntimeError, match="process queue"):
        sender.send_chunks(join_row(), 1, [Position("s3://b/k", 0)], chunks=2)


# ------------------------------------------------------------------ JoinAdoption


def test_the_same_wait_sent_again_adds_its_token(aws: Aws) -> None:
    # GIVEN a join its parent execution created
    joins = aws.joins
    first = join_row(parent_execution="arn:parent", members_digest="d")
    assert joins.create(first)
    # WHEN the same wait comes with a new token
    adopted = JoinAdoption(joins).adopt(
        first, join_row(token="again", parent_execution="arn:parent", members_digest="d")
    )
    # THEN the join holds both tokens
    assert adopted.holds(TOKEN)
    assert adopted.holds("again")


def test_another_wait_with_the_join_id_is_refused(aws: Aws) -> None:
    # GIVEN a join its parent execution created
    joins = aws.joins
    first = join_row(parent_execution="arn:parent", members_digest="d")
    assert joins.create(first)
    # WHEN another execution sends a join with the same id
    other = join_row(token="other", parent_execution="arn:other", members_digest="d")
    # THEN it is an InvalidJoin to the new token, and the join keeps only its own
    with pytest.raises(InvalidMessageError) as refused:
        JoinAdoption(joins).adopt(first, other)
    assert refused.value.error_name == DependencyError.INVALID_JOIN
    assert refused.value.task_token == "other"
    stored = joins.get("j")
    assert stored is not None
    assert not stored.holds("other")


# ------------------------------------------------------------------ ChunkRows


def membership(member: str, chunk: int) -> MembershipItem:
    now = utcnow()
    return MembershipItem(
        payload_id=member,
        waiter_id=membership_id_for("j"),
        join_id="j",
        chunk=chunk,
        created_at=now,
        updated_at=now,
    )


def test_membership_rows_tell_new_own_and_duplicate(aws: Aws) -> None:
    # GIVEN a join's chunk rows
    rows = aws.chunk_rows
    # WHEN chunk 0 registers two members, again, and chunk 1 lists one of them too
    assert rows.register_members([membership("a", 0), membership("b", 0)]) == [
        Registration.NEW,
        Registration.NEW,
    ]
    assert rows.register_members([membership("a", 0)]) == [Registration.OWN]
    # THEN the later chunk's row is a duplicate
    assert rows.register_members([membership("a", 1)]) == [Registration.DUPLICATE]


def test_a_chunk_is_recorded_once_and_counted_on_its_join(aws: Aws) -> None:
    # GIVEN a join and chunk 0's two membership rows
    assert aws.joins.create(join_row())
    rows = aws.chunk_rows
    rows.register_members([membership("a", 0), membership("b", 0)])
    assert rows.chunk("j", 0) is None
    chunk = ChunkItem.of("j", 0, ["a", "b"], [], utcnow())
    # WHEN the chunk is finished twice (a redelivery)
    assert rows.finish_chunk(chunk, chunks=1)
    assert not rows.finish_chunk(chunk, chunks=1)
    # THEN it is recorded, names its rows, and the join counts its members once
    stored = rows.chunk("j", 0)
    assert stored is not None
    assert stored.recorded
    assert sorted(row.payload_id for row in rows.chunk_rows(stored)) == ["a", "b"]
    join = aws.joins.get("j")
    assert join is not None
    assert (join.registered, join.known_total) == (2, 2)


# ------------------------------------------------------------------ ChunkRegistrar


def registrar(aws: Aws) -> ChunkRegistrar:
    app = aws.app()
    return ChunkRegistrar(
        joins=app.joins,
        rows=aws.chunk_rows,
        dependencies=app.dependencies,
        states=app.states,
        cycles=app.cycles,
        runner=app.runner,
    )


def test_a_chunk_of_an_undecided_join_has_work_left(aws: Aws) -> None:
    # GIVEN a join being registered
    assert aws.joins.create(join_row())
    # WHEN its first chunk is checked THEN it still has to register
    assert not registrar(aws).stopped(join_row(), 0)


def test_a_decided_join_registers_no_new_chunk(aws: Aws) -> None:
    # GIVEN a join decided before its chunk 1 began
    assert aws.joins.create(join_row())
    assert aws.joins.decide_join("j", PayloadState.FAILED, error=DependencyError.INVALID_JOIN)
    decided = aws.joins.get("j")
    assert decided is not None
    # WHEN chunk 1 is checked THEN it has nothing to do
    assert registrar(aws).stopped(decided, 1)


def test_a_recorded_chunk_is_not_registered_again_and_its_total_is_written(aws: Aws) -> None:
    # GIVEN a join of one chunk whose chunk is recorded, n not written yet
    assert aws.joins.create(join_row())
    rows = aws.chunk_rows
    rows.register_members([membership("a", 0)])
    assert rows.finish_chunk(ChunkItem.of("j", 0, ["a"], [], utcnow()), chunks=1)
    join = aws.joins.get("j")
    assert join is not None
    # WHEN its chunk is delivered again
    assert registrar(aws).stopped(join, 0)
    # THEN n is written, as the delivery that died before it would have
    stored = aws.joins.get("j")
    assert stored is not None
    assert stored.total == 1
