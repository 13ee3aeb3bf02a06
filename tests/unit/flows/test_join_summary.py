"""A decided join's summary: its counts and its lists come from one read, so they agree.

Members keep ending after their join is decided; whatever ends while the
summary is read, each count is the length of its list, and the lists hold every
member named so far once.
"""

from __future__ import annotations

import json
import os
import random
import threading
import traceback
from typing import TYPE_CHECKING, Any

import pytest

from dependency_tracker.core.enums import PayloadState, utcnow
from dependency_tracker.joins.counting import JoinCounting
from dependency_tracker.joins.manifest import manifest_text
from dependency_tracker.joins.notify import JoinNotifier
from dependency_tracker.joins.registration_rows import ChunkRows, Registration
from dependency_tracker.joins.rows import ChunkItem, JoinItem
from dependency_tracker.joins.store import JoinStore
from dependency_tracker.joins.summary import read_summary
from dependency_tracker.table.items import (
    JOIN_ROW_KEY,
    MembershipItem,
    Resolution,
    join_partition_for,
    membership_id_for,
)
from dependency_tracker.table.keys import partition_key
from tests.conftest import payload, payload_id
from tests.unit.flows.test_join_registration import BUCKET
from tests.unit.flows.test_join_registration import Harness as RegistrationHarness

if TYPE_CHECKING:
    from tests.conftest import Aws

# Racing runs, one join each; DEPTRACK_RACE_RUNS=10 runs ten times as many.
RACE_SEEDS = range(6 * int(os.environ.get("DEPTRACK_RACE_RUNS", "1")))


class Harness(RegistrationHarness):
    """The registration tests' harness (chunks of two), recording every join output.

    ``summaries`` collects every join output the callback flow builds. A decided
    join's output is built at once (unless ``deliver`` is off), by the thread
    that decided it, as the callback flow does when the stream delivers the row,
    while other members are still being counted. It is not sent: the tokens are
    made up, and moto's ``SendTask*`` can trip over its own executions ending on
    other threads.
    """

    def __init__(self, aws: Aws, monkeypatch: pytest.MonkeyPatch) -> None:
        super().__init__(aws)
        self.summaries: list[dict[str, Any]] = []
        self.decided: list[JoinItem] = []
        self.deliver = True
        real_output = JoinNotifier.join_output
        real_decide = JoinStore.decide_join

        def recorded_output(flow: JoinNotifier, join: JoinItem) -> str:
            text = real_output(flow, join)
            self.summaries.append(json.loads(text))
            return text

        def decide_and_deliver(store: JoinStore, join_id: str, *a: Any, **k: Any) -> bool:
            decided = real_decide(store, join_id, *a, **k)
            if decided:
                row = store.get(join_id)
                assert row is not None
                self.decided.append(row)
                if self.deliver:
                    self.callback.joins.join_output(row)
            return decided

        monkeypatch.setattr(JoinNotifier, "join_output", recorded_output)
        monkeypatch.setattr(JoinStore, "decide_join", decide_and_deliver)

    def finish(self, join_id: str, item: str, state: PayloadState) -> bool:  # type: ignore[override]
        """The member ended: resolve its membership row and deliver it; False if unregistered."""
        member, membership = payload_id(item), membership_id_for(join_id)
        if not self.aws.dependencies.resolve(member, membership, Resolution(state=state)):
            return False
        row = self.aws.dependencies.get_row(member, membership)
        assert isinstance(row, MembershipItem)
        self.callback.handle(row)
        return True


@pytest.fixture
def harness(aws: Aws, workflows: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Harness:
    return Harness(aws, monkeypatch)


def join_body(
    join_id: str, items: list[str], quorum: int | None, *, manifest_url: str | None = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {"task_token": f"token-{join_id}", "join_id": join_id}
    if quorum is not None:
        spec["quorum"] = quorum
    if manifest_url is not None:
        return {"join": spec, "payloads_url": manifest_url}
    return {"join": spec, "payloads": [payload(item) for item in items]}


def manifest(harness: Harness, key: str, items: list[str]) -> str:
    text = manifest_text([payload(item) for item in items])
    harness.aws.s3.put_object(Bucket=BUCKET, Key=key, Body=text.encode())
    return f"s3://{BUCKET}/{key}"


def assert_agrees(summary: dict[str, Any]) -> None:
    """Each count is its list's length; with the members never registered, they make n."""
    counts = summary["counts"]
    lists = {name: len(summary[name]) for name in ("succeeded", "failed", "pending")}
    assert lists == counts, summary
    assert sum(counts.values()) + summary.get("unregistered", 0) == summary["total"], summary
    if summary["quorum"] == 1 and "winner" in summary and summary["winner"] is not None:
        assert summary["winner"] in summary["succeeded"], summary


def test_a_member_ending_while_the_summary_is_read_is_in_its_counts_and_its_lists(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a 2-of-4 join whose first two members succeeded: decided, its parent not told yet
    items = ["a0", "a1", "a2", "a3"]
    harness.send(join_body("read", items, quorum=2))
    harness.drain()
    harness.deliver = False
    harness.finish("read", "a0", PayloadState.SUCCEEDED)
    harness.finish("read", "a1", PayloadState.SUCCEEDED)
    (join,) = harness.decided
    # WHEN a third member succeeds and is counted as the summary's member rows are read,
    # and a fourth fails but is not counted yet
    real_members = JoinStore.members

    def members_after_another_end(store: JoinStore, join_id: str) -> Any:
        harness.finish("read", "a2", PayloadState.SUCCEEDED)
        harness.aws.dependencies.resolve(
            payload_id("a3"), membership_id_for("read"), Resolution(state=PayloadState.FAILED)
        )
        return real_members(store, join_id)

    monkeypatch.setattr(JoinStore, "members", members_after_another_end)
    harness.callback.joins.join_output(join)
    # THEN the summary counts what it lists
    (summary,) = harness.summaries
    assert_agrees(summary)
    assert summary["counts"] == {"succeeded": 3, "failed": 1, "pending": 0}
    assert summary["succeeded"] == [payload_id(item) for item in items[:3]]
    assert [failed["payload_id"] for failed in summary["failed"]] == [payload_id("a3")]


def test_an_early_decision_counts_the_members_named_so_far(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a manifest join of 6 (n not known until its last chunk) whose second chunk
    # started its members and died before recording itself
    items = [f"e{i}" for i in range(6)]
    url = manifest(harness, "manifests/early.jsonl", items)
    harness.send(join_body("early", [], quorum=1, manifest_url=url))
    real_finish = ChunkRows.finish_chunk

    def dies(store: ChunkRows, chunk: ChunkItem, **kwargs: Any) -> bool:
        if chunk.index == 1:
            raise RuntimeError("the Lambda died after starting the chunk's members")
        return real_finish(store, chunk, **kwargs)

    monkeypatch.setattr(ChunkRows, "finish_chunk", dies)
    # (the join message sent chunk 1's and chunk 2's messages; chunk 2 is never delivered here)
    (chunk,) = [c for c in harness.queued() if c["join_chunk"]["index"] == 1]
    with pytest.raises(RuntimeError):
        harness.send(chunk, message_id="chunk-1")
    # WHEN a member of the first chunk succeeds: an either-or join, decided at once
    harness.finish("early", "e0", PayloadState.SUCCEEDED)
    # THEN the summary names the four members registered or being registered, each once
    (summary,) = harness.summaries
    assert_agrees(summary)
    assert (summary["total"], summary["winner"]) == (4, payload_id("e0"))
    assert summary["pending"] == [payload_id(item) for item in items[1:4]]


def test_members_a_join_decided_early_never_registered_are_counted_apart(
    harness: Harness,
) -> None:
    # GIVEN an inline either-or join of 6 (n known at once) whose first chunk of 2 registered
    items = [f"u{i}" for i in range(6)]
    harness.send(join_body("unreg", items, quorum=1))
    # WHEN one of them succeeds: decided, it begins no further chunk
    harness.finish("unreg", "u1", PayloadState.SUCCEEDED)
    harness.drain()
    # THEN the summary lists the two it registered, and counts the four it never did apart
    (summary,) = harness.summaries
    assert_agrees(summary)
    assert (summary["total"], summary["unregistered"]) == (6, 4)
    assert summary["counts"] == {"succeeded": 1, "failed": 0, "pending": 1}
    assert (summary["succeeded"], summary["pending"]) == ([payload_id("u1")], [payload_id("u0")])


def test_the_winner_is_named_as_the_lists_name_it(aws: Aws) -> None:
    # GIVEN an either-or join whose winner's id is longer than a key (its row keeps the
    # key form), decided by counting it
    long_id = "c/workflow-w/" + "x" * 3_000
    members = [long_id, "short"]
    now = utcnow()
    joins = JoinStore(aws.dynamodb, aws.dependencies.table_name)
    chunk_rows = aws.chunk_rows
    assert joins.create(
        JoinItem(
            payload_id=join_partition_for("w"),
            waiter_id=JOIN_ROW_KEY,
            join_id="w",
            task_token="tok",
            quorum=1,
            total=2,
            created_at=now,
            updated_at=now,
        )
    )
    rows = [
        MembershipItem(
            payload_id=member,
            waiter_id=membership_id_for("w"),
            join_id="w",
            chunk=0,
            created_at=now,
            updated_at=now,
        )
        for member in members
    ]
    assert chunk_rows.register_members(rows) == [Registration.NEW] * 2
    assert chunk_rows.finish_chunk(ChunkItem.of("w", 0, members, [], now), chunks=1)
    won = Resolution(state=PayloadState.SUCCEEDED)
    assert aws.dependencies.resolve(long_id, membership_id_for("w"), won)
    counting = JoinCounting(joins=joins, retention_days=1)
    assert counting.record(rows[0], won)
    join = aws.joins.get("w")
    assert join is not None
    assert join.winner == partition_key(long_id) != long_id
    # THEN the summary's winner is the id its succeeded list holds
    summary = read_summary(joins, join)
    assert (summary.winner, summary.succeeded) == (long_id, [long_id])


def end_at_once(harness: Harness, join_id: str, ends: dict[str, PayloadState]) -> None:
    """Every member ends as ``ends`` says, each on its own thread, while later chunks register.

    A member of a chunk not registered yet ends once it is (or never, if the
    decided join begins no further chunk).
    """
    barrier = threading.Barrier(len(ends) + 1)
    registered = threading.Event()
    errors: list[str] = []

    def end(item: str) -> None:
        try:
            barrier.wait()
            while True:
                last_try = registered.is_set()
                if harness.finish(join_id, item, ends[item]) or last_try:
                    break
                registered.wait(0.002)
        except BaseException:  # noqa: BLE001 (reported below, with its traceback)
            errors.append(traceback.format_exc())

    def register() -> None:
        try:
            barrier.wait()
            harness.drain()
        except BaseException:  # noqa: BLE001 (reported below, with its traceback)
            errors.append(traceback.format_exc())
        finally:
            registered.set()

    threads = [threading.Thread(target=end, args=(item,)) for item in ends]
    threads.append(threading.Thread(target=register))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads)
    assert errors == []


def race(harness: Harness, seed: int) -> None:
    """One join of 4..8 members that all end at once; checks the summary it was told.

    Inline (n known) or from a manifest read in chunks of 2 (n known only at its
    last chunk), with a quorum that may be reached before every member ended or
    registered.
    """
    rng = random.Random(seed)
    n = rng.randint(4, 8)
    quorum = rng.choice([None, 1, 2, 2, 3])
    items = [f"r{seed}-{i}" for i in range(n)]
    outcomes = [PayloadState.SUCCEEDED] * 3 + [PayloadState.FAILED]
    ends = {item: rng.choice(outcomes) for item in items}
    join_id = f"race-{seed}"
    from_manifest = rng.random() < 0.5
    url = manifest(harness, f"manifests/{join_id}.jsonl", items) if from_manifest else None
    harness.summaries.clear()
    harness.send(join_body(join_id, items, quorum, manifest_url=url))
    end_at_once(harness, join_id, ends)
    # Told once, with a summary whose counts are its lists' lengths, agreeing with the decision.
    (summary,) = harness.summaries
    assert_agrees(summary)
    join = harness.aws.joins.get(join_id)
    assert join is not None
    if not from_manifest:
        assert summary["total"] == n
    if join.workflow_state is PayloadState.SUCCEEDED:
        assert summary["counts"]["succeeded"] >= summary["quorum"]
    else:
        assert summary["counts"]["failed"] >= 1


def test_racing_members_never_make_a_summary_disagree_with_itself(harness: Harness) -> None:
    # Thread interleavings vary from run to run: each seed is a different join and race.
    for seed in RACE_SEEDS:
        race(harness, seed)
