"""Payload ids past DynamoDB's 2,048-byte key limit, through the embedded stack.

A mosaic payload of ~40 Sentinel-2 items has a cirrus id over 2,048 bytes. Before
keys were derived (``dependency_tracker.table.keys``), its first ``PutItem`` was refused,
the message went to the DLQ and the parent waited out its callback timeout. Here
the real parent machines wait on such payloads, a second parent is replayed the
stored result, payloads with long ids wait on each other (the cycle check's edges),
a join counts a long member, and the operator CLI finds the rows by the real id.
The stack runs with the strict layer, so any key over the limit on any call fails.
"""

from __future__ import annotations

import io
import json
import time
from typing import TYPE_CHECKING, Any

import pytest
from typer.testing import CliRunner

from dependency_tracker.core.enums import DependencyError, PayloadState
from dependency_tracker.core.limits import DDB_MAX_PARTITION_KEY_BYTES, utf8_size
from dependency_tracker.payloads.model import ProcessPayload
from dependency_tracker.table.keys import partition_key
from dependency_tracker_cli.__main__ import app
from dependency_tracker_local import LocalStack
from tests.conftest import wait_until
from tests.e2e.conftest import finished as finished_within
from tests.e2e.conftest import states
from tests.e2e.conftest import waiters as rows

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.e2e

PREFIX = "longids"
CHILD = "simulate"
COLLECTION = "sentinel-2-l2a"
TIMEOUT = 120  # callback timeout: a lost wake-up would only end here


@pytest.fixture(scope="module")
def stack() -> Iterator[LocalStack]:
    # Server mode, so the CLI reaches it through --endpoint-url like any operator.
    with LocalStack(prefix=PREFIX, sink=io.StringIO(), port=0) as running:
        yield running


def mosaic(tag: str, size: int, **body: Any) -> dict[str, Any]:
    """A ``simulate`` payload of Sentinel-2 scenes whose cirrus id is exactly ``size`` bytes.

    The id is ``{collection}/workflow-simulate/{sorted item ids joined by /}``; the
    last scene's id is padded so the whole id lands on ``size``.
    """
    head = f"{COLLECTION}/workflow-{CHILD}/"
    items: list[str] = []
    scene = 0
    while True:
        item = f"S2B_MSIL2A_20240611T{scene:06d}_N0510_R108_T31UFQ_{tag}"
        used = len(head) + len("/".join([*items, item]))
        if used >= size - 8:
            break
        items.append(item)
        scene += 1
    pad = size - len(head) - len("/".join(items)) - 1
    assert pad > 8
    items.append(f"S2B_MSIL2A_20240611T{scene:06d}_{tag}".ljust(pad, "x")[:pad])
    payload = {
        "type": "FeatureCollection",
        "features": [{"type": "Feature", "id": item, "collection": COLLECTION} for item in items],
        "process": [{"workflow": CHILD, "tasks": {"simulate": {"seconds": 0}}}],
        **body,
    }
    assert utf8_size(id_of(payload)) == size
    return payload


def id_of(payload: dict[str, Any]) -> str:
    return ProcessPayload.model_validate(payload).id


def start(stack: LocalStack, machine: str, name: str, **fields: Any) -> str:
    response = stack.client("stepfunctions").start_execution(
        stateMachineArn=stack.outputs["StateMachines"][machine],
        name=name,
        input=json.dumps({"timeout_seconds": TIMEOUT, **fields}),
    )
    return str(response["executionArn"])


def finished(stack: LocalStack, execution_arn: str) -> dict[str, Any]:
    """``DescribeExecution`` once stopped (a minute: long ids make many-item payloads)."""
    return finished_within(stack, execution_arn, timeout=60.0)


def stored_key(stack: LocalStack, payload_id: str) -> dict[str, Any]:
    """The state item as DynamoDB holds it: key and whole-id attributes."""
    item = stack.client("dynamodb").get_item(
        TableName=stack.outputs["StateTableName"],
        Key={"payload_id": {"S": partition_key(payload_id)}},
        ProjectionExpression="payload_id, full_payload_id",
        ConsistentRead=True,
    )["Item"]
    return {name: value["S"] for name, value in item.items()}


def cli(stack: LocalStack, *args: str) -> Any:
    assert stack.endpoint_url is not None
    result = CliRunner().invoke(
        app,
        [*args, "--endpoint-url", stack.endpoint_url, "--prefix", PREFIX],
        env={"DEPTRACK_PREFIX": None, "DEPTRACK_STACK_NAME": None},
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_parents_wait_on_a_mosaic_and_the_cli_finds_it(stack: LocalStack) -> None:
    # GIVEN a mosaic payload whose cirrus id is 3,000 bytes
    dependency = mosaic("mosaic", 3_000)
    pid = id_of(dependency)
    assert len(dependency["features"]) > 35
    # WHEN a parent waits on it THEN it resumes with the real id
    first = finished(
        stack, start(stack, "wait-for-dependencies", "long-first", dependencies=[dependency])
    )
    assert first["status"] == "SUCCEEDED", first.get("error")
    (summary,) = json.loads(first["output"])["dependencies"]
    assert (summary["payload_id"], summary["replayed"]) == (pid, False)
    # ... and a second parent on the same payload is replayed the stored result, with no new run
    second = finished(
        stack, start(stack, "wait-for-dependencies", "long-second", dependencies=[dependency])
    )
    assert second["status"] == "SUCCEEDED", second.get("error")
    (replayed,) = json.loads(second["output"])["dependencies"]
    assert (replayed["payload_id"], replayed["replayed"]) == (pid, True)
    item = states(stack).get(pid)
    assert item is not None
    assert (item.payload_id, item.state, len(item.executions)) == (pid, PayloadState.SUCCEEDED, 1)
    # the table holds a derived key within the limit, and the whole id beside it
    raw = stored_key(stack, pid)
    assert raw["payload_id"] != pid
    assert utf8_size(raw["payload_id"]) <= DDB_MAX_PARTITION_KEY_BYTES
    assert raw["payload_id"].startswith(f"{COLLECTION}/workflow-{CHILD}/S2B_MSIL2A_")
    assert raw["full_payload_id"] == pid
    # THEN the CLI, given the real id, shows the payload and both parents
    (status,) = cli(stack, "status", pid, "--json")
    assert (status["payload_id"], status["state"], status["found"]) == (pid, "SUCCEEDED", True)
    listed = cli(stack, "waiters", pid, "--json")
    assert listed["payload_id"] == pid
    parents = {view["parent_execution"] for view in listed["waiters"]}
    assert len(parents) == 2
    assert all(view["notified"] for view in listed["waiters"])
    graph = cli(stack, "graph", "--all", "--json", "--root", pid)
    assert {node.get("payload_id") for node in graph["nodes"]} >= {pid}


@pytest.mark.parametrize(
    "size",
    [DDB_MAX_PARTITION_KEY_BYTES - 1, DDB_MAX_PARTITION_KEY_BYTES, DDB_MAX_PARTITION_KEY_BYTES + 1],
)
def test_ids_just_under_at_and_just_over_the_bound(stack: LocalStack, size: int) -> None:
    dependency = mosaic(f"b{size}", size)
    pid = id_of(dependency)
    described = finished(
        stack, start(stack, "wait-for-dependencies", f"bound-{size}", dependencies=[dependency])
    )
    assert described["status"] == "SUCCEEDED", described.get("error")
    (summary,) = json.loads(described["output"])["dependencies"]
    assert summary["payload_id"] == pid
    raw = stored_key(stack, pid)
    if size <= DDB_MAX_PARTITION_KEY_BYTES:
        # up to the bound the key is the id, as before: existing tables read the same
        assert raw == {"payload_id": pid}
    else:
        assert raw["full_payload_id"] == pid
        assert utf8_size(raw["payload_id"]) <= DDB_MAX_PARTITION_KEY_BYTES


def test_a_join_counts_a_member_with_a_long_id(stack: LocalStack) -> None:
    members = [mosaic("join-a", 2_600), mosaic("join-b", 4_000)]
    described = finished(
        stack, start(stack, "wait-for-join", "long-join", dependencies=members, quorum=2)
    )
    assert described["status"] == "SUCCEEDED", described.get("error")
    summary = json.loads(described["output"])["join"]
    assert sorted(summary["succeeded"]) == sorted(id_of(member) for member in members)


def test_payloads_with_long_ids_waiting_on_each_other_are_refused(stack: LocalStack) -> None:
    # GIVEN A (a long id) waits on B (a long id), and B waits on A: their wait edges
    # live under waits#{id}, a partition past the limit
    a_shape = mosaic("cycle-a", 2_500)
    a_body = {**a_shape, "process": [{"workflow": "wait-for-dependencies"}]}
    a_id = id_of(a_body)
    b_body = {
        **mosaic("cycle-b", 2_500),
        "process": [{"workflow": "wait-for-dependencies"}],
        "dependencies": [{"wait_for": a_id}],
        "timeout_seconds": TIMEOUT,
    }
    b_body["payload_id"] = id_of(b_body)
    a_body.update(dependencies=[b_body], timeout_seconds=TIMEOUT, payload_id=a_id)
    began = time.monotonic()
    # WHEN a top-level parent waits on A
    top = start(stack, "wait-for-dependencies", "long-cycle", dependencies=[a_body])
    # THEN B's wait closes the cycle and is refused at once; nobody waits out a timeout
    described = finished(stack, top)
    assert (described["status"], described["error"]) == ("FAILED", "DependencyFailed")
    assert time.monotonic() - began < TIMEOUT / 2

    def refused() -> list[Any]:
        return [
            row
            for row in rows(stack).waiters(a_id)
            if row.error_name is DependencyError.CYCLE and row.notified_at
        ]

    (row,) = wait_until(refused)
    assert row.payload_id == a_id
    assert row.cause == (
        f"waiting would close a dependency cycle: {b_body['payload_id']} -> {a_id} -> "
        f"{b_body['payload_id']}"
    )


def failing(payload: dict[str, Any]) -> dict[str, Any]:
    """``payload`` with its ``simulate`` step failing."""
    step = {"workflow": CHILD, "tasks": {"simulate": {"seconds": 0, "outcome": "fail"}}}
    return {**payload, "process": [step]}


def test_a_join_names_its_long_duplicates_by_their_real_ids(stack: LocalStack) -> None:
    # GIVEN a join over two payloads whose ids are over 2,048 bytes, each listed twice
    a, b = mosaic("dup-a", 2_600), mosaic("dup-b", 4_000)
    # WHEN the parent waits on both and they succeed
    described = finished(
        stack, start(stack, "wait-for-join", "long-duplicates", dependencies=[a, b, a, b])
    )
    assert described["status"] == "SUCCEEDED", described.get("error")
    summary = json.loads(described["output"])["join"]
    # THEN the parent's output names the real ids, the duplicates too (not prefix#sha256:...)
    assert summary["succeeded"] == [id_of(a), id_of(b)]
    assert summary["duplicates"] == [id_of(a), id_of(b)]
    assert (summary["total"], summary["counts"]["succeeded"]) == (2, 2)


def test_a_join_that_cannot_succeed_names_its_long_duplicates_in_its_cause(
    stack: LocalStack,
) -> None:
    # GIVEN an all-of join whose long member, listed twice, fails
    bad, good = failing(mosaic("dup-bad", 3_100)), mosaic("dup-good", 2_100)
    # WHEN the parent waits on them
    described = finished(
        stack, start(stack, "wait-for-join", "long-unreachable", dependencies=[bad, good, bad])
    )
    # THEN it fails QuorumUnreachable, and the cause (the join summary) names the real ids
    assert (described["status"], described["error"]) == ("FAILED", "QuorumUnreachable")
    cause = json.loads(described["cause"])
    assert cause["duplicates"] == [id_of(bad)]
    assert [failed["payload_id"] for failed in cause["failed"]] == [id_of(bad)]
