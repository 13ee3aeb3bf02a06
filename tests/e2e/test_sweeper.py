"""End to end: a stream record the event source mapping discarded is recovered by the sweeper.

A real parent (``wait-for-dependencies``) waits on a real child. Step Functions
refuses every ``SendTaskSuccess`` about that child until the stream pump gives
the record up (the local stand-in for the mapping's ``MaximumRetryAttempts``:
only the record's metadata reaches the failure destination, and the row stays
terminal with no ``notified_at``). Then the refusals stop, and the sweeper, on
the stack's own schedule, wakes the parent.
"""

from __future__ import annotations

import contextlib
import io
import json
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import pytest

from dependency_tracker.handlers import callback, sweeper
from dependency_tracker_local import LocalStack
from dependency_tracker_local.pumps import SchedulePump
from tests.chaos.hot import SendProbe
from tests.conftest import wait_until
from tests.e2e.conftest import dependency, dependency_id, finished, start_parent, waiters
from tests.unit.flows.test_callback_backoff import SendStorm

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def stack() -> Iterator[LocalStack]:
    """The embedded stack, its sweeper every half second for rows a second old."""
    with LocalStack(
        prefix="deptrack", sink=io.StringIO(), sweeper_interval=0.5, sweeper_min_age_seconds=1
    ) as running:
        yield running


@dataclass
class StormAbout(SendStorm):
    """A :class:`SendStorm` that refuses only the sends about one payload."""

    payload_id: str = ""

    def __call__(self, model: Any, **kwargs: Any) -> Any:
        body = json.loads(kwargs["params"].get("body") or b"{}")
        if json.loads(body.get("output") or "{}").get("payload_id") != self.payload_id:
            return None
        return super().__call__(model, **kwargs)


def send_clients(stack: LocalStack) -> list[Any]:
    """The Step Functions clients both functions send through; their retries skip sleeps.

    One client: the stack builds every flow before its pump threads start, and
    ``clients.client`` caches it. Collected by identity all the same, so that a
    second client would be hooked too rather than silently missed.
    """
    found: list[Any] = []
    for flow in (callback.callback_flow(), sweeper.sweeper_flow().callback):
        flow.backoff = replace(flow.backoff, sleep=lambda _seconds: None)
        if all(flow.sfn is not seen for seen in found):
            found.append(flow.sfn)
    return found


def test_a_discarded_stream_record_is_recovered_by_the_scheduled_sweeper(
    stack: LocalStack,
) -> None:
    item = "sweep-lost"
    pid = dependency_id(item)
    schedule = stack.pumps["sweeper"]
    assert isinstance(schedule, SchedulePump)
    sends = SendProbe()
    storm = StormAbout(payload_id=pid)
    with contextlib.ExitStack() as hooks:
        for sfn in send_clients(stack):
            sends.attach(sfn)
            hooks.callback(sends.detach, sfn)
            hooks.enter_context(storm.on(sfn))
        # GIVEN a real parent waiting on a child, and every callback about the child
        # refused until the stream's event source mapping discards the record
        parent = start_parent(stack, "sweep-lost", [dependency(item)])
        discarded = wait_until(
            lambda: [
                record
                for record in stack.dead_letters["callback"]
                if record["dynamodb"]["Keys"]["payload_id"]["S"] == pid
            ],
            timeout=30,
        )
        (row,) = waiters(stack).waiters(pid)
        assert row.notified_at is None  # terminal, un-notified: left for good
        # WHEN the storm is over
        storm.active = False
        # THEN the sweeper, on its schedule, wakes the parent
        described = finished(stack, parent, timeout=30)
    assert len(discarded) == 1
    assert described["status"] == "SUCCEEDED"
    (summary,) = json.loads(described["output"])["dependencies"]
    assert summary["payload_id"] == pid
    # answered by exactly one accepted send, after the refusals
    mine = sends.by_token()[row.task_token]
    assert [send.status for send in mine if send.status == 200] == [200]
    assert storm.refused >= 4  # the stream's four deliveries, each retried in place
    (done,) = waiters(stack).waiters(pid)
    # The stream gave the record up (dead letter): the one sender left is the sweeper, on its
    # schedule. (A sweep already under way when the storm ended may be the one: counting
    # invocations from that moment raced with it, seen once in CI.)
    assert done.notify_outcome == "SENT:SUCCEEDED"
    assert schedule.invocations >= 1
    assert schedule.failures == 0


def test_sweep_once_runs_the_sweeper_now(stack: LocalStack) -> None:
    # WHEN a test asks for a sweep THEN it gets the run's report
    report = stack.sweep_once()
    assert report["passes_completed"] == ["dependencies", "states"]
    assert report["failed"] == 0
