"""Idle pumps are cheap: the runner's backoff and wake-up, the pumps' cached listings.

The runner tests replace the rest with an :class:`Activity` that records what it was
asked to wait (and never sleeps), or that never times out, so nothing depends on the
machine's speed. The listing tests count a moto client's calls with a botocore hook.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest

from dependency_tracker_local.pumps import ExecutionPump, StreamPump
from dependency_tracker_local.runner import Activity, PumpRunner
from tests.conftest import ACCOUNT, PASS_WORKFLOW, PREFIX, REGION, Aws, wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator

POLL = 0.05
MAX_IDLE = 0.5


class RecordingActivity(Activity):
    """Records each rest the runner asks for and ends it at once, as a timeout would."""

    def __init__(self) -> None:
        super().__init__()
        self.rests: list[float] = []
        self.notified = 0

    def notify(self) -> None:
        self.notified += 1
        super().notify()

    def wait(self, seen: int, timeout: float) -> bool:
        self.rests.append(timeout)
        return False


class PatientActivity(Activity):
    """Rests of the thread named ``pump-resting`` last an hour unless something wakes them."""

    def wait(self, seen: int, timeout: float) -> bool:
        if threading.current_thread().name == "pump-resting":
            timeout = 3600.0
        return super().wait(seen, timeout)


@dataclass
class ScriptedPump:
    """Moves what ``script`` says round by round, then nothing; ``done`` once it ran out."""

    script: list[int]
    name: str = "scripted"
    rounds: int = 0
    done: threading.Event = field(default_factory=threading.Event)

    def pump_once(self) -> int:
        self.rounds += 1
        if self.rounds > len(self.script):
            self.done.set()
            return 0
        return self.script[self.rounds - 1]


@dataclass
class OnDemandPump:
    """Delivers one event each time ``go`` is set; never rests long (``rest_limit``)."""

    name: str = "busy"
    go: threading.Event = field(default_factory=threading.Event)

    def pump_once(self) -> int:
        if not self.go.is_set():
            return 0
        self.go.clear()
        return 1

    def rest_limit(self) -> float | None:
        return 0.0


@pytest.fixture
def runner_factory() -> Iterator[list[PumpRunner]]:
    """Runners a test starts, stopped after it whatever happened."""
    runners: list[PumpRunner] = []
    yield runners
    for runner in runners:
        runner.stop()


def test_the_rest_doubles_while_dry_and_resets_after_a_round_that_moved(
    runner_factory: list[PumpRunner],
) -> None:
    # GIVEN a pump dry for six rounds, then moving two events, then dry again
    pump = ScriptedPump(script=[0, 0, 0, 0, 0, 0, 2, 0, 0])
    activity = RecordingActivity()
    runner = PumpRunner([pump], poll_interval=POLL, max_idle=MAX_IDLE, activity=activity)
    runner_factory.append(runner)
    # WHEN the runner runs it past its script
    runner.start()
    wait_until(pump.done.is_set)
    runner.stop()
    # THEN each dry round rested twice as long, up to the cap; the delivery reset the rest
    # and woke the others
    assert activity.rests[:8] == pytest.approx([0.05, 0.1, 0.2, 0.4, 0.5, 0.5, 0.05, 0.1])
    assert activity.notified >= 1


def test_a_delivery_by_another_pump_ends_a_long_rest(runner_factory: list[PumpRunner]) -> None:
    # GIVEN a dry pump that would rest an hour, and a pump that delivers when told
    resting = ScriptedPump(script=[], name="resting")
    busy = OnDemandPump()
    runner = PumpRunner([resting, busy], poll_interval=0.001, activity=PatientActivity())
    runner_factory.append(runner)
    runner.start()
    wait_until(lambda: resting.rounds >= 1)
    assert resting.rounds == 1
    # WHEN the other pump delivers an event
    busy.go.set()
    # THEN the resting pump runs a round now, not in an hour
    wait_until(lambda: resting.rounds >= 2, timeout=10.0)


def test_a_pump_bounds_its_own_rest() -> None:
    # GIVEN a pump due again in 0.2 s, and one with a retry waiting
    runner = PumpRunner([], poll_interval=POLL, max_idle=MAX_IDLE)
    due = OnDemandPump()
    due.rest_limit = lambda: 0.2  # type: ignore[method-assign]
    # THEN the runner rests no longer than the pump allows, and never under poll_interval
    assert runner._bounded(due, 0.5) == pytest.approx(0.2)
    assert runner._bounded(OnDemandPump(), 0.5) == pytest.approx(POLL)
    assert runner._bounded(ScriptedPump(script=[]), 0.5) == pytest.approx(0.5)


class FrozenClock:
    """A monotonic clock that moves only when told."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _count_calls(client: Any) -> Counter[str]:
    calls: Counter[str] = Counter()

    def count(model: Any, **_: Any) -> None:
        calls[model.name] += 1

    client.meta.events.register("before-call", count)
    return calls


def test_the_stream_pump_describes_the_stream_on_its_first_round_only(aws: Aws) -> None:
    # GIVEN a stream pump whose shard list is fresh
    pump = StreamPump(
        streams=aws.streams,
        stream_arn=aws.stream_arn,
        handler=lambda event, context: None,
        region=REGION,
        clock=FrozenClock(),
        platform=None,
    )
    calls = _count_calls(aws.streams)
    # WHEN it runs three rounds
    for _ in range(3):
        pump.pump_once()
    # THEN it described the stream once and read its shard every round
    assert calls["DescribeStream"] == 1
    assert calls["GetRecords"] == 3


@dataclass
class ClosingStream:
    """A streams client whose one shard ends on the first read, then gains a child."""

    shards: list[str] = field(default_factory=lambda: ["shard-1"])
    described: int = 0

    def describe_stream(self, StreamArn: str) -> dict[str, Any]:  # noqa: N803  (boto3's name)
        self.described += 1
        return {"StreamDescription": {"Shards": [{"ShardId": s} for s in self.shards]}}

    def get_shard_iterator(self, **kwargs: Any) -> dict[str, Any]:
        return {"ShardIterator": f"it-{kwargs['ShardId']}"}

    def get_records(self, ShardIterator: str) -> dict[str, Any]:  # noqa: N803  (boto3's name)
        if ShardIterator == "it-shard-1":
            self.shards.append("shard-2")
            return {"Records": []}  # no NextShardIterator: the shard is closed
        return {"Records": [], "NextShardIterator": ShardIterator}


def test_a_closed_shard_makes_the_stream_pump_describe_the_stream_again() -> None:
    # GIVEN a stream whose shard closes on the first read
    streams = ClosingStream()
    pump = StreamPump(
        streams=streams,
        stream_arn="arn",
        handler=lambda event, context: None,
        region=REGION,
        clock=FrozenClock(),
        platform=None,
    )
    pump.pump_once()
    # WHEN the next rounds run
    pump.pump_once()
    pump.pump_once()
    # THEN the second round described it again and found the child; the third did not
    assert streams.described == 2
    assert pump._iterators == {"shard-1": None, "shard-2": "it-shard-2"}


def test_the_execution_pump_lists_state_machines_only_when_its_list_is_old(aws: Aws) -> None:
    # GIVEN a managed workflow with a finished execution, and a pump that delivered it
    first = aws.create_workflow("pass", PASS_WORKFLOW)
    delivered: list[str] = []
    clock = FrozenClock()
    pump = ExecutionPump(
        sfn=aws.sfn,
        handler=lambda event, context: delivered.append(event["detail"]["executionArn"]),
        prefix=PREFIX,
        region=REGION,
        account=ACCOUNT,
        clock=clock,
        platform=None,
    )
    done = aws.sfn.start_execution(stateMachineArn=first, name="one", input=json.dumps({}))
    aws.wait_for_execution(done["executionArn"])
    assert pump.pump_once() == 1
    calls = _count_calls(aws.sfn)
    # WHEN a workflow is created meanwhile and runs, and the pump rounds with a fresh list
    late = aws.create_workflow("late", PASS_WORKFLOW)
    ran = aws.sfn.start_execution(stateMachineArn=late, name="two", input=json.dumps({}))
    aws.wait_for_execution(ran["executionArn"])
    idle = pump.pump_once()
    # THEN that round listed no state machine (and delivered nothing again) ...
    assert (idle, calls["ListStateMachines"]) == (0, 0)
    # ... and the first round once the list is old picks the new workflow up
    clock.now += pump.machine_refresh_seconds
    assert pump.pump_once() == 1
    assert calls["ListStateMachines"] == 1
    assert delivered == [done["executionArn"], ran["executionArn"]]


def test_a_state_machine_deleted_after_the_list_was_read_fails_no_round(aws: Aws) -> None:
    # GIVEN a pump whose fresh list names a workflow that is then deleted
    gone = aws.create_workflow("gone", PASS_WORKFLOW)
    pump = ExecutionPump(
        sfn=aws.sfn,
        handler=lambda event, context: None,
        prefix=PREFIX,
        region=REGION,
        account=ACCOUNT,
        clock=FrozenClock(),
        platform=None,
    )
    pump.pump_once()
    aws.sfn.delete_state_machine(stateMachineArn=gone)
    calls = _count_calls(aws.sfn)
    # WHEN it runs two more rounds
    # THEN neither fails, and the second reads the list again at once
    assert (pump.pump_once(), pump.pump_once()) == (0, 0)
    assert calls["ListStateMachines"] == 1


def test_the_execution_pump_keeps_its_pace_while_an_execution_it_saw_start_is_young(
    aws: Aws,
) -> None:
    # GIVEN a managed workflow whose execution waits a minute
    waits = {"StartAt": "Wait", "States": {"Wait": {"Type": "Wait", "Seconds": 60, "End": True}}}
    machine = aws.create_workflow("waits", waits)
    clock = FrozenClock()
    pump = ExecutionPump(
        sfn=aws.sfn,
        handler=lambda event, context: None,
        prefix=PREFIX,
        region=REGION,
        account=ACCOUNT,
        clock=clock,
        platform=None,
    )
    assert pump.rest_limit() is None
    arn = aws.sfn.start_execution(stateMachineArn=machine, name="slow")["executionArn"]
    try:
        # WHEN the pump sees it running
        pump.pump_once()
        # THEN it asks for no long rest until the execution is no longer young
        assert pump.rest_limit() == 0.0
        clock.now += pump.watch_seconds
        assert pump.rest_limit() is None
    finally:
        aws.sfn.stop_execution(executionArn=arn)
