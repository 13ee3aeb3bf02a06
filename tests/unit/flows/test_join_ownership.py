"""A join_id belongs to the first token that sends it, and a join reads one version of its list.

Chunks of two members (the registration tests' harness) make every join here
span several chunks, so a second parent's message or an overwritten manifest
lands between the owner's chunks, where it used to be read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from dependency_tracker.core.enums import DependencyError, PayloadState
from dependency_tracker.core.errors import InvalidMessageError
from dependency_tracker.joins.manifest import manifest_text
from dependency_tracker.joins.registration_rows import ChunkRows
from dependency_tracker.table.items import membership_id_for
from tests.conftest import payload, payload_id
from tests.unit.flows.test_join_registration import (
    BUCKET,
    Harness,
    finish_chunk_dies_once,
    join_body,
    manifest,
    starts,
)

if TYPE_CHECKING:
    from tests.conftest import Aws

pytestmark = pytest.mark.usefixtures("workflows")


@pytest.fixture
def harness(aws: Aws) -> Harness:
    return Harness(aws)


def intruder(body: dict[str, object], items: list[str] | None = None) -> dict[str, object]:
    """The same join_id from another parent (another token), with its own members."""
    spec = dict(body["join"])  # type: ignore[call-overload]
    spec["task_token"] = "token-of-another-parent"
    other = {"join": spec}
    if items is not None:
        other["payloads"] = [payload(item) for item in items]
    else:
        other.update({k: v for k, v in body.items() if k != "join"})
    return other


def summary_ids(harness: Harness, join_id: str) -> set[str]:
    members, _ = harness.joins.members(join_id)
    return {member.payload_id for member in members}


def test_a_reused_join_id_is_refused_and_changes_nothing_of_the_owners_join(
    harness: Harness,
) -> None:
    own = [f"a{i}" for i in range(5)]
    theirs = [f"b{i}" for i in range(5)]  # names as long as the owner's: offsets line up
    body = join_body("x", own)
    harness.send(body)
    with pytest.raises(InvalidMessageError) as refused:
        harness.send(intruder(body, theirs), message_id="m-intruder")
    assert refused.value.error_name == DependencyError.INVALID_JOIN
    assert refused.value.task_token == "token-of-another-parent"
    assert "already used by another task token" in refused.value.reason
    harness.drain()
    harness.send(body)  # a redelivery of the owner's message is still the owner's
    join, _, _ = harness.row("x")
    assert (join.task_token, join.registered, join.known_total) == ("token-x", 5, 5)
    assert summary_ids(harness, "x") == {payload_id(item) for item in own}
    assert [starts(harness.aws, item) for item in own] == [1] * 5
    assert [starts(harness.aws, item) for item in theirs] == [0] * 5
    for item in own:
        harness.finish("x", item, PayloadState.SUCCEEDED)
    join, succeeded, failed = harness.row("x")
    assert (join.workflow_state, succeeded, failed) == (PayloadState.SUCCEEDED, 5, 0)


def test_a_reused_join_id_over_the_owners_manifest_is_refused_too(harness: Harness) -> None:
    url = manifest(harness, "manifests/owned.jsonl", [payload(f"o{i}") for i in range(5)])
    body = join_body("owned", [], payloads_url=url)
    harness.send(body)
    with pytest.raises(InvalidMessageError, match="already used by another task token"):
        harness.send(intruder(body), message_id="m-intruder")
    harness.drain()
    join, _, _ = harness.row("owned")
    assert (join.task_token, join.known_total) == ("token-owned", 5)


def test_a_manifest_overwritten_while_its_join_registers_fails_the_join(harness: Harness) -> None:
    key = "manifests/latest.jsonl"
    url = manifest(harness, key, [payload(f"old{i}") for i in range(5)])
    harness.send(join_body("latest", [], payloads_url=url))
    manifest(harness, key, [payload(f"new{i}") for i in range(5)])
    harness.drain()
    join, _, _ = harness.row("latest")
    assert (join.workflow_state, join.error) == (PayloadState.FAILED, DependencyError.INVALID_JOIN)
    assert join.cause is not None
    assert f"manifest {url} changed" in join.cause
    # The first chunk's members were registered from the version read; none of the new list ran.
    assert [starts(harness.aws, f"old{i}") for i in range(2)] == [1, 1]
    assert [starts(harness.aws, f"new{i}") for i in range(5)] == [0] * 5
    assert summary_ids(harness, "latest") <= {payload_id(f"old{i}") for i in range(5)}


def test_a_redelivered_join_message_that_reads_a_changed_manifest_fails_the_join(
    harness: Harness,
) -> None:
    key = "manifests/again.jsonl"
    url = manifest(harness, key, [payload(f"p{i}") for i in range(5)])
    body = join_body("again", [], payloads_url=url)
    harness.send(body)
    manifest(harness, key, [payload(f"q{i}") for i in range(5)])
    harness.send(body)  # SQS delivers the join message again
    join, _, _ = harness.row("again")
    assert (join.workflow_state, join.error) == (PayloadState.FAILED, DependencyError.INVALID_JOIN)
    assert "changed while the join was registering" in (join.cause or "")
    assert [starts(harness.aws, f"q{i}") for i in range(5)] == [0] * 5


def test_a_manifest_rewritten_with_the_same_bytes_is_the_same_version(harness: Harness) -> None:
    key = "manifests/same.jsonl"
    entries = [payload(f"s{i}") for i in range(5)]
    url = manifest(harness, key, entries)
    harness.send(join_body("same", [], payloads_url=url))
    manifest(harness, key, entries)
    harness.drain()
    join, _, _ = harness.row("same")
    assert (join.workflow_state, join.known_total) == (PayloadState.PROCESSING, 5)


def test_a_versioned_manifest_is_read_at_the_version_the_join_began_with(
    harness: Harness,
) -> None:
    s3 = harness.aws.s3
    s3.create_bucket(Bucket="versioned-manifests")
    s3.put_bucket_versioning(
        Bucket="versioned-manifests", VersioningConfiguration={"Status": "Enabled"}
    )
    key = "latest.jsonl"

    def put(prefix: str) -> None:
        text = manifest_text([payload(f"{prefix}{i}") for i in range(5)])
        s3.put_object(Bucket="versioned-manifests", Key=key, Body=text.encode())

    put("v1-")
    harness.send(join_body("pinned", [], payloads_url=f"s3://versioned-manifests/{key}"))
    put("v2-")
    harness.drain()
    join, _, _ = harness.row("pinned")
    assert (join.workflow_state, join.known_total) == (PayloadState.PROCESSING, 5)
    assert join.source_version is not None
    assert summary_ids(harness, "pinned") == {payload_id(f"v1-{i}") for i in range(5)}


def test_the_inline_list_is_written_once_under_its_owners_key(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    finish_chunk_dies_once(monkeypatch)
    body = join_body("once", [f"w{i}" for i in range(5)])
    with pytest.raises(RuntimeError):
        harness.send(body)  # wrote the list, queued chunks 1 and 2, died before recording chunk 0
    harness.send(body)  # SQS redelivers: it finds its own object, and the ETag handed out holds
    chunks = harness.queued()
    listed = harness.aws.s3.list_objects_v2(Bucket=BUCKET, Prefix="joins/")["Contents"]
    assert len(listed) == 1
    etag = harness.aws.s3.head_object(Bucket=BUCKET, Key=listed[0]["Key"])["ETag"]
    assert [chunk["join_chunk"]["etag"] for chunk in chunks] == [etag] * 4
    assert sorted(chunk["join_chunk"]["index"] for chunk in chunks) == [1, 1, 2, 2]
    for chunk in chunks:
        harness.send(chunk, message_id=f"chunk-{chunk['join_chunk']['index']}")
    harness.drain()
    join, _, _ = harness.row("once")
    assert (join.registered, join.workflow_state) == (5, PayloadState.PROCESSING)


def test_a_begun_chunk_whose_manifest_changed_still_answers_its_written_rows(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chunk that wrote membership rows and died keeps its promise to read their states."""
    harness.aws.finished_payload(payload("e2"), PayloadState.FAILED)  # ended before the join
    key = "manifests/begun.jsonl"
    url = manifest(harness, key, [payload(f"e{i}") for i in range(4)])
    harness.send(join_body("begun", [], payloads_url=url))
    real = ChunkRows.register_members
    calls = {"n": 0}

    def dies_after_writing(self: ChunkRows, rows: Any) -> Any:
        found = real(self, rows)
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("the Lambda died after writing the membership rows")
        return found

    monkeypatch.setattr(ChunkRows, "register_members", dies_after_writing)
    (chunk,) = harness.queued()
    with pytest.raises(RuntimeError):
        harness.send(chunk, message_id="chunk-1")
    manifest(harness, key, [payload(f"other{i}") for i in range(4)])
    harness.send(chunk, message_id="chunk-1")  # SQS redelivers; the list has changed
    join, _, _ = harness.row("begun")
    assert (join.workflow_state, join.error) == (PayloadState.FAILED, DependencyError.INVALID_JOIN)
    row = harness.aws.dependencies.get_row(payload_id("e2"), membership_id_for("begun"))
    assert row is not None
    assert row.workflow_state is PayloadState.FAILED
