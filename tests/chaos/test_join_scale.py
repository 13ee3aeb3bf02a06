"""Issue 14's "done when": an all-of join of thousands of members named by a manifest.

``wait-for-join`` (the real state machine) gets ``dependencies_url``: a JSON
Lines manifest in the stack's payload bucket whose entries are payloads, or
(every :data:`BY_URL_EVERY`-th) ``{"url"}`` references to payloads stored beside
it. The tracker reads it a chunk at a time (``join_chunk`` messages), runs every
member once and counts each outcome once on the join's count shards; the join
row holds counts, not members, so its size does not grow with n or with the ids.
The strict layer is on: AWS's limits (256 KiB output, 400 KB item, ...) hold.

Checked from outside the tracker: the member state machine's own executions,
listed and counted per payload (each member exactly one, none twice).

The platform model is on too: Lambda's recursive-loop detection would stop a
registration that chained its chunks (the 17th process invocation of one chain);
the join message's invocation sends every chunk's message itself, so none is
stopped, and each chunk is one invocation of the join queue's trigger.

Runs only with ``DEPTRACK_CHAOS=1`` (``make chaos``). ``DEPTRACK_JOIN_MEMBERS``
(default 3,000) and ``DEPTRACK_JOIN_ID_LENGTH`` (default 61, a typical cirrus
id) size it; CI runs a few hundred members with 700-character ids. Prints wall
time, members/s, the parent's output size and the join row's size.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from dependency_tracker.core.limits import SFN_MAX_PAYLOAD_BYTES, item_size, utf8_size
from dependency_tracker.core.naming import execution_name
from dependency_tracker.joins.manifest import manifest_text
from dependency_tracker.joins.store import JoinStore
from dependency_tracker.table.items import join_partition_for
from dependency_tracker.table.keys import partition_key
from tests.chaos.conftest import chaos_only
from tests.conftest import wait_until
from tests.e2e.conftest import CHILD, dependency, dependency_id
from tests.e2e.parent_limits import item_for_id_length

if TYPE_CHECKING:
    import pytest

    from dependency_tracker_local import LocalStack

pytestmark = chaos_only

# Every BY_URL_EVERY-th manifest entry is a {"url"} reference, the others payloads inline.
BY_URL_EVERY = 4
# The join row holds counts, never members: far under DynamoDB's 400 KB whatever n is.
MAX_JOIN_ROW_BYTES = 16_000
# The parent's deadline: a fixed start plus a generous time per member (the run is linear,
# about 0.2 s a member on 2 cores).
DEADLINE_BASE_SECONDS = 120.0
DEADLINE_PER_MEMBER_SECONDS = 1.0
# How often the parent is polled: each poll is one more moto call competing for the GIL.
POLL_SECONDS = 0.5


def upload_manifest(stack: LocalStack, tag: str, items: list[str]) -> str:
    """The members' manifest (JSON Lines) in the payload bucket; returns its ``s3://`` url."""
    s3 = stack.client("s3")
    bucket = stack.outputs["PayloadBucketName"]
    entries: list[dict[str, Any]] = []
    for index, item in enumerate(items):
        body = dependency(item)
        if index % BY_URL_EVERY == 0:
            key = f"tests/{tag}/payloads/{index:06d}.json"
            s3.put_object(Bucket=bucket, Key=key, Body=json.dumps(body).encode())
            entries.append({"url": f"s3://{bucket}/{key}"})
        else:
            entries.append(body)
    key = f"tests/{tag}/manifest.jsonl"
    s3.put_object(Bucket=bucket, Key=key, Body=manifest_text(entries).encode("utf-8"))
    return f"s3://{bucket}/{key}"


def executions_per_member(stack: LocalStack, ids: list[str]) -> tuple[Counter[str], list[str]]:
    """Every execution of the member state machine, counted per payload id (by its name).

    Names are ``execution_name(payload_id, attempt)``: a readable tail, a digest of the
    whole id, the attempt. Returns the count per id and the names no member has.
    """
    sfn = stack.client("stepfunctions")
    by_stem = {execution_name(pid, 1).rpartition("-")[0]: pid for pid in ids}
    runs: Counter[str] = Counter()
    strangers: list[str] = []
    pages = sfn.get_paginator("list_executions").paginate(
        stateMachineArn=stack.outputs["StateMachines"][CHILD]
    )
    for page in pages:
        for execution in page["executions"]:
            stem, _, attempt = execution["name"].rpartition("-")
            pid = by_stem.get(stem)
            if pid is None or execution_name(pid, int(attempt)) != execution["name"]:
                strangers.append(execution["name"])
            else:
                runs[pid] += 1
    return runs, strangers


def stopped(stack: LocalStack, execution_arn: str, deadline: float) -> dict[str, Any]:
    """``DescribeExecution`` once the parent stopped (polled, failing at the deadline)."""
    sfn = stack.client("stepfunctions")

    def described() -> dict[str, Any] | None:
        found: dict[str, Any] = sfn.describe_execution(executionArn=execution_arn)
        return None if found["status"] == "RUNNING" else found

    result: dict[str, Any] = wait_until(described, timeout=deadline, every=POLL_SECONDS)
    return result


def summary_lists(stack: LocalStack, summary: dict[str, Any]) -> dict[str, Any]:
    """The join's full summary: inline, or the object ``summary_url`` names."""
    if "summary_url" not in summary:
        assert not summary.get("truncated"), summary
        return summary
    url = urlparse(summary["summary_url"])
    stored = stack.client("s3").get_object(Bucket=url.netloc, Key=url.path.lstrip("/"))
    whole: dict[str, Any] = json.loads(stored["Body"].read())
    return whole


def test_all_of_join_over_a_manifest(stack: LocalStack, capsys: pytest.CaptureFixture[str]) -> None:
    count = int(os.environ.get("DEPTRACK_JOIN_MEMBERS", "3000"))
    assert stack.platform is not None, "the platform model is on (DEPTRACK_PLATFORM unset)"
    id_length = int(os.environ.get("DEPTRACK_JOIN_ID_LENGTH", "61"))
    items = [item_for_id_length("join", index, id_length) for index in range(count)]
    ids = [dependency_id(item) for item in items]
    # GIVEN a manifest naming count members, a quarter of them by {"url"}
    manifest = upload_manifest(stack, f"join-scale-{count}", items)
    deadline = DEADLINE_BASE_SECONDS + count * DEADLINE_PER_MEMBER_SECONDS
    started = time.monotonic()
    # WHEN one all-of join parent waits on all of them through wait-for-join
    parent = stack.client("stepfunctions").start_execution(
        stateMachineArn=stack.outputs["StateMachines"]["wait-for-join"],
        name=f"join-scale-{count}",
        input=json.dumps({"dependencies_url": manifest, "timeout_seconds": int(deadline)}),
    )["executionArn"]
    described = stopped(stack, parent, deadline)
    seconds = time.monotonic() - started
    # THEN it succeeds, its output within Step Functions' 256 KiB, with every count
    assert described["status"] == "SUCCEEDED", (described.get("error"), described.get("cause"))
    output_bytes = utf8_size(described["output"])
    assert output_bytes <= SFN_MAX_PAYLOAD_BYTES
    summary = json.loads(described["output"])["join"]
    assert summary["counts"] == {"succeeded": count, "failed": 0, "pending": 0}
    assert (summary["quorum"], summary["total"]) == (count, count)
    # AND the lists (inline, or past the inline bound in the summary_url object) name them all
    whole = summary_lists(stack, summary)
    assert whole["succeeded"] == [partition_key(pid) for pid in ids]
    assert (whole["failed"], whole["pending"], whole.get("duplicates", [])) == ([], [], [])
    # AND the join row is small whatever n and the id length (raw item, as DynamoDB sizes it)
    table = stack.outputs["DependencyTableName"]
    dynamodb = stack.client("dynamodb")
    row = dynamodb.get_item(
        TableName=table,
        Key={
            "payload_id": {"S": join_partition_for(summary["join_id"])},
            "waiter_id": {"S": "join"},
        },
        ConsistentRead=True,
    )["Item"]
    row_bytes = item_size(row)
    assert row_bytes < MAX_JOIN_ROW_BYTES
    # AND its count shards add up to n, every outcome a success
    _, succeeded, failed = JoinStore(dynamodb, table).read(summary["join_id"])
    assert (succeeded, failed) == (count, 0)
    # AND, by the member state machine's own executions, each member ran exactly once
    runs, strangers = executions_per_member(stack, ids)
    assert not strangers, strangers[:5]
    per_member = [runs[pid] for pid in ids]
    assert [pid for pid in ids if runs[pid] != 1] == [], Counter(per_member)
    assert stack.dead_letters == {"update-state": [], "callback": []}
    # AND Lambda's recursive-loop detection stopped nothing: registration never chains
    assert stack.platform.stopped == []
    dlq = stack.client("sqs").get_queue_attributes(
        QueueUrl=stack.outputs["ProcessDlqUrl"], AttributeNames=["ApproximateNumberOfMessages"]
    )["Attributes"]
    assert dlq["ApproximateNumberOfMessages"] == "0"
    by_url = len(range(0, count, BY_URL_EVERY))
    with capsys.disabled():
        print(  # noqa: T201  (make chaos shows the measurement)
            f"\nall-of join over a manifest: {count} members ({by_url} by url), "
            f"ids of {id_length} characters: {seconds:.1f} s, "
            f"{count / seconds:.1f} members/s ({1000 * seconds / count:.1f} ms per member), "
            f"parent output {output_bytes:,} bytes"
            f"{' (summary_url)' if 'summary_url' in summary else ' (lists inline)'}, "
            f"join row {row_bytes:,} bytes, executions per member "
            f"min {min(per_member)} max {max(per_member)}, "
            f"records stopped by loop detection {len(stack.platform.stopped)}"
        )
