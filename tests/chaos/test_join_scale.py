"""An all-of join over 1,000 members by ``{"url"}``, through the embedded stack, strict layer on.

Before issue 13 this succeeded locally with a 191 KB callback output and a 272 KB
join row, which AWS refuses past ~1,400 and ~1,500 members (moto checked
neither). Now the output is bounded (past 32 KiB: counts and a ``summary_url``)
and the row is sized before it is written; the strict layer refuses an output or
a row over AWS's limits here as AWS would.

Runs only with ``DEPTRACK_CHAOS=1`` (``make chaos``). ``DEPTRACK_JOIN_MEMBERS``
(default 1,000) and ``DEPTRACK_JOIN_ID_LENGTH`` (default 61, a typical cirrus id)
size it; CI runs fewer members with longer ids, which still passes the bound.
"""

from __future__ import annotations

import json
import os
import time
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from dependency_tracker.limits import DDB_MAX_ITEM_BYTES, item_size, utf8_size
from dependency_tracker.models.outputs import MAX_JOIN_OUTPUT_BYTES
from tests.chaos.conftest import chaos_only
from tests.e2e.conftest import dependency_id, finished
from tests.e2e.parent_limits import item_for_id_length, upload

if TYPE_CHECKING:
    import pytest

    from dependency_tracker.local import LocalStack

pytestmark = chaos_only


def test_all_of_join_over_many_members_by_url(
    stack: LocalStack, capsys: pytest.CaptureFixture[str]
) -> None:
    count = int(os.environ.get("DEPTRACK_JOIN_MEMBERS", "1000"))
    id_length = int(os.environ.get("DEPTRACK_JOIN_ID_LENGTH", "61"))
    items = [item_for_id_length("join", index, id_length) for index in range(count)]
    ids = [dependency_id(item) for item in items]
    # the whole summary would not go inline: this run takes the summary_url path
    assert utf8_size(json.dumps({"succeeded": ids})) > MAX_JOIN_OUTPUT_BYTES
    # GIVEN count members stored in the payload bucket, passed as {"url"}
    references = upload(stack, "join-scale", items)
    deadline = 120 + count * 1.5
    started = time.monotonic()
    # WHEN one all-of join parent waits on all of them
    parent = stack.client("stepfunctions").start_execution(
        stateMachineArn=stack.outputs["StateMachines"]["wait-for-join"],
        name="join-scale",
        input=json.dumps({"dependencies": references, "timeout_seconds": int(deadline)}),
    )["executionArn"]
    described = finished(stack, parent, timeout=deadline)
    seconds = time.monotonic() - started
    # THEN it succeeds, with an output within the inline bound: counts and a summary_url
    assert described["status"] == "SUCCEEDED", (described.get("error"), described.get("cause"))
    output_bytes = utf8_size(described["output"])
    assert output_bytes <= MAX_JOIN_OUTPUT_BYTES
    summary = json.loads(described["output"])["join"]
    assert summary["counts"] == {"succeeded": count, "failed": 0, "pending": 0}
    assert (summary["quorum"], summary["total"], summary["truncated"]) == (count, count, True)
    # AND the object it names holds every member id, in member order
    url = urlparse(summary["summary_url"])
    stored = stack.client("s3").get_object(Bucket=url.netloc, Key=url.path.lstrip("/"))
    whole = json.loads(stored["Body"].read())
    assert whole["succeeded"] == ids
    # AND the join row stayed within DynamoDB's item limit (the strict layer checked each write)
    row = stack.client("dynamodb").get_item(
        TableName=stack.outputs["DependencyTableName"],
        Key={"payload_id": {"S": f"join#{summary['join_id']}"}, "waiter_id": {"S": "join"}},
        ConsistentRead=True,
    )["Item"]
    row_bytes = item_size(row)
    assert row_bytes <= DDB_MAX_ITEM_BYTES
    assert stack.dead_letters == {"update-state": [], "callback": []}
    with capsys.disabled():
        print(  # noqa: T201  (make chaos shows the measurement)
            f"\nall-of join: {count} members by url, ids of {id_length} characters: "
            f"{seconds:.1f} s, callback output {output_bytes:,} bytes (summary object "
            f"{stored['ContentLength']:,} bytes), join row {row_bytes:,} bytes"
        )
