"""Join registration in bounded chunks, exactly-once counting and decisions taken only when sure.

Chunks of 2 members make every path (continuation messages, the member list
written to the bucket, duplicates across chunks, a redelivered or crashed chunk)
reachable with a handful of members.
"""

from __future__ import annotations

import json
import os
import threading
import traceback
from typing import TYPE_CHECKING, Any

import pytest

from dependency_tracker.core.enums import DependencyError, PayloadState
from dependency_tracker.core.errors import InvalidMessageError
from dependency_tracker.core.limits import item_size
from dependency_tracker.intake.parse import read_message
from dependency_tracker.joins.manifest import manifest_text
from dependency_tracker.joins.messages import JoinChunkMessage, JoinMessage
from dependency_tracker.joins.registration_rows import ChunkRows
from dependency_tracker.joins.store import JoinStore
from dependency_tracker.payloads.bucket import PayloadBucket
from dependency_tracker.table.items import (
    MembershipItem,
    Resolution,
    join_partition_for,
    membership_id_for,
)
from dependency_tracker.waits.process import ProcessAction
from tests.conftest import payload, payload_id

if TYPE_CHECKING:
    from tests.conftest import Aws

BUCKET = "deptrack-payloads"
CHUNK = 2


class Harness:
    """A process flow with chunks of two, its queue drained by hand, and the callback flow."""

    def __init__(self, aws: Aws) -> None:
        self.aws = aws
        aws.s3.create_bucket(Bucket=BUCKET)
        self.settings = aws.settings.model_copy(
            update={
                "join_chunk_size": CHUNK,
                "process_queue_url": aws.queue_url,
                "payload_bucket": BUCKET,
            }
        )
        self.bucket = PayloadBucket(aws.s3, BUCKET)
        root = aws.app(self.settings, dependencies=aws.dependencies, bucket=self.bucket)
        self.flow = root.process
        self.callback = root.callback
        self.joins = JoinStore(aws.dynamodb, aws.dependencies.table_name)

    def send(self, body: dict[str, Any], message_id: str = "m-0") -> ProcessAction:
        return self.flow.handle(self.flow.parse(json.dumps(body), message_id=message_id))

    def queued(self) -> list[dict[str, Any]]:
        """Receive (and delete) every message on the process queue."""
        return self.aws.queued()

    def drain(self) -> int:
        """Handle continuation messages until none is left; returns how many there were."""
        handled = 0
        while bodies := self.queued():
            for index, body in enumerate(bodies):
                self.send(body, message_id=f"chunk-{handled}-{index}")
                handled += 1
        return handled

    def finish(self, join_id: str, item_id: str, state: PayloadState) -> None:
        """The member's run ended: resolve its membership row and deliver it to the callback."""
        member = payload_id(item_id)
        membership = membership_id_for(join_id)
        self.aws.dependencies.resolve(member, membership, Resolution(state=state))
        row = self.aws.dependencies.get_row(member, membership)
        assert isinstance(row, MembershipItem)
        self.callback.handle(row)

    def row(self, join_id: str) -> Any:
        join, succeeded, failed = self.joins.read(join_id)
        assert join is not None
        return join, succeeded, failed


def join_body(
    join_id: str, items: list[str], quorum: int | None = None, **source: Any
) -> dict[str, Any]:
    spec: dict[str, Any] = {"task_token": f"token-{join_id}", "join_id": join_id}
    if quorum is not None:
        spec["quorum"] = quorum
    if not source:
        source = {"payloads": [payload(item) for item in items]}
    return {"join": spec, **source}


def manifest(harness: Harness, key: str, entries: list[dict[str, Any]]) -> str:
    harness.aws.s3.put_object(Bucket=BUCKET, Key=key, Body=manifest_text(entries).encode())
    return f"s3://{BUCKET}/{key}"


def starts(aws: Aws, item: str) -> int:
    """Executions the tracker started for a member (every attempt of its payload)."""
    state = aws.states.get(payload_id(item))
    return 0 if state is None else len(state.executions)


def finish_chunk_dies_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first chunk to finish dies just before recording itself (its members started)."""
    real = ChunkRows.finish_chunk
    calls = {"n": 0}

    def dies_once(self: ChunkRows, *args: Any, **kwargs: Any) -> bool:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("the Lambda died after starting the members")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(ChunkRows, "finish_chunk", dies_once)


@pytest.fixture
def harness(aws: Aws, workflows: dict[str, str]) -> Harness:
    return Harness(aws)


def test_a_long_inline_join_registers_in_chunks_through_the_queue(harness: Harness) -> None:
    items = [f"c{i}" for i in range(5)]
    assert harness.send(join_body("long", items)) is ProcessAction.JOINED
    # the first invocation registered one chunk, wrote the member list and queued the rest
    join, _, _ = harness.row("long")
    assert (join.registered, join.registered_chunks, join.total) == (2, 1, 5)
    assert join.source is not None
    assert join.source.startswith(f"s3://{BUCKET}/joins/")
    assert harness.drain() == 2
    join, _, _ = harness.row("long")
    assert (join.registered, join.registered_chunks, join.chunks) == (5, 3, 3)
    assert [starts(harness.aws, item) for item in items] == [1] * 5
    # the row stays small: counts, not members
    raw = harness.aws.dynamodb.get_item(
        TableName=harness.aws.dependencies.table_name,
        Key={"payload_id": {"S": join_partition_for("long")}, "waiter_id": {"S": "join"}},
    )["Item"]
    assert "members" not in raw
    assert item_size(raw) < 1024


def test_redelivered_join_and_chunk_messages_change_nothing(harness: Harness) -> None:
    items = [f"r{i}" for i in range(5)]
    body = join_body("again", items)
    harness.send(body)
    chunk_messages = harness.queued()
    for message in chunk_messages * 2:  # every continuation delivered twice
        harness.send(message, message_id="chunk-1")
    harness.send(body)  # and the join message itself again
    harness.drain()
    join, _, _ = harness.row("again")
    assert (join.registered, join.registered_chunks, join.duplicates) == (5, 3, 0)
    assert [starts(harness.aws, item) for item in items] == [1] * 5


def test_a_chunk_that_died_before_recording_itself_is_finished_by_its_redelivery(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    items = ["d0", "d1", "d2"]
    finish_chunk_dies_once(monkeypatch)
    body = join_body("crash", items)
    with pytest.raises(RuntimeError):
        harness.send(body)
    harness.send(body)  # SQS redelivers: its own membership rows are recognised, not duplicates
    harness.drain()
    join, _, _ = harness.row("crash")
    assert (join.registered, join.duplicates, join.known_total) == (3, 0, 3)
    assert [starts(harness.aws, item) for item in items] == [1] * 3


def test_a_manifest_join_counts_each_member_once_across_chunks(harness: Harness) -> None:
    entries = [payload("m0"), payload("m1"), payload("m0"), payload("m2"), payload("m1")]
    url = manifest(harness, "manifests/dup.jsonl", entries)
    harness.send(join_body("dup", [], payloads_url=url))
    harness.drain()
    join, _, _ = harness.row("dup")
    assert (join.known_total, join.duplicates, join.chunks) == (3, 2, 3)
    for item in ("m0", "m1", "m2"):
        harness.finish("dup", item, PayloadState.SUCCEEDED)
    join, succeeded, failed = harness.row("dup")
    assert (join.workflow_state, succeeded, failed) == (PayloadState.SUCCEEDED, 3, 0)
    members, duplicates = harness.joins.members("dup")
    assert [m.payload_id for m in members] == [payload_id(i) for i in ("m0", "m1", "m2")]
    assert sorted(duplicates) == [payload_id("m0"), payload_id("m1")]


def test_counting_twice_counts_once_and_a_lost_decision_is_taken_on_redelivery(
    harness: Harness,
) -> None:
    harness.send(join_body("once", ["o0"]))
    member = payload_id("o0")
    membership = membership_id_for("once")
    harness.aws.dependencies.resolve(member, membership, Resolution(state=PayloadState.SUCCEEDED))
    row = harness.aws.dependencies.get_row(member, membership)
    assert isinstance(row, MembershipItem)
    resolution = row.resolution
    assert resolution is not None
    # the delivery that counted died before deciding
    assert harness.joins.count(row, resolution, retention_days=7)
    assert not harness.joins.count(row, resolution, retention_days=7)
    join, succeeded, _ = harness.row("once")
    assert (join.workflow_state, succeeded) == (PayloadState.PROCESSING, 1)
    # the stream redelivers the record: nothing is counted again, the join is decided
    harness.callback.handle(row)
    join, succeeded, _ = harness.row("once")
    assert (join.workflow_state, succeeded) == (PayloadState.SUCCEEDED, 1)


def test_an_all_of_join_fails_on_its_first_failure_before_the_rest_registers(
    harness: Harness,
) -> None:
    entries = [payload(f"f{i}") for i in range(6)]
    url = manifest(harness, "manifests/early.jsonl", entries)
    harness.send(join_body("early", [], payloads_url=url))
    harness.finish("early", "f0", PayloadState.FAILED)
    join, _, failed = harness.row("early")
    assert (join.workflow_state, join.error, failed) == (
        PayloadState.FAILED,
        DependencyError.QUORUM_UNREACHABLE,
        1,
    )
    assert join.known_total is None  # decided before n was known: correct for all-of
    harness.drain()  # the queued chunk finds the join decided and starts nothing
    assert [starts(harness.aws, f"f{i}") for i in range(2, 6)] == [0] * 4


def test_a_quorum_is_reached_early_but_failures_wait_for_n(harness: Harness) -> None:
    entries = [payload(f"q{i}") for i in range(5)]
    url = manifest(harness, "manifests/quorum.jsonl", entries)
    harness.send(join_body("quorum", [], quorum=4, payloads_url=url))
    # 2 of 5 failed: with n unknown, "more than n - k failed" cannot be decided yet
    harness.finish("quorum", "q0", PayloadState.FAILED)
    harness.finish("quorum", "q1", PayloadState.FAILED)
    join, _, failed = harness.row("quorum")
    assert (join.workflow_state, failed) == (PayloadState.PROCESSING, 2)
    # once the last chunk makes n = 5 known, 2 > 5 - 4 decides it
    harness.drain()
    join, _, _ = harness.row("quorum")
    assert (join.workflow_state, join.error, join.total) == (
        PayloadState.FAILED,
        DependencyError.QUORUM_UNREACHABLE,
        5,
    )


def test_a_success_quorum_is_decided_by_the_count_that_reaches_it(harness: Harness) -> None:
    entries = [payload(f"s{i}") for i in range(5)]
    url = manifest(harness, "manifests/first.jsonl", entries)
    harness.send(join_body("first", [], quorum=1, payloads_url=url))
    harness.finish("first", "s1", PayloadState.SUCCEEDED)
    join, _, _ = harness.row("first")
    assert (join.workflow_state, join.winner) == (PayloadState.SUCCEEDED, payload_id("s1"))


def test_a_bad_entry_in_a_later_chunk_fails_the_join_with_invalid_join(harness: Harness) -> None:
    entries = [payload("b0"), payload("b1"), {"process": "not a list"}]
    url = manifest(harness, "manifests/bad.jsonl", entries)
    harness.send(join_body("bad", [], payloads_url=url))
    harness.drain()
    join, _, _ = harness.row("bad")
    assert (join.workflow_state, join.error) == (PayloadState.FAILED, DependencyError.INVALID_JOIN)
    assert join.cause is not None
    assert f"{url}[2]" in join.cause


def test_a_bad_first_chunk_or_manifest_is_an_invalid_join_for_the_token(harness: Harness) -> None:
    url = manifest(harness, "manifests/bad-first.jsonl", [{"process": []}])
    for body in (
        join_body("bad-first", [], payloads_url=url),
        join_body("missing", [], payloads_url=f"s3://{BUCKET}/manifests/none.jsonl"),
    ):
        message = harness.flow.parse(json.dumps(body))
        with pytest.raises(InvalidMessageError) as refused:
            harness.flow.handle(message)
        assert refused.value.error_name == DependencyError.INVALID_JOIN
        assert refused.value.task_token == body["join"]["task_token"]
        assert harness.joins.get(body["join"]["join_id"]) is None


def test_a_quorum_over_the_distinct_members_of_a_manifest_is_an_invalid_join(
    harness: Harness,
) -> None:
    url = manifest(harness, "manifests/few.jsonl", [payload("x0"), payload("x0"), payload("x1")])
    harness.send(join_body("few", [], quorum=3, payloads_url=url))
    harness.drain()
    join, _, _ = harness.row("few")
    assert (join.workflow_state, join.error) == (PayloadState.FAILED, DependencyError.INVALID_JOIN)
    assert "quorum 3 is more than the 2 distinct payloads" in (join.cause or "")


def test_payloads_and_payloads_url_together_are_refused() -> None:
    body = join_body("both", ["a"])
    body["payloads_url"] = "s3://b/k"
    with pytest.raises(InvalidMessageError, match="not both"):
        read_message(json.dumps(body))
    chunk = read_message(
        json.dumps(
            {"join_chunk": {"join_id": "j", "index": 1, "offset": 9, "payloads_url": "s3://b/k"}}
        )
    )
    assert isinstance(chunk, JoinChunkMessage)
    assert isinstance(read_message(json.dumps(join_body("one", ["a"]))), JoinMessage)


# Thread interleavings vary from run to run; DEPTRACK_RACE_RUNS=40 repeats the race (one run in
# make test keeps it under its time budget).
@pytest.mark.parametrize("seed", range(int(os.environ.get("DEPTRACK_RACE_RUNS", "1"))))
def test_racing_counts_and_the_last_chunk_decide_the_join_exactly_once(
    harness: Harness, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    # GIVEN a manifest join whose members all finished before its last chunk registered
    items = [f"p{seed}-{i}" for i in range(6)]
    url = manifest(harness, f"manifests/race-{seed}.jsonl", [payload(i) for i in items])
    join_id = f"race-{seed}"
    harness.send(join_body(join_id, [], payloads_url=url))
    # (the join message sent both later chunks' messages itself: chunks of 2)
    chunks = harness.queued()
    assert [chunk["join_chunk"]["index"] for chunk in chunks] == [1, 2]
    harness.send(chunks[0], message_id="c1")
    assert harness.queued() == []
    last = chunks[1:]
    decided: list[bool] = []
    real = JoinStore.decide_join

    def counted_decide(self: JoinStore, *args: Any, **kwargs: Any) -> bool:
        result = real(self, *args, **kwargs)
        decided.append(result)
        return result

    monkeypatch.setattr(JoinStore, "decide_join", counted_decide)
    registered = items[:4]
    # WHEN every registered member's record arrives twice, concurrently, while the last
    # chunk registers (and replays nothing: its members have not run)
    barrier = threading.Barrier(len(registered) * 2 + 1)
    errors: list[BaseException] = []

    def count(item: str) -> None:
        try:
            barrier.wait()
            member, membership = payload_id(item), membership_id_for(join_id)
            harness.aws.dependencies.resolve(
                member, membership, Resolution(state=PayloadState.SUCCEEDED)
            )
            row = harness.aws.dependencies.get_row(member, membership)
            assert isinstance(row, MembershipItem)
            harness.callback.handle(row)
        except BaseException:  # noqa: BLE001 (reported below, with its traceback)
            errors.append(RuntimeError(traceback.format_exc()))

    def register() -> None:
        try:
            barrier.wait()
            harness.send(last[0], message_id="c2")
        except BaseException:  # noqa: BLE001 (reported below, with its traceback)
            errors.append(RuntimeError(traceback.format_exc()))

    threads = [threading.Thread(target=count, args=(i,)) for i in registered * 2]
    threads.append(threading.Thread(target=register))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    for item in items[4:]:
        harness.finish(join_id, item, PayloadState.SUCCEEDED)
    # THEN each member was counted once, and the join was decided once
    join, succeeded, failed = harness.row(join_id)
    assert (succeeded, failed, join.known_total) == (6, 0, 6)
    assert join.workflow_state is PayloadState.SUCCEEDED
    assert decided.count(True) == 1


def test_a_join_decided_before_its_chunk_is_recorded_still_names_its_members(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a join whose only chunk died after starting its members, before recording itself
    finish_chunk_dies_once(monkeypatch)
    body = join_body("named", ["n0", "n1"])
    with pytest.raises(RuntimeError):
        harness.send(body)
    # WHEN both members end (n = 2 is known from the message: the counts decide it)
    harness.finish("named", "n0", PayloadState.SUCCEEDED)
    harness.finish("named", "n1", PayloadState.SUCCEEDED)
    join, _, _ = harness.row("named")
    assert join.workflow_state is PayloadState.SUCCEEDED
    # THEN the summary lists them, before and after the redelivery
    for _ in range(2):
        summary = json.loads(harness.callback.joins.join_output(join))
        assert summary["succeeded"] == [payload_id("n0"), payload_id("n1")]
        assert summary["counts"] == {"succeeded": 2, "failed": 0, "pending": 0}
        harness.send(body)
