"""A join's first invocation sends every chunk's message itself: no chunk re-triggers another.

Lambda's recursive-loop detection stops a chain of the same function after 16
invocations; registration is therefore two hops (the join message, then its
chunks) whatever the number of chunks. Chunks of 2 (the registration harness).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest

from dependency_tracker.core.enums import DependencyError, PayloadState
from dependency_tracker.joins.chunks import ChunkRegistrar
from dependency_tracker.joins.registration_rows import ChunkRows
from tests.conftest import payload
from tests.unit.flows.test_join_registration import (
    Harness,
    join_body,
    manifest,
    starts,
)

if TYPE_CHECKING:
    from tests.conftest import Aws


@pytest.fixture
def harness(aws: Aws, workflows: dict[str, str]) -> Harness:
    return Harness(aws)


def test_every_chunk_is_sent_by_the_join_message_and_none_sends_another(harness: Harness) -> None:
    # GIVEN a join of 7 inline members: 4 chunks of 2
    items = [f"f{i}" for i in range(7)]
    harness.send(join_body("fan", items))
    # THEN the first invocation queued chunks 1, 2 and 3, each knowing there are 4
    chunks = harness.queued()
    assert [c["join_chunk"]["index"] for c in chunks] == [1, 2, 3]
    assert {c["join_chunk"]["chunks"] for c in chunks} == {4}
    # WHEN they arrive last first, THEN no chunk queues anything
    for chunk in reversed(chunks):
        harness.send(chunk, message_id=f"chunk-{chunk['join_chunk']['index']}")
        assert harness.queued() == []
    join, _, _ = harness.row("fan")
    assert (join.known_total, join.registered_chunks) == (7, 4)
    assert all(starts(harness.aws, item) == 1 for item in items)
    for item in items:
        harness.finish("fan", item, PayloadState.SUCCEEDED)
    join, succeeded, _ = harness.row("fan")
    assert (join.workflow_state, succeeded) == (PayloadState.SUCCEEDED, 7)


def test_n_is_known_only_when_the_last_chunk_to_record_itself_has(harness: Harness) -> None:
    # GIVEN a manifest join of 6 (n not given) whose last chunk registers before the middle one
    items = [f"o{i}" for i in range(6)]
    url = manifest(harness, "manifests/order.jsonl", [payload(i) for i in items])
    harness.send(join_body("order", [], payloads_url=url))
    first, last = harness.queued()
    harness.send(last, message_id="chunk-2")
    join, _, _ = harness.row("order")
    # THEN the number of chunks is known, n is not: its registered members succeeding decide nothing
    assert (join.chunks, join.known_total) == (3, None)
    for item in items[:2] + items[4:]:
        harness.finish("order", item, PayloadState.SUCCEEDED)
    join, succeeded, _ = harness.row("order")
    assert (join.workflow_state, succeeded) == (PayloadState.PROCESSING, 4)
    # WHEN the middle chunk registers and its members succeed, THEN the join is decided
    harness.send(first, message_id="chunk-1")
    assert harness.row("order")[0].known_total == 6
    for item in items[2:4]:
        harness.finish("order", item, PayloadState.SUCCEEDED)
    assert harness.row("order")[0].workflow_state is PayloadState.SUCCEEDED


def test_a_malformed_later_entry_fails_the_join_before_any_member_runs(harness: Harness) -> None:
    lines = [json.dumps(payload(f"m{i}")) for i in range(5)] + ['{"id": "cut']
    harness.aws.s3.put_object(
        Bucket="deptrack-payloads", Key="manifests/cut.jsonl", Body="\n".join(lines).encode()
    )
    harness.send(join_body("cut", [], payloads_url="s3://deptrack-payloads/manifests/cut.jsonl"))
    assert harness.queued() == []
    join, _, _ = harness.row("cut")
    assert (join.workflow_state, join.error) == (PayloadState.FAILED, DependencyError.INVALID_JOIN)
    assert join.cause is not None
    assert "is not JSON" in join.cause
    assert all(starts(harness.aws, f"m{i}") == 0 for i in range(5))


def test_a_chunk_of_the_chained_registration_still_sends_the_next(harness: Harness) -> None:
    # GIVEN a chunk message as the chained registration sent them (no "chunks")
    items = [f"c{i}" for i in range(6)]
    harness.send(join_body("chained", items))
    first, _ = harness.queued()
    del first["join_chunk"]["chunks"]
    # WHEN it is handled, THEN it sends the next chunk's message, also chained
    harness.send(first, message_id="chunk-1")
    (following,) = harness.queued()
    assert following["join_chunk"]["index"] == 2
    assert "chunks" not in following["join_chunk"]
    harness.send(following, message_id="chunk-2")
    assert harness.queued() == []
    assert harness.row("chained")[0].known_total == 6


def test_a_redelivered_last_chunk_takes_the_decision_its_first_delivery_lost(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a join whose members all ended before its last chunk was recorded, and whose last
    # chunk's delivery died between recording itself and checking the decision
    items = [f"d{i}" for i in range(4)]
    url = manifest(harness, "manifests/lost.jsonl", [payload(i) for i in items])
    harness.send(join_body("lost", [], payloads_url=url))
    (chunk,) = harness.queued()
    for item in items[:2]:
        harness.finish("lost", item, PayloadState.SUCCEEDED)
    real_finish = ChunkRows.finish_chunk

    def members_end_first(self: ChunkRows, *args: Any, **kwargs: Any) -> bool:
        for item in items[2:]:  # counted while n is unknown: they decide nothing
            harness.finish("lost", item, PayloadState.SUCCEEDED)
        return real_finish(self, *args, **kwargs)

    def dies(self: object, join_id: str) -> None:
        raise RuntimeError("the Lambda died before checking the decision")

    with monkeypatch.context() as patch:
        patch.setattr(ChunkRows, "finish_chunk", members_end_first)
        patch.setattr(ChunkRegistrar, "check_decision", dies)
        with pytest.raises(RuntimeError):
            harness.send(chunk, message_id="chunk-1")
    join, succeeded, _ = harness.row("lost")
    assert (join.workflow_state, join.known_total, succeeded) == (PayloadState.PROCESSING, 4, 4)
    # WHEN SQS redelivers it, THEN the recorded chunk checks the decision again
    harness.send(chunk, message_id="chunk-1")
    assert harness.row("lost")[0].workflow_state is PayloadState.SUCCEEDED
