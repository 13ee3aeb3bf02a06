"""A decided join's results manifest: every member, one JSON line each, streamed to S3.

The join's rows are written here directly (a join row, chunk rows, membership rows), as
registration would, so that thousands of members take no workflow runs; members end
through the callback flow's own counting.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import moto.s3.models
import pytest

import dependency_tracker
from dependency_tracker.core.enums import PayloadState, utcnow
from dependency_tracker.joins import results as results_module
from dependency_tracker.joins.results import (
    JoinResults,
    MemberResult,
    read_results,
    results_key,
    stored_items,
)
from dependency_tracker.joins.rows import ChunkItem, JoinItem
from dependency_tracker.table.items import (
    JOIN_ROW_KEY,
    MembershipItem,
    Resolution,
    join_partition_for,
    membership_id_for,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

    from dependency_tracker.app import App
    from tests.conftest import Aws

BUCKET = "deptrack-payloads"
# moto's smallest part, lowered from S3's 5 MiB so that a few thousand lines make many parts.
TINY_PART = 4096


@pytest.fixture
def root(aws: Aws, monkeypatch: pytest.MonkeyPatch) -> App:
    monkeypatch.setattr(moto.s3.models, "S3_UPLOAD_PART_MIN_SIZE", 256)
    aws.s3.create_bucket(Bucket=BUCKET)
    return aws.app(aws.settings.model_copy(update={"payload_bucket": BUCKET}))


def put_join(
    aws: Aws, join_id: str, members: list[str], *, quorum: int | None, chunk: int = 100
) -> None:
    """A join of ``members`` as registration leaves it: every chunk recorded, none ended."""
    now = utcnow()
    rows: list[dict[str, Any]] = []
    chunks = [members[i : i + chunk] for i in range(0, len(members), chunk)]
    rows.append(
        JoinItem(
            payload_id=join_partition_for(join_id),
            waiter_id=JOIN_ROW_KEY,
            join_id=join_id,
            task_token=f"token-{join_id}",
            quorum=quorum,
            total=len(members),
            registered=len(members),
            chunks=len(chunks),
            registered_chunks=len(chunks),
            created_at=now,
            updated_at=now,
        ).to_item()
    )
    for index, names in enumerate(chunks):
        row = ChunkItem.of(join_id, index, names, [], now).model_copy(update={"recorded": True})
        rows.append(row.to_item())
        rows.extend(
            MembershipItem(
                payload_id=name,
                waiter_id=membership_id_for(join_id),
                join_id=join_id,
                chunk=index,
                created_at=now,
                updated_at=now,
            ).to_item()
            for name in names
        )
    table = aws.dependencies.table_name
    for i in range(0, len(rows), 25):
        batch = [{"PutRequest": {"Item": item}} for item in rows[i : i + 25]]
        aws.dynamodb.batch_write_item(RequestItems={table: batch})


def end(aws: Aws, root: App, join_id: str, member: str, resolution: Resolution) -> None:
    """``member`` ended: its membership row resolved and counted, as the stream delivers it."""
    assert aws.dependencies.resolve(member, membership_id_for(join_id), resolution)
    row = aws.dependencies.get_row(member, membership_id_for(join_id))
    assert isinstance(row, MembershipItem)
    assert row.resolution is not None
    root.counting.record(row, row.resolution)


def decided(aws: Aws, join_id: str) -> JoinItem:
    join = aws.joins.get(join_id)
    assert join is not None
    assert join.workflow_state.is_terminal
    return join


def lines(aws: Aws, join_id: str) -> list[dict[str, Any]]:
    body = aws.s3.get_object(Bucket=BUCKET, Key=results_key(join_id))["Body"].read()
    return [json.loads(line) for line in body.decode("utf-8").splitlines()]


SUCCESS = Resolution(
    state=PayloadState.SUCCEEDED,
    execution_arn="arn:aws:states:us-east-1:123456789012:execution:deptrack-pass:a",
    result_json=json.dumps(
        {
            "items": [{"id": "i1", "href": "s3://out/i1.json"}],
            "output": {
                "type": "FeatureCollection",
                "features": [
                    {"id": "i1", "links": [{"rel": "self", "href": "s3://out/i1.json"}]},
                    {"id": "i2", "assets": {"cog": {"href": "s3://out/i2.tif"}}},
                ],
            },
        }
    ),
)
FAILURE = Resolution(
    state=PayloadState.FAILED, execution_arn="arn:x:b", error="TaskFailed", cause="boom"
)


def test_a_decided_join_writes_every_member_and_names_the_manifest(aws: Aws, root: App) -> None:
    # GIVEN an either-or join of 3: one member failed, one succeeded (decided), one pending
    put_join(aws, "three", ["m-0", "m-1", "m-3"], quorum=1)
    end(aws, root, "three", "m-1", FAILURE)
    end(aws, root, "three", "m-0", SUCCESS)
    # AND a 2-of-3 join decided by a member whose result is stored by reference
    by_reference = '{"url": "s3://b/r.json", "bytes": 9000, "item_count": 3}'
    put_join(aws, "few", ["m-0", "m-1", "m-2"], quorum=2)
    end(aws, root, "few", "m-1", FAILURE)
    end(aws, root, "few", "m-0", SUCCESS)
    end(aws, root, "few", "m-2", Resolution(state=PayloadState.SUCCEEDED, result_json=by_reference))
    # WHEN the decided join's parent is answered
    summary = json.loads(root.join_notifier.join_output(decided(aws, "three")))
    # THEN the summary names the manifest, and it lists every member in order, pending as null
    url = f"s3://{BUCKET}/{results_key('three')}"
    assert summary["results_url"] == url
    found = lines(aws, "three")
    assert [line["payload_id"] for line in found] == ["m-0", "m-1", "m-3"]
    assert found[0] == {
        "payload_id": "m-0",
        "state": "SUCCEEDED",
        "execution_arn": SUCCESS.execution_arn,
        "items": ["s3://out/i1.json", "s3://out/i2.tif"],
        "output_url": None,
        "error": None,
        "cause": None,
    }
    assert (found[1]["state"], found[1]["error"], found[1]["cause"]) == (
        "FAILED",
        "TaskFailed",
        "boom",
    )
    assert found[2] == MemberResult(payload_id="m-3").model_dump(mode="json")
    # AND the public reader reads it back, line by line
    assert [r.payload_id for r in dependency_tracker.read_results(url, s3=aws.s3)] == [
        "m-0",
        "m-1",
        "m-3",
    ]
    # AND a result stored by reference names its url, no items
    summary = json.loads(root.join_notifier.join_output(decided(aws, "few")))
    by_ref = lines(aws, "few")[2]
    assert (by_ref["items"], by_ref["output_url"]) == (None, "s3://b/r.json")
    assert summary["results_url"].endswith(results_key("few"))


def test_a_redelivery_rewrites_the_same_object(aws: Aws, root: App) -> None:
    # GIVEN a decided join whose manifest was written
    put_join(aws, "again", ["a-0", "a-1"], quorum=1)
    end(aws, root, "again", "a-0", SUCCESS)
    first = json.loads(root.join_notifier.join_output(decided(aws, "again")))["results_url"]
    # WHEN the join row's record is delivered again (its parent not told yet)
    second = json.loads(root.join_notifier.join_output(decided(aws, "again")))["results_url"]
    # THEN the same key is written, and only it
    assert first == second
    keys = [o["Key"] for o in aws.s3.list_objects_v2(Bucket=BUCKET, Prefix="joins/")["Contents"]]
    assert keys == [results_key("again")]


def test_thousands_of_members_stream_in_parts_one_chunk_at_a_time(
    aws: Aws, root: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a decided join of 2,500 members (25 chunks) and a writer of 4 KiB parts
    members = [f"many-{i:05d}" for i in range(2500)]
    put_join(aws, "many", members, quorum=1)
    end(aws, root, "many", members[7], SUCCESS)
    writer = JoinResults(bucket=root.bucket, joins=aws.joins, part_bytes=TINY_PART)
    pages_read: list[int] = []
    parts: list[tuple[int, int]] = []  # (pages read when the part was sent, its bytes)
    real_pages = aws.joins.member_pages

    def counted_pages(store: Any, join_id: str) -> Iterator[Any]:
        for page in real_pages(join_id):
            pages_read.append(len(page))
            yield page

    real_add = results_module._Multipart.add

    def recorded_add(upload: Any, body: bytes) -> None:
        parts.append((len(pages_read), len(body)))
        real_add(upload, body)

    monkeypatch.setattr(type(aws.joins), "member_pages", counted_pages)
    monkeypatch.setattr(results_module._Multipart, "add", recorded_add)
    # WHEN its manifest is written
    url = writer.write("many")
    # THEN it is every member once, in order
    assert url is not None
    assert [r.payload_id for r in read_results(url, s3=aws.s3)] == members
    # AND it went up in many parts, each a part's worth (but the last), the first one sent
    # before the members of the later chunks were read: the writer never held every line
    assert pages_read == [100] * 25
    assert len(parts) > 10
    longest_line = max(len(MemberResult(payload_id=m).model_dump_json()) + 1 for m in members)
    assert all(TINY_PART <= size < TINY_PART + longest_line for _, size in parts[:-1])
    assert parts[0][0] < 25


def test_a_failed_upload_is_aborted(aws: Aws, root: App, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a decided join of 600 members and a part refused by S3 midway
    members = [f"abort-{i}" for i in range(600)]
    put_join(aws, "abort", members, quorum=1)
    end(aws, root, "abort", members[0], SUCCESS)
    writer = JoinResults(bucket=root.bucket, joins=aws.joins, part_bytes=TINY_PART)
    real_add = results_module._Multipart.add

    def refused(upload: Any, body: bytes) -> None:
        if upload._parts:
            raise RuntimeError("S3 refused the part")
        real_add(upload, body)

    monkeypatch.setattr(results_module._Multipart, "add", refused)
    # WHEN its manifest is written
    with pytest.raises(RuntimeError, match="refused"):
        writer.write("abort")
    # THEN the upload was aborted: no object, no upload left open
    assert aws.s3.list_multipart_uploads(Bucket=BUCKET).get("Uploads", []) == []
    assert aws.s3.list_objects_v2(Bucket=BUCKET).get("KeyCount") == 0


def test_the_last_late_member_rewrites_the_manifest_once_as_final(
    aws: Aws, root: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN an either-or join of 3, decided by its first member, its manifest written
    put_join(aws, "late", ["l-0", "l-1", "l-2"], quorum=1)
    end(aws, root, "late", "l-0", SUCCESS)
    root.join_notifier.join_output(decided(aws, "late"))
    writes: list[str] = []
    real_write = JoinResults.write

    def counted_write(writer: JoinResults, join_id: str) -> str | None:
        writes.append(join_id)
        return real_write(writer, join_id)

    monkeypatch.setattr(JoinResults, "write", counted_write)
    # WHEN a second member ends after the decision
    end(aws, root, "late", "l-1", FAILURE)
    # THEN the manifest is not rewritten for it
    assert writes == []
    assert lines(aws, "late")[1]["state"] is None
    # WHEN the last one ends (and its record is delivered again)
    end(aws, root, "late", "l-2", SUCCESS)
    row = aws.dependencies.get_row("l-2", membership_id_for("late"))
    assert isinstance(row, MembershipItem)
    assert row.resolution is not None
    root.counting.record(row, row.resolution)
    # THEN the manifest was rewritten once, with every member's end, and the row says so
    assert writes == ["late"]
    assert [line["state"] for line in lines(aws, "late")] == ["SUCCEEDED", "FAILED", "SUCCEEDED"]
    assert decided(aws, "late").results_final_at is not None


def test_odd_unicode_and_3000_character_ids_round_trip(aws: Aws, root: App) -> None:
    # GIVEN members with ids of odd characters and of 3,000 characters (past a key's bytes)
    members = ["ü/日本/line\u2028sep/\u00a0nbsp/🎉", 'quote"back\\slash\nnewline', "x" * 3000]
    put_join(aws, "odd ✓", members, quorum=1)
    end(aws, root, "odd ✓", members[2], SUCCESS)
    # WHEN the decided join's manifest is written
    url = json.loads(root.join_notifier.join_output(decided(aws, "odd ✓")))["results_url"]
    # THEN each id reads back whole
    found = list(read_results(url, s3=aws.s3))
    assert [r.payload_id for r in found] == members
    assert [r.state for r in found] == [None, None, PayloadState.SUCCEEDED]


def test_without_a_payload_bucket_there_is_no_manifest(aws: Aws) -> None:
    # GIVEN a stack with no payload bucket, and a decided join
    bare = aws.app(aws.settings.model_copy(update={"payload_bucket": None}))
    put_join(aws, "bare", ["b-0"], quorum=1)
    end(aws, bare, "bare", "b-0", SUCCESS)
    # WHEN its parent is answered THEN the summary names no manifest
    summary = json.loads(bare.join_notifier.join_output(decided(aws, "bare")))
    assert "results_url" not in summary
    assert bare.join_results is None


@pytest.mark.parametrize(
    ("stored", "expected"),
    [
        (None, (None, None)),
        ('{"items": [{"href": "h1"}, {"id": "no-href"}], "output": null}', (["h1"], None)),
        ('{"items": [{"href": "c1"}], "output_url": "s3://x/o.json"}', (["c1"], "s3://x/o.json")),
        ('{"items": [{"href": "c1"}], "truncated": true, "output_url": "u"}', (None, "u")),
        ('{"url": "s3://b/k.json", "bytes": 9000, "item_count": 2}', (None, "s3://b/k.json")),
        ("[1, 2]", (None, None)),
    ],
)
def test_the_items_rule(stored: str | None, expected: tuple[Any, Any]) -> None:
    # GIVEN a stored result WHEN its items are read THEN hrefs are complete or absent
    assert stored_items(stored) == expected
