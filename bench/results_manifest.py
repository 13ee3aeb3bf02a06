"""``python -m bench.results_manifest``: a decided join's results manifest, timed and measured.

Opt-in (not a section of ``python -m bench``). On moto, in this process: a decided join
of ``--members`` members (10,000 by default; a quarter succeeded with a stored result, a
quarter failed, the rest pending) has its manifest written by
:class:`~dependency_tracker.joins.results.JoinResults`, and the bench reports the write's
wall time and its peak Python memory (``tracemalloc``, a second write: tracing slows moto), twice:

* ``moto``: the whole write, moto included, which keeps the uploaded parts in this
  process (the object's own bytes are in the peak);
* ``writer``: the same write to an S3 client that counts the bytes and drops them, so
  the peak is the writer's and moto's DynamoDB reads' alone: what bounds the callback's memory.

Wall times are this machine's, on moto: they show the shape, not AWS's latency.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import tracemalloc
from typing import Any

import boto3
import moto.s3.models
from moto import mock_aws

from dependency_tracker.core.enums import PayloadState, utcnow
from dependency_tracker.joins.results import DEFAULT_PART_BYTES, MIN_PART_BYTES, JoinResults
from dependency_tracker.joins.rows import ChunkItem, JoinItem
from dependency_tracker.joins.store import JoinStore
from dependency_tracker.payloads.bucket import PayloadBucket
from dependency_tracker.table.items import JOIN_ROW_KEY, MembershipItem, join_partition_for
from dependency_tracker.table.items import membership_id_for as membership
from dependency_tracker.table.schema import create_tables

TABLE, BUCKET, JOIN = "bench-deps", "bench-payloads", "bench-join"
RESULT = json.dumps({"items": [{"id": "i", "href": "s3://out/items/i.json"}], "output": None})


class _Discarding:
    """An S3 client that takes the writer's calls, counts the bytes and keeps none."""

    def __init__(self) -> None:
        self.bytes = 0
        self.parts = 0

    def put_object(self, **call: Any) -> dict[str, Any]:
        self.bytes += len(call["Body"])
        self.parts += 1
        return {}

    def create_multipart_upload(self, **_: Any) -> dict[str, Any]:
        return {"UploadId": "u"}

    def upload_part(self, **call: Any) -> dict[str, Any]:
        return self.put_object(**call) | {"ETag": f'"{self.parts}"'}

    def complete_multipart_upload(self, **_: Any) -> dict[str, Any]:
        return {}

    def abort_multipart_upload(self, **_: Any) -> dict[str, Any]:
        return {}


def _rows(members: int) -> list[dict[str, Any]]:
    now = utcnow()
    names = [f"bench/workflow-results/item-{i:06d}" for i in range(members)]
    chunks = [names[i : i + 100] for i in range(0, members, 100)]
    rows = [
        JoinItem(
            payload_id=join_partition_for(JOIN),
            waiter_id=JOIN_ROW_KEY,
            join_id=JOIN,
            task_token=f"token-{JOIN}",
            quorum=1,
            total=members,
            registered=members,
            chunks=len(chunks),
            registered_chunks=len(chunks),
            workflow_state=PayloadState.SUCCEEDED,
            created_at=now,
            updated_at=now,
        ).to_item()
    ]
    for index, chunk in enumerate(chunks):
        rows.append(ChunkItem.of(JOIN, index, chunk, [], now).to_item())
        for i, name in enumerate(chunk):
            state = (PayloadState.SUCCEEDED, PayloadState.FAILED, None, None)[i % 4]
            ended: dict[str, Any] = {}
            if state is PayloadState.SUCCEEDED:
                ended = {
                    "execution_arn": f"arn:aws:states:::execution:x:{name}",
                    "result_json": RESULT,
                }
            elif state is PayloadState.FAILED:
                ended = {"error": "States.TaskFailed", "cause": "simulated failure " * 8}
            rows.append(
                MembershipItem(
                    payload_id=name,
                    waiter_id=membership(JOIN),
                    join_id=JOIN,
                    chunk=index,
                    workflow_state=state or PayloadState.PROCESSING,
                    created_at=now,
                    updated_at=now,
                    **ended,
                ).to_item()
            )
    return rows


def _measure(write: Any) -> tuple[float, int]:
    """Seconds of one call (untraced: tracing slows moto many times), then its traced peak."""
    started = time.perf_counter()
    write()
    seconds = time.perf_counter() - started
    tracemalloc.start()
    write()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return seconds, peak


def run(members: int, part_bytes: int) -> dict[str, Any]:
    """Write the manifest of a decided join of ``members``; the figures measured."""
    # Parts under S3's 5 MiB (--part-bytes, to see a multipart upload at this size) need
    # moto's minimum lowered; AWS refuses them.
    moto.s3.models.S3_UPLOAD_PART_MIN_SIZE = min(part_bytes, MIN_PART_BYTES)  # type: ignore[attr-defined]
    with mock_aws():
        session = boto3.Session(region_name="us-east-1")
        dynamodb, s3 = session.client("dynamodb"), session.client("s3")
        create_tables(dynamodb, state_table="bench-states", dependency_table=TABLE)
        s3.create_bucket(Bucket=BUCKET)
        rows = _rows(members)
        for i in range(0, len(rows), 25):
            batch = [{"PutRequest": {"Item": item}} for item in rows[i : i + 25]]
            dynamodb.batch_write_item(RequestItems={TABLE: batch})
        joins = JoinStore(dynamodb, TABLE)
        on_moto = JoinResults(bucket=PayloadBucket(s3, BUCKET), joins=joins, part_bytes=part_bytes)
        moto_s, moto_peak = _measure(lambda: on_moto.write(JOIN))
        listed = s3.list_objects_v2(Bucket=BUCKET, Prefix="joins/")["Contents"]
        size = listed[0]["Size"]
        discarding = _Discarding()
        writer = JoinResults(
            bucket=PayloadBucket(discarding, BUCKET),  # type: ignore[arg-type]
            joins=joins,
            part_bytes=part_bytes,
        )
        writer_s, writer_peak = _measure(lambda: writer.write(JOIN))
    return {
        "members": members,
        "part_bytes": part_bytes,
        "manifest_bytes": size,
        "parts": discarding.parts // 2,  # two equal writes: timed, then traced
        "moto": {"seconds": round(moto_s, 3), "peak_mib": round(moto_peak / 2**20, 2)},
        "writer": {"seconds": round(writer_s, 3), "peak_mib": round(writer_peak / 2**20, 2)},
    }


def main(argv: list[str] | None = None) -> int:
    """Run the bench and print its figures as JSON."""
    parser = argparse.ArgumentParser(prog="python -m bench.results_manifest", description=__doc__)
    parser.add_argument("--members", type=int, default=10_000)
    parser.add_argument("--part-bytes", type=int, default=DEFAULT_PART_BYTES)
    args = parser.parse_args(argv)
    json.dump(run(args.members, args.part_bytes), sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
