"""The sweeper sends what the stream left behind, once, and reports payloads held too long.

Rows are written as the flows leave them (terminal, resolved some time ago, not
notified); their parents are played by a hook on Step Functions that accepts the
first send of a token and refuses any later one with ``InvalidToken``, as AWS
does (moto would accept a second send).
"""

from __future__ import annotations

import itertools
import json
import random
from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest
from botocore.awsrequest import AWSResponse, HTTPHeaders

from dependency_tracker.app import App
from dependency_tracker.core import clients
from dependency_tracker.core.backoff import Backoff
from dependency_tracker.core.enums import PayloadState, utcnow
from dependency_tracker.core.errors import ConfigurationError
from dependency_tracker.core.settings import Settings
from dependency_tracker.sweeper.flow import SweeperFlow
from dependency_tracker.sweeper.store import CursorStore, SweepStore
from dependency_tracker.table.items import PayloadStateItem, WaiterItem, waiter_id_for
from tests.conftest import DEPENDENCY_TABLE, STATE_TABLE, Aws, moto_query_page
from tests.interleave import Run, Scheduler, explore

if TYPE_CHECKING:
    import io
    from collections.abc import Callable, Sequence
    from datetime import datetime

SEND_OPERATIONS = ("SendTaskSuccess", "SendTaskFailure")
BUCKET = "deptrack-payloads-test"
_ids = itertools.count()


@dataclass
class Parents:
    """Step Functions' token service for the rows' parents: each token answered once."""

    accepted: Counter[str] = field(default_factory=Counter)
    refused: Counter[str] = field(default_factory=Counter)
    on_send: Callable[[], None] | None = None  # what a send costs (time, in budget tests)
    closed: set[str] = field(default_factory=set)  # tasks that timed out before any answer
    sent: list[tuple[str, str]] = field(default_factory=list)  # (token, operation) accepted

    def answer(self, params: dict[str, Any], model: Any) -> tuple[AWSResponse, Any] | None:
        if model.name not in SEND_OPERATIONS:
            return None
        token = json.loads(params["body"])["taskToken"]
        if self.on_send is not None:
            self.on_send()
        if self.accepted[token] or token in self.closed:
            self.refused[token] += 1
            error = {
                "Error": {"Code": "InvalidToken", "Message": "Invalid Token"},
                "ResponseMetadata": {"HTTPStatusCode": 400},
            }
            return AWSResponse("https://states.invalid/", 400, HTTPHeaders(), None), error
        self.accepted[token] += 1
        self.sent.append((token, model.name))
        return AWSResponse("https://states.invalid/", 200, HTTPHeaders(), None), {}

    def __call__(self, params: dict[str, Any], model: Any, **_: Any) -> Any:
        return self.answer(params, model)

    def attach(self, client: Any) -> None:
        for operation in SEND_OPERATIONS:
            client.meta.events.register_first(f"before-call.sfn.{operation}", self)


@pytest.fixture
def parents(aws: Aws) -> Parents:
    waiting = Parents()
    waiting.attach(clients.client("stepfunctions"))
    return waiting


def store(aws: Aws, row: WaiterItem | PayloadStateItem) -> None:
    table = STATE_TABLE if isinstance(row, PayloadStateItem) else DEPENDENCY_TABLE
    aws.dynamodb.put_item(TableName=table, Item=row.to_item())


def waiter(
    *,
    age: timedelta,
    state: PayloadState = PayloadState.SUCCEEDED,
    notified: bool = False,
    token: str | None = None,
) -> WaiterItem:
    """A waiter row resolved ``age`` ago (or registered then, while ``PROCESSING``)."""
    number = next(_ids)
    at = utcnow() - age
    terminal = state.is_terminal
    return WaiterItem(
        payload_id=f"sweep/workflow-pass/item-{number}",
        waiter_id=waiter_id_for(token or f"token-{number}"),
        task_token=token or f"token-{number}",
        workflow_state=state,
        created_at=at - timedelta(minutes=1),
        updated_at=at,
        resolved_at=at if terminal else None,
        execution_arn=f"arn:aws:states:us-east-1:123456789012:execution:deptrack-pass:{number}"
        if terminal
        else None,
        error="TaskFailed" if state is PayloadState.FAILED else None,
        notified_at=at if notified else None,
        notify_outcome="SENT:SUCCEEDED" if notified else None,
    )


def sweeper(
    aws: Aws,
    *,
    dynamodb: Any = None,
    sfn: Any = None,
    cursors: CursorStore | None = None,
    monotonic: Callable[[], float] | None = None,
    clock: Callable[[], datetime] = utcnow,
    **settings: Any,
) -> SweeperFlow:
    """A sweeper over the test tables (its sends never sleep)."""
    dynamodb = dynamodb or aws.dynamodb
    configured = aws.settings.model_copy(update=settings)
    extra: dict[str, Any] = {} if monotonic is None else {"monotonic": monotonic}
    return SweeperFlow(
        settings=configured,
        sweeps=SweepStore(dynamodb, dependency_table=DEPENDENCY_TABLE, state_table=STATE_TABLE),
        callback=App(
            configured,
            {
                "dynamodb": dynamodb,
                "stepfunctions": sfn or clients.client("stepfunctions"),
                "s3": aws.s3,
            },
            backoff=Backoff(sleep=lambda _seconds: None),
        ).callback,
        cursors=cursors,
        clock=clock,
        **extra,
    )


def item_bytes(item: dict[str, Any]) -> int:
    """An item's size as DynamoDB (and moto) count it: names plus values, in bytes."""

    def value_bytes(value: dict[str, Any]) -> int:
        ((kind, raw),) = value.items()
        return 1 if kind == "BOOL" else len(str(raw).encode())

    return sum(len(name.encode()) + value_bytes(value) for name, value in item.items())


def notified(aws: Aws, row: WaiterItem) -> WaiterItem:
    found = aws.dependencies.get(row.payload_id, row.waiter_id)
    assert found is not None
    return found


def test_old_unnotified_terminal_rows_are_sent_and_the_rest_left_alone(
    aws: Aws, parents: Parents
) -> None:
    # GIVEN rows the stream left behind (a success and a failure, resolved 20 minutes ago),
    # a row resolved 5 minutes ago, a row still waiting, and a row already notified
    lost_success = waiter(age=timedelta(minutes=20))
    lost_failure = waiter(age=timedelta(minutes=20), state=PayloadState.FAILED)
    young = waiter(age=timedelta(minutes=5))
    waiting = waiter(age=timedelta(hours=2), state=PayloadState.PROCESSING)
    done = waiter(age=timedelta(hours=2), notified=True)
    for row in (lost_success, lost_failure, young, waiting, done):
        store(aws, row)
    # WHEN the sweeper runs with its default threshold (15 minutes)
    report = sweeper(aws).run()
    # THEN exactly the two lost rows were sent, once each, and marked
    assert parents.accepted == Counter({lost_success.task_token: 1, lost_failure.task_token: 1})
    assert (report.found, report.sent, report.failed) == (2, 2, 0)
    assert notified(aws, lost_success).notify_outcome == "SENT:SUCCEEDED"
    assert notified(aws, lost_failure).notify_outcome == "SENT:FAILED"
    # the others are as they were
    for row in (young, waiting):
        assert notified(aws, row).notified_at is None
    assert notified(aws, waiting).workflow_state is PayloadState.PROCESSING
    assert notified(aws, done) == done
    assert report.passes_completed == ["dependencies", "states"]
    assert report.scanned["dependencies"] == 5
    assert not report.budget_exhausted


def test_a_second_sweep_sends_nothing(aws: Aws, parents: Parents) -> None:
    # GIVEN a row the stream left behind
    lost = waiter(age=timedelta(hours=1))
    store(aws, lost)
    flow = sweeper(aws)
    # WHEN the sweeper runs twice
    first, second = flow.run(), flow.run()
    # THEN the first sent it and the second found nothing left
    assert (first.sent, second.found, second.sent) == (1, 0, 0)
    assert parents.accepted == Counter({lost.task_token: 1})
    assert parents.refused == Counter()


def test_a_parent_gone_is_recorded_not_retried(aws: Aws) -> None:
    # GIVEN a row whose token Step Functions no longer knows (moto answers InvalidToken)
    lost = waiter(age=timedelta(hours=1))
    store(aws, lost)
    # WHEN the sweeper runs twice THEN the row is marked gone once, and left alone after
    first, second = sweeper(aws).run(), sweeper(aws).run()
    assert (first.parents_gone, first.failed, second.found) == (1, 0, 0)
    assert notified(aws, lost).notify_outcome == "PARENT_GONE:InvalidToken"


@dataclass
class Side:
    """One flow's own clients, whose calls the current scheduler gates."""

    dynamodb: Any
    sfn: Any


class Race:
    """The stream handler and a sweep on gated clients, in any order of their AWS calls."""

    def __init__(self, aws: Aws, parents: Parents) -> None:
        self.scheduler: Scheduler | None = None
        self.sides: dict[str, Side] = {}
        session = clients.session()
        for label in ("stream", "sweep"):
            side = Side(session.client("dynamodb"), session.client("stepfunctions"))
            for client in (side.dynamodb, side.sfn):
                client.meta.events.register("before-call.*.*", self._gate(label, parents))
            self.sides[label] = side

    def _gate(self, label: str, parents: Parents) -> Any:
        def gate(params: dict[str, Any], model: Any, **kwargs: Any) -> Any:
            if self.scheduler is not None:
                self.scheduler.hook(label)(model=model, **kwargs)
            return parents.answer(params, model)  # the parents answer once parked

        return gate

    def run(self, flows: dict[str, Any], prefix: Sequence[str]) -> Run:
        self.scheduler = Scheduler(prefix)
        try:
            return self.scheduler.execute(flows)
        finally:
            self.scheduler = None


def test_every_interleaving_of_a_sweep_and_the_stream_handler_answers_the_parent_once(
    aws: Aws,
) -> None:
    parents = Parents()
    race = Race(aws, parents)
    stream, sweep = race.sides["stream"], race.sides["sweep"]
    callback = App(
        aws.settings, {"dynamodb": stream.dynamodb, "stepfunctions": stream.sfn, "s3": aws.s3}
    ).callback
    flow = sweeper(aws, dynamodb=sweep.dynamodb, sfn=sweep.sfn)
    senders: Counter[str] = Counter()

    def run_one(prefix: Sequence[str]) -> Run:
        # GIVEN a row the stream is still retrying after the sweeper's threshold
        row = waiter(age=timedelta(minutes=20))
        store(aws, row)
        # WHEN its stream record and a sweep run in this order of AWS calls
        run = race.run({"stream": lambda: callback.handle(row), "sweep": flow.run}, prefix)
        # THEN the parent was answered exactly once, and the row is marked
        assert run.errors == {}, (run.calls, run.errors)
        assert parents.accepted[row.task_token] == 1
        assert notified(aws, row).notified_at is not None
        first = next(call for call in run.calls if call.endswith(":SendTaskSuccess"))
        senders[first.split(":")[0]] += 1
        return run

    runs = list(explore(run_one))
    # both orders happened, and some where both read the row before either sent
    assert len(runs) >= 20
    assert set(senders) == {"stream", "sweep"}
    assert sum(parents.refused.values()) > 0


def test_payloads_held_past_their_lease_are_reported_not_started(
    aws: Aws, log_lines: io.StringIO
) -> None:
    # GIVEN a payload claimed two days ago and still CLAIMED, one PROCESSING for an hour,
    # one PROCESSING for two days, one that ended long ago (lease: one day), and an
    # Express run PROCESSING for 20 minutes (its lease: 10 minutes)
    now = utcnow()

    def payload_item(
        name: str, state: PayloadState, age: timedelta, arn: str | None = None
    ) -> PayloadStateItem:
        at = now - age
        return PayloadStateItem(
            execution_arn=arn,
            payload_id=f"stuck/workflow-pass/{name}",
            state=state,
            workflow="pass",
            attempt=1,
            created_at=at,
            updated_at=at,
            claimed_at=at,
            finished_at=at if state.is_terminal else None,
        )

    claimed = payload_item("claimed", PayloadState.CLAIMED, timedelta(days=2))
    running = payload_item("running", PayloadState.PROCESSING, timedelta(hours=1))
    stale = payload_item("stale", PayloadState.PROCESSING, timedelta(days=2))
    ended = payload_item("ended", PayloadState.SUCCEEDED, timedelta(days=30))
    express = payload_item(
        "express",
        PayloadState.PROCESSING,
        timedelta(minutes=20),
        arn="arn:aws:states:us-east-1:123456789012:express:deptrack-fast:express-1:0a1b2c3d",
    )
    for item in (claimed, running, stale, ended, express):
        store(aws, item)
    # WHEN the sweeper runs
    report = sweeper(aws).run()
    # THEN the three held past their lease are counted and named, each in a warning
    assert report.stuck_payloads == 3
    assert sorted(report.stuck_examples) == sorted(
        [claimed.payload_id, stale.payload_id, express.payload_id]
    )
    warned = [
        json.loads(line)
        for line in log_lines.getvalue().splitlines()
        if "payload held past its claim lease" in line
    ]
    assert sorted(line["stuck_payload_id"] for line in warned) == sorted(report.stuck_examples)
    assert {line["state"] for line in warned} == {"CLAIMED", "PROCESSING"}
    held = {
        line["stuck_payload_id"]: (line["held_seconds"], line["lease_seconds"]) for line in warned
    }
    assert held[stale.payload_id][0] >= 2 * 86_400 - 60
    assert held[stale.payload_id][1] == 86_400
    assert held[express.payload_id][1] == 600
    # and nothing was started or changed
    assert aws.states.get(claimed.payload_id) == claimed
    assert aws.states.get(stale.payload_id) == stale
    assert aws.sfn.list_state_machines()["stateMachines"] == []


def test_a_sweep_stops_at_its_page_budget_and_the_next_one_continues(
    aws: Aws, parents: Parents
) -> None:
    # GIVEN five rows the stream left behind, Scan pages of two rows, one page per run,
    # and a cursor kept in the payload bucket
    lost = [waiter(age=timedelta(hours=1)) for _ in range(5)]
    for row in lost:
        store(aws, row)
    aws.s3.create_bucket(Bucket=BUCKET)
    cursors = CursorStore(aws.s3, BUCKET)
    flow = sweeper(aws, cursors=cursors, sweeper_max_pages=1)
    size = max(item_bytes(row.to_item()) for row in lost)
    reports = []
    with moto_query_page(int(size * 2.5)):
        # WHEN it runs until a pass of the dependency table completes
        for _ in range(5):
            reports.append(flow.run())
            if "dependencies" in reports[-1].passes_completed:
                break
            # THEN each unfinished run left a cursor for the next
            saved = cursors.load(dependency_table=DEPENDENCY_TABLE, state_table=STATE_TABLE)
            assert saved.dependencies is not None
    # THEN three runs of one page each sent every row exactly once
    assert [report.pages["dependencies"] for report in reports] == [1, 1, 1]
    assert [report.sent for report in reports] == [2, 2, 1]
    assert all(report.budget_exhausted for report in reports[:-1])
    assert parents.accepted == Counter({row.task_token: 1 for row in lost})
    # and the next run starts a new pass from the top
    after = cursors.load(dependency_table=DEPENDENCY_TABLE, state_table=STATE_TABLE)
    assert after.at_top


@dataclass
class Stopwatch:
    """Monotonic time that moves only when a send is made (each takes ``per_send`` s)."""

    per_send: float
    now: float = 0.0

    def __call__(self) -> float:
        return self.now

    def tick(self) -> None:
        self.now += self.per_send


def test_a_sweep_stops_at_its_time_budget_and_the_next_one_redoes_the_page(
    aws: Aws, parents: Parents
) -> None:
    # GIVEN three rows the stream left behind, a 60 s budget (45 s for the rows), and
    # sends that take 30 s each
    lost = [waiter(age=timedelta(hours=1)) for _ in range(3)]
    for row in lost:
        store(aws, row)
    watch = Stopwatch(per_send=30.0)
    parents.on_send = watch.tick
    flow = sweeper(aws, monotonic=watch, sweeper_time_budget_seconds=60)
    # WHEN it runs twice
    first = flow.run()
    second = flow.run()
    # THEN the first stopped once its rows' share was spent (two sends, 60 s > 45 s),
    # and the second, from the same page, sent the one left
    assert first.budget_exhausted
    assert (first.sent, second.sent) == (2, 1)
    assert second.found == 1  # the page again: the two sent are filtered out
    assert "dependencies" in second.passes_completed
    assert parents.accepted == Counter({row.task_token: 1 for row in lost})
    assert sum(parents.refused.values()) == 0


def test_rows_in_random_order_of_age_are_judged_by_resolution_time(
    aws: Aws, parents: Parents
) -> None:
    # GIVEN rows resolved from 1 to 30 minutes ago, in random order
    ages = list(range(1, 31))
    random.Random(15).shuffle(ages)
    rows = {age: waiter(age=timedelta(minutes=age)) for age in ages}
    for row in rows.values():
        store(aws, row)
    # WHEN the sweeper runs with a threshold of 10.5 minutes
    report = sweeper(aws, sweeper_min_age_seconds=630).run()
    # THEN exactly the rows older than that were sent
    assert report.sent == 20
    assert set(parents.accepted) == {rows[age].task_token for age in ages if age > 10}


def test_the_sweeper_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN no sweeper variable WHEN settings are read THEN they hold the defaults
    defaults = Settings.from_env()
    assert (defaults.sweeper_min_age_seconds, defaults.sweeper_max_pages) == (900, 100)
    # GIVEN the sweeper's variables set (the template sets them on the sweeper alone)
    monkeypatch.setenv("DEPTRACK_SWEEPER_MIN_AGE_SECONDS", "0")
    monkeypatch.setenv("DEPTRACK_SWEEPER_MAX_PAGES", "7")
    monkeypatch.setenv("DEPTRACK_SWEEPER_TIME_BUDGET_SECONDS", "30")
    configured = Settings.from_env()
    assert (
        configured.sweeper_min_age_seconds,
        configured.sweeper_max_pages,
        configured.sweeper_time_budget_seconds,
    ) == (0, 7, 30)
    # AND a page budget of 0 is refused
    monkeypatch.setenv("DEPTRACK_SWEEPER_MAX_PAGES", "0")
    with pytest.raises(ConfigurationError, match="at least 1"):
        Settings.from_env()
