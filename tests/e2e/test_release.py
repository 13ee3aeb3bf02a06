"""``release`` on a real parent: it fails with ``DependencyReleased``, and stays failed."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from typer.testing import CliRunner

from dependency_tracker.core.enums import PayloadState
from dependency_tracker_cli.__main__ import app
from dependency_tracker_local import LocalStack
from tests.conftest import wait_until
from tests.e2e.conftest import (
    dependency,
    dependency_id,
    finished,
    start_parent,
    state_of,
    waiters,
)
from tests.e2e.test_joins import start_join

pytestmark = pytest.mark.e2e

ITEM = "rel-1"


def release(stack: LocalStack, parent: str, reason: str) -> dict[str, Any]:
    """``dependency-tracker release PARENT --reason REASON --yes --json`` against the stack."""
    result = CliRunner().invoke(
        app,
        ["release", parent, "--reason", reason, "--yes", "--json"],
        env={"AWS_ENDPOINT_URL": stack.outputs["EndpointUrl"], "DEPTRACK_STACK_NAME": None},
    )
    assert result.exit_code == 0, result.output
    output: dict[str, Any] = json.loads(result.stdout)
    return output


def test_a_released_parent_fails_with_the_reason_and_its_dependency_ends_harmlessly() -> None:
    with LocalStack(port=0, sink=io.StringIO()) as stack:
        # GIVEN a real parent waiting on a dependency that takes a while (long enough for the
        # release to land first on a loaded machine: it found the row SUCCEEDED at 2 s)
        parent = start_parent(stack, "released-1", [dependency(ITEM, seconds=8)])
        table = waiters(stack)
        (row,) = wait_until(lambda: list(table.waiters(dependency_id(ITEM))), timeout=10)
        assert row.parent_execution == parent
        # WHEN an operator releases the parent
        assert release(stack, parent, "INC-7: tile never comes")["released"] == 1
        # THEN the parent fails with DependencyReleased, the reason in its cause
        described = finished(stack, parent, timeout=10)
        assert (described["status"], described["error"]) == ("FAILED", "DependencyReleased")
        cause = json.loads(described["cause"])
        assert cause["reason"] == "INC-7: tile never comes"
        assert cause["payload_id"] == dependency_id(ITEM)

        # WHEN the dependency ends afterwards
        def ended() -> bool:
            item = state_of(stack, dependency_id(ITEM))
            return item is not None and item.state is PayloadState.SUCCEEDED

        wait_until(ended, timeout=30)
        # THEN the tracker leaves the released row alone and the parent stays FAILED
        after = table.get(row.payload_id, row.waiter_id)
        assert after is not None
        assert after.notify_outcome == "RELEASED:INC-7: tile never comes"
        assert after.workflow_state is PayloadState.ABORTED
        again = stack.client("stepfunctions").describe_execution(executionArn=parent)
        assert (again["status"], again["error"]) == ("FAILED", "DependencyReleased")


def test_releasing_a_join_that_cancels_with_its_parent_stops_its_members() -> None:
    with LocalStack(port=0, sink=io.StringIO()) as stack:
        # GIVEN a wait-for-join parent of two slow members with on_parent_gone cancel
        members = [dependency(f"relc-{index}", seconds=600) for index in range(2)]
        parent = start_join(stack, "released-cancel", members, on_parent_gone="cancel")
        ids = [dependency_id(f"relc-{index}") for index in range(2)]

        def running() -> bool:
            found = [state_of(stack, member) for member in ids]
            return all(s is not None and s.state is PayloadState.PROCESSING for s in found)

        wait_until(running, timeout=30)
        # WHEN an operator releases it (the CLI begins the cancellation, through the queue)
        assert release(stack, parent, "mosaic cancelled")["released"] == 1

        # THEN its members are stopped, each recorded ABORTED with a cause naming the parent
        def stopped() -> bool:
            found = [state_of(stack, member) for member in ids]
            return all(s is not None and s.state is PayloadState.ABORTED for s in found)

        wait_until(stopped, timeout=60)
        table = waiters(stack)
        rows = [next(iter(table.rows(member))) for member in ids]
        assert {row.error for row in rows} == {"JoinParentGone"}
        assert all(parent in (row.cause or "") for row in rows)
