"""A join's summary past its bound, through the embedded stack: the parent gets a summary_url.

The strict layer is on in ``LocalStack``: an output over 262,144 bytes would be
refused here as on AWS. Member ids of ~1 KB keep the join small (34 members)
while its whole summary passes the 32 KiB bound the tracker sends inline.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

import pytest

from dependency_tracker.answers.parent import CALLBACK_OUTPUTS_PREFIX
from dependency_tracker.core.limits import utf8_size
from dependency_tracker.joins.outputs import MAX_JOIN_OUTPUT_BYTES
from tests.e2e.conftest import dependency, dependency_id, finished

if TYPE_CHECKING:
    from dependency_tracker_local import LocalStack

pytestmark = pytest.mark.e2e

MEMBERS = 34
ID_BYTES = 1000


def start_join(stack: LocalStack, name: str, members: list[dict[str, Any]]) -> str:
    response = stack.client("stepfunctions").start_execution(
        stateMachineArn=stack.outputs["StateMachines"]["wait-for-join"],
        name=name,
        input=json.dumps({"dependencies": members, "timeout_seconds": 120}),
    )
    return str(response["executionArn"])


def test_a_join_past_the_bound_answers_with_a_summary_the_parent_can_read(
    stack: LocalStack,
) -> None:
    # GIVEN an all-of join whose whole summary is over the inline bound
    items = [f"url-{index:02d}-".ljust(ID_BYTES, "x") for index in range(MEMBERS)]
    ids = [dependency_id(item) for item in items]
    assert utf8_size(json.dumps({"succeeded": ids})) > MAX_JOIN_OUTPUT_BYTES
    # WHEN every member succeeds
    described = finished(
        stack, start_join(stack, "join-by-url", [dependency(item) for item in items]), timeout=90
    )
    # THEN the parent resumed with the counts and a summary_url instead of the lists
    assert described["status"] == "SUCCEEDED"
    assert utf8_size(described["output"]) < MAX_JOIN_OUTPUT_BYTES
    summary = json.loads(described["output"])["join"]
    assert summary["counts"] == {"succeeded": MEMBERS, "failed": 0, "pending": 0}
    assert (summary["quorum"], summary["total"], summary["truncated"]) == (MEMBERS, MEMBERS, True)
    assert "succeeded" not in summary
    # AND the object it names, in the stack's payload bucket, holds the whole summary
    url = urlparse(summary["summary_url"])
    assert (url.scheme, url.netloc) == ("s3", stack.outputs["PayloadBucketName"])
    assert url.path.startswith(f"/{CALLBACK_OUTPUTS_PREFIX}/")
    stored = stack.client("s3").get_object(Bucket=url.netloc, Key=url.path.lstrip("/"))
    full = json.loads(stored["Body"].read())
    assert full["join_id"] == summary["join_id"]
    assert full["succeeded"] == ids
    assert (full["failed"], full["pending"]) == ([], [])
