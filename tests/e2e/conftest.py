"""One embedded stack per module: real ASL, real executions, pumped handlers."""

from __future__ import annotations

import io
import json
from typing import TYPE_CHECKING, Any

import pytest

from dependency_tracker.payloads.state_table import StateTable
from dependency_tracker.table.dependency_table import DependencyTable
from dependency_tracker_local import LocalStack
from tests.conftest import wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator

    from dependency_tracker.table.items import PayloadStateItem

PARENT = "wait-for-dependencies"
CHILD = "simulate"


# The tests' own parents (examples/), which the callback function may answer only when the
# stack is deployed with them in ExtraParentStateMachineArns, as on AWS (the IAM model).
OWN_PARENTS = {
    "ExtraParentStateMachineArns": "arn:aws:states:us-east-1:123456789012:stateMachine:example-*"
}


@pytest.fixture(scope="module")
def stack() -> Iterator[LocalStack]:
    with LocalStack(prefix="deptrack", sink=io.StringIO(), parameters=OWN_PARENTS) as running:
        yield running
        # The IAM model (on unless DEPTRACK_IAM=0) refused no call of the module's paths.
        assert running.iam is None or running.iam.denials == []


def dependency(
    item: str, *, seconds: int = 0, outcome: str = "succeed", collection: str = "e2e"
) -> dict[str, Any]:
    """A payload for the ``simulate`` child that takes ``seconds`` and ends in ``outcome``."""
    return {
        "type": "FeatureCollection",
        "features": [{"type": "Feature", "id": item, "collection": collection}],
        "process": [
            {"workflow": CHILD, "tasks": {"simulate": {"seconds": seconds, "outcome": outcome}}}
        ],
    }


def dependency_id(item: str, collection: str = "e2e") -> str:
    return f"{collection}/workflow-{CHILD}/{item}"


def start_parent(
    stack: LocalStack, name: str, dependencies: list[dict[str, Any]], timeout_seconds: int = 60
) -> str:
    """Start the real parent state machine; returns its execution ARN."""
    response = stack.client("stepfunctions").start_execution(
        stateMachineArn=stack.outputs["StateMachines"][PARENT],
        name=name,
        input=json.dumps({"dependencies": dependencies, "timeout_seconds": timeout_seconds}),
    )
    return str(response["executionArn"])


def finished(stack: LocalStack, execution_arn: str, timeout: float = 30.0) -> dict[str, Any]:
    """``DescribeExecution`` once the execution stopped."""
    sfn = stack.client("stepfunctions")

    def stopped() -> dict[str, Any] | None:
        described: dict[str, Any] = sfn.describe_execution(executionArn=execution_arn)
        return None if described["status"] == "RUNNING" else described

    result: dict[str, Any] = wait_until(stopped, timeout=timeout)
    return result


def states(stack: LocalStack) -> StateTable:
    return StateTable(stack.client("dynamodb"), stack.outputs["StateTableName"])


def waiters(stack: LocalStack) -> DependencyTable:
    return DependencyTable(stack.client("dynamodb"), stack.outputs["DependencyTableName"])


def state_of(stack: LocalStack, payload_id: str) -> PayloadStateItem | None:
    return states(stack).get(payload_id)


def child_executions(stack: LocalStack, payload_id: str) -> list[str]:
    """Execution ARNs the tracker recorded for a payload."""
    item = state_of(stack, payload_id)
    return [] if item is None else item.executions


def all_child_runs(stack: LocalStack) -> list[dict[str, Any]]:
    sfn = stack.client("stepfunctions")
    runs: list[dict[str, Any]] = []
    for page in sfn.get_paginator("list_executions").paginate(
        stateMachineArn=stack.outputs["StateMachines"][CHILD]
    ):
        runs.extend(page["executions"])
    return runs


def notified(stack: LocalStack, payload_id: str) -> bool:
    rows = list(waiters(stack).waiters(payload_id))
    return bool(rows) and all(row.notified_at is not None for row in rows)
