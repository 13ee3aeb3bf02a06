"""A join of many chunks under Lambda's recursive-loop detection (the platform model).

Chunks of one member make a 24-member join 24 chunks. Registered as the tracker
does it, the join message's invocation sends every chunk's message itself:
the join succeeds and loop detection stops nothing. Registered as chunks used to
be (each chunk sending the next: the product's path for a ``join_chunk``
message without ``chunks``), the chain is stopped at the process function's
17th invocation, and its record is taken to the DLQ: the parent would wait
to its timeout. On AWS that is about 1,600 members at the default chunk size.
"""

from __future__ import annotations

import io
import json
from typing import TYPE_CHECKING, Any

import pytest

from dependency_tracker.core.settings import ENV_JOIN_CHUNK_SIZE
from dependency_tracker.joins.fan_out import ChunkFanOut
from dependency_tracker.joins.manifest import manifest_text
from dependency_tracker_local import LocalStack
from tests.conftest import wait_until
from tests.e2e.conftest import dependency, finished

if TYPE_CHECKING:
    from collections.abc import Iterator

    from dependency_tracker.joins.member_list import Position
    from dependency_tracker.joins.rows import JoinItem

MEMBERS = 24
# The first process invocation Lambda stops in one chain (16 run).
STOPPED_AT = 17


@pytest.fixture(scope="module")
def stack() -> Iterator[LocalStack]:
    patch = pytest.MonkeyPatch()
    patch.setenv(ENV_JOIN_CHUNK_SIZE, "1")
    try:
        with LocalStack(prefix="deptrack", sink=io.StringIO()) as running:
            assert running.platform is not None, "the platform model is on by default"
            yield running
    finally:
        patch.undo()


def start_join(stack: LocalStack, name: str) -> str:
    s3 = stack.client("s3")
    bucket = stack.outputs["PayloadBucketName"]
    entries = [dependency(f"{name}-{index:02d}") for index in range(MEMBERS)]
    key = f"tests/{name}/manifest.jsonl"
    s3.put_object(Bucket=bucket, Key=key, Body=manifest_text(entries).encode())
    return str(
        stack.client("stepfunctions").start_execution(
            stateMachineArn=stack.outputs["StateMachines"]["wait-for-join"],
            name=name,
            input=json.dumps({"dependencies_url": f"s3://{bucket}/{key}", "timeout_seconds": 120}),
        )["executionArn"]
    )


def dead_letters(stack: LocalStack) -> list[dict[str, Any]]:
    sqs = stack.client("sqs")
    messages = sqs.receive_message(
        QueueUrl=stack.outputs["ProcessDlqUrl"], MaxNumberOfMessages=10
    ).get("Messages", [])
    return [json.loads(message["Body"]) for message in messages]


def test_a_fanned_out_join_of_24_chunks_is_never_stopped(stack: LocalStack) -> None:
    parent = start_join(stack, "fanned")
    described = finished(stack, parent, timeout=240)
    assert described["status"] == "SUCCEEDED", (described.get("error"), described.get("cause"))
    summary = json.loads(described["output"])["join"]
    assert summary["counts"] == {"succeeded": MEMBERS, "failed": 0, "pending": 0}
    assert stack.platform is not None
    assert stack.platform.stopped == []


def test_a_chained_registration_is_stopped_at_the_17th_invocation(
    stack: LocalStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN the join message's invocation sending only chunk 1, as a chained message (no
    # "chunks"): every chunk then sends the next, the registration of earlier releases
    def chained(self: ChunkFanOut, join: JoinItem, rest: Position) -> list[Position]:
        return [rest]

    real_send = ChunkFanOut.send_chunks

    def send(
        self: ChunkFanOut,
        join: JoinItem,
        first: int,
        starts: list[Position],
        *,
        chunks: int | None,
    ) -> None:
        real_send(self, join, first, starts, chunks=None)

    monkeypatch.setattr(ChunkFanOut, "chunk_starts", chained)
    monkeypatch.setattr(ChunkFanOut, "send_chunks", send)
    model = stack.platform
    assert model is not None
    before = len(model.stopped)
    # WHEN a 24-chunk join registers that way
    start_join(stack, "chained")
    # THEN loop detection stops the chain at the process function's 17th invocation: the
    # join message's hand-off to the join queue, its registration there, then chunks 1 to 14
    # ran; chunk 15's record goes to the DLQ
    stopped = wait_until(lambda: model.stopped[before:] or None, timeout=120)
    assert {(record.function, record.invocation) for record in stopped} == {("process", STOPPED_AT)}
    (letter,) = wait_until(lambda: dead_letters(stack) or None, timeout=120)
    assert letter["join_chunk"]["index"] == STOPPED_AT - 2
    assert "chunks" not in letter["join_chunk"]
