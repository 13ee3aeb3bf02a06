"""wait-for-join on its own: the real state machine with the tracker's handlers off.

The process queue's pump hands its messages to a recorder instead of the process
handler, and the other pumps deliver to nothing, so no join is ever registered:
each test sees exactly the message the parent sent and the rows it wrote itself.
"""

from __future__ import annotations

import functools
import io
import json
import threading
from typing import TYPE_CHECKING, Any

import pytest

from dependency_tracker.joins.results import results_key
from dependency_tracker_local import LocalStack, definitions
from tests.conftest import ROLE_ARN, wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator

JOIN = "wait-for-join"
MANIFEST = "s3://some-bucket/manifests/join.jsonl"


class Recorder:
    """Stands in for the process handler: keeps each message body, deletes the message."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.bodies: list[dict[str, Any]] = []

    def __call__(self, event: dict[str, Any], _context: Any) -> dict[str, Any]:
        with self._lock:
            self.bodies.extend(json.loads(record["body"]) for record in event["Records"])
        return {"batchItemFailures": []}

    def bodies_from(self, execution_arn: str) -> list[dict[str, Any]]:
        """The join messages ``execution_arn`` published so far."""
        with self._lock:
            return [b for b in self.bodies if b["join"]["parent_execution"] == execution_arn]

    def sent_by(self, execution_arn: str) -> dict[str, Any]:
        """The one join message ``execution_arn`` published (waits for it)."""
        (body,) = wait_until(lambda: self.bodies_from(execution_arn), timeout=10)
        return dict(body)


@pytest.fixture(scope="module")
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture(scope="module")
def stack(recorder: Recorder) -> Iterator[LocalStack]:
    with LocalStack(prefix="deptrack", sink=io.StringIO()) as running:
        for name, pump in running.pumps.items():
            pump.handler = recorder if name == "sqs" else lambda _event, _context: None
        yield running
    client.cache_clear()


@functools.cache
def client(stack: LocalStack, service: str) -> Any:
    """One client per service (creating a boto3 client takes a while)."""
    return stack.client(service)


def start(stack: LocalStack, name: str, given: dict[str, Any]) -> str:
    response = client(stack, "stepfunctions").start_execution(
        stateMachineArn=stack.outputs["StateMachines"][JOIN], name=name, input=json.dumps(given)
    )
    return str(response["executionArn"])


def ended(stack: LocalStack, execution_arn: str, timeout: float = 20.0) -> dict[str, Any]:
    """``DescribeExecution`` once the execution stopped."""
    sfn = client(stack, "stepfunctions")

    def stopped() -> dict[str, Any] | None:
        described: dict[str, Any] = sfn.describe_execution(executionArn=execution_arn)
        return None if described["status"] == "RUNNING" else described

    result: dict[str, Any] = wait_until(stopped, timeout=timeout)
    return result


def put(stack: LocalStack, payload_id: str, waiter_id: str, **numbers: int) -> None:
    """Write a dependency-table row with these number attributes."""
    item = {"payload_id": {"S": payload_id}, "waiter_id": {"S": waiter_id}}
    item |= {name: {"N": str(value)} for name, value in numbers.items()}
    client(stack, "dynamodb").put_item(TableName=stack.outputs["DependencyTableName"], Item=item)


def timed_out_cause(described: dict[str, Any]) -> str:
    assert described["status"] == "FAILED", described
    assert described["error"] == "DependencyTimedOut"
    return str(described["cause"])


@pytest.mark.parametrize(
    ("given", "sent"),
    [
        ({"dependencies_url": MANIFEST}, {"payloads_url": MANIFEST}),
        ({"dependencies": [{"url": "s3://b/k"}]}, {"payloads": [{"url": "s3://b/k"}]}),
    ],
    ids=["manifest", "list"],
)
def test_the_message_carries_the_list_or_the_manifest_url(
    stack: LocalStack,
    recorder: Recorder,
    request: pytest.FixtureRequest,
    given: dict[str, Any],
    sent: dict[str, Any],
) -> None:
    arn = start(
        stack,
        f"message-{request.node.callspec.id}",
        given | {"quorum": 1, "payload_id": "w/1", "timeout_seconds": 1},
    )
    body = recorder.sent_by(arn)
    join = body["join"]
    assert body == sent | {"join": join}
    assert set(join) == {
        "task_token",
        "join_id",
        "quorum",
        "waiter_payload_id",
        "parent_execution",
        "deadline",
        "min_succeeded",
        "on_parent_gone",
    }
    assert (join["quorum"], join["waiter_payload_id"]) == (1, "w/1")
    # No deadline or on_parent_gone given: null, which the tracker reads as none (keep).
    assert (join["deadline"], join["min_succeeded"], join["on_parent_gone"]) == (None, None, None)
    ended(stack, arn)


@pytest.mark.parametrize(
    ("given", "missing"),
    [
        ({"dependencies": [], "dependencies_url": MANIFEST}, "both were given"),
        ({"quorum": 2}, "neither was given"),
        ({"dependencies": None, "dependencies_url": None}, "neither was given"),
    ],
    ids=["both", "neither", "both-null"],
)
def test_exactly_one_dependency_source_or_invalid_join(
    stack: LocalStack,
    recorder: Recorder,
    request: pytest.FixtureRequest,
    given: dict[str, Any],
    missing: str,
) -> None:
    arn = start(stack, f"invalid-{request.node.callspec.id}", given | {"timeout_seconds": 1})
    described = ended(stack, arn)
    assert (described["status"], described["error"]) == ("FAILED", "InvalidJoin")
    assert "exactly one of dependencies" in described["cause"]
    assert missing in described["cause"]
    history = client(stack, "stepfunctions").get_execution_history(executionArn=arn)["events"]
    assert not [event for event in history if event["type"].startswith("Task")]
    assert not recorder.bodies_from(arn)


def test_timeout_before_the_join_is_registered(stack: LocalStack, recorder: Recorder) -> None:
    arn = start(stack, "no-row", {"dependencies": [{"url": "s3://b/k"}], "timeout_seconds": 1})
    join_id = recorder.sent_by(arn)["join"]["join_id"]
    cause = timed_out_cause(ended(stack, arn))
    assert cause.startswith(f"join {join_id} has no row: no member had been registered")


# Rows the tracker would have written: the join row (key join#<id>/join) and its counts.
SHARD_ROWS = {
    0: {"succeeded": 2},
    # shard 1: no row at all
    2: {"succeeded": 1, "failed": 1},
    3: {},  # a shard row no outcome reached yet
}


def timed_out_with_rows(
    stack: LocalStack, recorder: Recorder, name: str, row: dict[str, int], *, counts: bool
) -> tuple[str, str]:
    """A parent whose join row (and count rows) exist when its callback timeout expires."""
    given = {"dependencies_url": MANIFEST, "quorum": row.get("quorum"), "timeout_seconds": 2}
    arn = start(stack, name, given)
    join_id = recorder.sent_by(arn)["join"]["join_id"]
    put(stack, f"join#{join_id}", "join", **row)
    for shard, numbers in SHARD_ROWS.items() if counts else ():
        put(stack, f"join#{join_id}#counts#{shard}", "counts", **numbers)
    return arn, join_id


def test_timeout_cause_sums_the_count_shards(stack: LocalStack, recorder: Recorder) -> None:
    # row written -> what the cause says besides join_id, counts and row; all run at once
    cases: list[tuple[dict[str, int], bool, dict[str, Any]]] = [
        # all-of, registration under way
        ({"registered": 5}, True, {"quorum": None, "total": None, "registered": 5}),
        # k-of-n, every member registered
        (
            {"quorum": 2, "total": 5, "registered": 5},
            True,
            {"quorum": 2, "total": 5, "registered": 5},
        ),
        # a bare join row
        ({}, True, {"quorum": None, "total": None, "registered": 0}),
        # no count row at all
        ({"registered": 3}, False, {"quorum": None, "total": None, "registered": 3}),
    ]
    started = [
        timed_out_with_rows(stack, recorder, f"counted-{index}", row, counts=counts)
        for index, (row, counts, _) in enumerate(cases)
    ]
    bucket = stack.outputs["PayloadBucketName"]
    for (arn, join_id), (_, counts, expected) in zip(started, cases, strict=True):
        cause = timed_out_cause(ended(stack, arn))
        assert json.loads(cause) == {
            "join_id": join_id,
            **expected,
            "counts": {"succeeded": 3, "failed": 1} if counts else {"succeeded": 0, "failed": 0},
            "row": {"payload_id": f"join#{join_id}", "waiter_id": "join"},
            "results_url": f"s3://{bucket}/{results_key(join_id)}",
        }
        assert cause == json.dumps(json.loads(cause), separators=(",", ":"))  # compact


def test_timeout_cause_when_a_read_fails(stack: LocalStack, recorder: Recorder) -> None:
    # the definition as deployed but for one read, pointed at a table that does not exist
    substitutions = dict.fromkeys(definitions.SUBSTITUTION_KEYS, "1") | {
        "ProcessQueueUrl": stack.outputs["ProcessQueueUrl"],
        "DependencyTableName": stack.outputs["DependencyTableName"],
    }
    sfn = client(stack, "stepfunctions")
    started = []
    for unreadable in ("ReadSummary", "ReadShard"):
        asl = json.loads(definitions.render(definitions.discover()[JOIN], substitutions))
        states = asl["States"]
        read = states.get(unreadable) or states["ReadCounts"]["ItemProcessor"]["States"][unreadable]
        read["Parameters"]["TableName"] = "no-such-table"
        machine = sfn.create_state_machine(
            name=f"join-unreadable-{unreadable}", roleArn=ROLE_ARN, definition=json.dumps(asl)
        )["stateMachineArn"]
        given = {"dependencies_url": MANIFEST, "timeout_seconds": 2}
        arn = str(
            sfn.start_execution(stateMachineArn=machine, name="x", input=json.dumps(given))[
                "executionArn"
            ]
        )
        join_id = recorder.sent_by(arn)["join"]["join_id"]
        put(stack, f"join#{join_id}", "join", registered=1)
        started.append((arn, join_id))
    for arn, join_id in started:
        assert timed_out_cause(ended(stack, arn)) == (
            f"join {join_id} timed out; its row or its count shards could not be read "
            "(DynamoDB.ResourceNotFoundException): read them from the dependency table"
        )
