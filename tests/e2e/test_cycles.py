"""Dependency cycles end at once with DependencyCycle instead of deadlocking until timeouts.

Each payload here runs one of the tracker's own parent machines as its workflow
(``wait-for-dependencies`` or ``wait-for-join``) and names itself as the waiter
(``payload_id``), so payloads wait on payloads exactly as nested pipelines do.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import pytest

from dependency_tracker.core.enums import DependencyError, PayloadState
from dependency_tracker.payloads.model import ProcessPayload
from tests.conftest import wait_until
from tests.e2e.conftest import finished, start_parent, state_of, waiters

if TYPE_CHECKING:
    from dependency_tracker.table.items import WaiterItem
    from dependency_tracker_local import LocalStack

pytestmark = pytest.mark.e2e

# Long on purpose: a deadlock would only end here; the cycle must end long before.
TIMEOUT = 600


def waiting_payload(item: str, workflow: str, dependencies: list[dict[str, Any]]) -> dict[str, Any]:
    """A payload whose workflow is a parent machine waiting on ``dependencies`` as itself."""
    body: dict[str, Any] = {
        "type": "FeatureCollection",
        "features": [{"type": "Feature", "id": item, "collection": "cycles"}],
        "process": [{"workflow": workflow}],
        "dependencies": dependencies,
        "timeout_seconds": TIMEOUT,
    }
    body["payload_id"] = ProcessPayload.model_validate(body).id
    return body


def id_of(body: dict[str, Any]) -> str:
    return str(body["payload_id"])


def execution_of(stack: LocalStack, body: dict[str, Any]) -> dict[str, Any]:
    """The payload's execution, once the tracker started it and it stopped."""

    def started() -> str | None:
        item = state_of(stack, id_of(body))
        return None if item is None else item.execution_arn

    arn: str = wait_until(started, timeout=30)
    return finished(stack, arn)


def refused_cycle(stack: LocalStack, payload_id: str) -> str:
    """The cycle on the one refused waiter row under ``payload_id``, once notified.

    (The parent's execution carries only the error name: moto's Map state drops
    an iteration's cause, so the row is where the test reads the cycle.)
    """

    def refused() -> list[WaiterItem]:
        rows = waiters(stack).waiters(payload_id)
        return [r for r in rows if r.error_name is DependencyError.CYCLE and r.notified_at]

    found: list[WaiterItem] = wait_until(refused)
    (row,) = found
    assert row.workflow_state is PayloadState.INVALID
    assert row.notify_outcome == "SENT:INVALID"
    prefix = "waiting would close a dependency cycle: "
    assert row.cause is not None
    assert row.cause.startswith(prefix)
    return row.cause.removeprefix(prefix)


def test_two_payloads_waiting_on_each_other(stack: LocalStack) -> None:
    # GIVEN A waits on B, and B (started by A's wait) waits on A
    a_id = "cycles/workflow-wait-for-dependencies/two-a"
    b = waiting_payload("two-b", "wait-for-dependencies", [{"wait_for": a_id}])
    a = waiting_payload("two-a", "wait-for-dependencies", [b])
    assert id_of(a) == a_id
    began = time.monotonic()
    # WHEN a top-level parent waits on A
    top = start_parent(stack, "cycle-two", [a], timeout_seconds=TIMEOUT)
    # THEN B's wait, which closes the cycle, is refused with DependencyCycle ...
    b_run = execution_of(stack, b)
    assert (b_run["status"], b_run["error"]) == ("FAILED", DependencyError.CYCLE.value)
    assert refused_cycle(stack, id_of(a)) == f"{id_of(b)} -> {id_of(a)} -> {id_of(b)}"
    # ... so B fails, A hears DependencyFailed, and the top parent too: nobody hangs
    a_run = execution_of(stack, a)
    assert (a_run["status"], a_run["error"]) == ("FAILED", "DependencyFailed")
    top_run = finished(stack, top)
    assert (top_run["status"], top_run["error"]) == ("FAILED", "DependencyFailed")
    assert time.monotonic() - began < TIMEOUT / 10
    a_state, b_state = state_of(stack, id_of(a)), state_of(stack, id_of(b))
    assert a_state is not None
    assert b_state is not None
    assert (a_state.state, b_state.state) == (PayloadState.FAILED, PayloadState.FAILED)


def test_a_longer_cycle_through_a_join(stack: LocalStack) -> None:
    # GIVEN A joins on {B}, B waits on C, and C waits on A: a cycle of three
    a_id = "cycles/workflow-wait-for-join/three-a"
    c = waiting_payload("three-c", "wait-for-dependencies", [{"wait_for": a_id}])
    b = waiting_payload("three-b", "wait-for-dependencies", [c])
    a = waiting_payload("three-a", "wait-for-join", [b])
    assert id_of(a) == a_id
    top = start_parent(stack, "cycle-three", [a], timeout_seconds=TIMEOUT)
    # THEN C's wait on A closes it and is refused; the failure unwinds the chain
    c_run = execution_of(stack, c)
    assert (c_run["status"], c_run["error"]) == ("FAILED", "DependencyCycle")
    cycle = f"{id_of(c)} -> {id_of(a)} -> {id_of(b)} -> {id_of(c)}"
    assert refused_cycle(stack, id_of(a)) == cycle
    b_run = execution_of(stack, b)
    assert (b_run["status"], b_run["error"]) == ("FAILED", "DependencyFailed")
    a_run = execution_of(stack, a)
    assert (a_run["status"], a_run["error"]) == ("FAILED", "QuorumUnreachable")
    top_run = finished(stack, top)
    assert (top_run["status"], top_run["error"]) == ("FAILED", "DependencyFailed")
