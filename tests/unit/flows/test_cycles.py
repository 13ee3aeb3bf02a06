"""Dependency cycles: a wait that would close a cycle is refused with DependencyCycle."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest

from dependency_tracker.core import clients as client_factory
from dependency_tracker.core.enums import DependencyError, PayloadState
from dependency_tracker.core.tokens import token_hash
from dependency_tracker.cycles.edges import WaitEdges
from dependency_tracker.cycles.guard import Cycle, CycleGuard
from dependency_tracker.intake.parse import read_message
from dependency_tracker.joins.store import JoinStore
from dependency_tracker.payloads.model import ProcessPayload
from dependency_tracker.payloads.state_table import StateTable
from dependency_tracker.table.items import (
    EDGE_PARTITION_PREFIX,
    Resolution,
    membership_id_for,
    waiter_id_for,
)
from dependency_tracker.waits.process import ProcessAction
from tests.conftest import Aws, payload, payload_id
from tests.interleave import Flow, Run, Scheduler, explore

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from dependency_tracker.intake.route import Intake


def guard(aws: Aws, max_length: int = 10, max_nodes: int = 1_000) -> CycleGuard:
    edges = WaitEdges(aws.dynamodb, aws.dependencies.table_name, retention_days=7)
    return CycleGuard(states=aws.states, edges=edges, max_length=max_length, max_nodes=max_nodes)


def running(aws: Aws, *names: str) -> list[str]:
    """Claim each payload (a live attempt 1); returns their ids."""
    ids = []
    for name in names:
        model = ProcessPayload.model_validate(payload(name))
        aws.states.claim(model, None)
        ids.append(model.id)
    return ids


def flow(aws: Aws) -> Intake:
    return aws.app().process


def wait_message(name: str, waiter: str, token: str) -> str:
    """A process message: the payload ``name`` and a callback from ``waiter``."""
    return json.dumps(
        {**payload(name), "callback": {"task_token": token, "waiter_payload_id": waiter}}
    )


def handle(aws: Aws, body: str, message_id: str = "m-1") -> ProcessAction:
    process = flow(aws)
    return process.handle(process.parse(body, message_id=message_id))


def edge_items(aws: Aws) -> list[dict[str, Any]]:
    items = aws.dynamodb.scan(TableName=aws.dependencies.table_name)["Items"]
    return [i for i in items if i["payload_id"]["S"].startswith(EDGE_PARTITION_PREFIX)]


# ---------------------------------------------------------------- the search


def test_two_payloads_waiting_on_each_other_close_a_cycle(aws: Aws) -> None:
    # GIVEN A waiting on B
    a, b = running(aws, "a", "b")
    check = guard(aws)
    assert check.admit(a, [b], via="token#1") is None
    # WHEN B asks to wait on A
    cycle = check.admit(b, [a], via="token#2")
    # THEN the wait closes the cycle B -> A -> B
    assert cycle is not None
    assert cycle.path == (b, a, b)
    assert cycle.length == 2


def test_longer_cycles_are_found_up_to_the_configured_length(aws: Aws) -> None:
    # GIVEN A -> B -> C -> D (each a live payload)
    a, b, c, d = running(aws, "a", "b", "c", "d")
    for waiter, target, via in ((a, b, "t1"), (b, c, "t2"), (c, d, "t3")):
        assert guard(aws).admit(waiter, [target], via=via) is None
    # THEN D -> A closes a cycle of 4 payloads: seen at length 4, not at 3
    assert guard(aws, max_length=3).find(d, [a]) is None
    cycle = guard(aws, max_length=4).find(d, [a])
    assert cycle is not None
    assert cycle.path == (d, a, b, c, d)
    assert cycle.describe() == f"{d} -> {a} -> {b} -> {c} -> {d}"


def test_a_payload_waiting_on_itself_is_a_cycle_of_one(aws: Aws) -> None:
    (a,) = running(aws, "a")
    cycle = guard(aws, max_length=1).admit(a, [a], via="t1")
    assert cycle is not None
    assert cycle.path == (a, a)


def test_a_finished_payload_breaks_the_cycle(aws: Aws) -> None:
    # GIVEN A waited on B, but A has ended since
    b = running(aws, "b")[0]
    a = aws.finished_payload(payload("a"), PayloadState.FAILED).payload_id
    assert guard(aws).admit(a, [b], via="t1") is None
    # THEN B may wait on A: A blocks nobody (B's wait is simply replayed)
    assert guard(aws).admit(b, [a], via="t2") is None


def test_waits_of_an_earlier_attempt_do_not_count(aws: Aws) -> None:
    # GIVEN A (attempt 1) waited on B, then A failed and started attempt 2
    a, b = running(aws, "a", "b")
    assert guard(aws).admit(a, [b], via="t1") is None
    model = ProcessPayload.model_validate(payload("a"))
    aws.states.set_processing(a, 1, "arn:a1")
    aws.states.set_final(
        payload_id=a, workflow="pass", state=PayloadState.FAILED, execution_arn="arn:a1", attempt=1
    )
    seen = aws.states.get(a)
    aws.states.claim(model, seen)
    # THEN B waiting on A closes no cycle: attempt 2 of A does not wait on B
    assert guard(aws).admit(b, [a], via="t2") is None
    # AND once attempt 2 waits on B again, the cycle is back
    assert guard(aws).admit(a, [b], via="t3") is not None


def test_an_untracked_waiter_counts_as_live(aws: Aws) -> None:
    # GIVEN a parent that the tracker never ran (no state item) waits on B
    (b,) = running(aws, "b")
    assert guard(aws).admit("outside/parent", [b], via="t1") is None
    # THEN B waiting on that parent is a cycle
    cycle = guard(aws).admit(b, ["outside/parent"], via="t2")
    assert cycle is not None


def test_a_refused_wait_is_not_followed_and_stays_refused(aws: Aws) -> None:
    # GIVEN B's wait on A was refused (A waits on B)
    a, b, c = running(aws, "a", "b", "c")
    assert guard(aws).admit(a, [b], via="t1") is None
    refused = guard(aws).admit(b, [a], via="t2")
    assert refused is not None
    # THEN a later check does not follow the refused edge B -> A ...
    assert guard(aws).admit(c, [b], via="t3") is None
    assert guard(aws).find(a, [c]) is None
    # ... and a redelivery of the refused wait is refused again with the same cycle
    again = guard(aws).admit(b, [a], via="t2")
    assert again == refused
    # even once the cycle has broken: the parent was already told
    aws.states.set_processing(a, 1, "arn:a")
    aws.states.set_final(
        payload_id=a,
        workflow="pass",
        state=PayloadState.SUCCEEDED,
        execution_arn="arn:a",
        attempt=1,
    )
    assert guard(aws).admit(b, [a], via="t2") == refused


def test_the_search_stops_at_its_node_budget(aws: Aws) -> None:
    # GIVEN A waits on five payloads, one of which waits on W
    ids = running(aws, "a", "w", "x1", "x2", "x3", "x4", "x5")
    a, w, fan = ids[0], ids[1], ids[2:]
    assert guard(aws).admit(a, fan, via="t1") is None
    assert guard(aws).admit(fan[-1], [w], via="t2") is None
    # THEN with room for every node the cycle W -> A -> x5 -> W is found; with 3 it is not
    assert guard(aws).find(w, [a]) is not None
    assert guard(aws, max_nodes=3).find(w, [a]) is None


def test_depth_zero_turns_the_check_off(aws: Aws) -> None:
    a, b = running(aws, "a", "b")
    off = guard(aws, max_length=0)
    assert off.admit(a, [b], via="t1") is None
    assert off.admit(b, [a], via="t2") is None
    assert edge_items(aws) == []


# ---------------------------------------------------------------- the process flow


@pytest.fixture
def sent(aws: Aws) -> Iterator[list[dict[str, Any]]]:
    """Parameters of every SendTaskFailure/SendTaskSuccess the callback flow makes."""
    calls: list[dict[str, Any]] = []

    def record(params: dict[str, Any], model: Any, **_: Any) -> None:
        if model.name.startswith("SendTask"):
            calls.append({"operation": model.name, **params})

    aws.sfn.meta.events.register("provide-client-params.sfn", record)
    yield calls
    aws.sfn.meta.events.unregister("provide-client-params.sfn", record)


@pytest.mark.usefixtures("workflows")
def test_the_closing_wait_gets_dependency_cycle(aws: Aws, sent: list[dict[str, Any]]) -> None:
    # GIVEN payload A (running) waits on B; B runs and its workflow waits on A
    assert handle(aws, json.dumps(payload("a"))) is ProcessAction.STARTED
    a, b = payload_id("a"), payload_id("b")
    assert handle(aws, wait_message("b", a, "token-a")) is ProcessAction.STARTED
    # WHEN B's wait on A arrives
    action = handle(aws, wait_message("a", b, "token-b"), message_id="m-2")
    # THEN it is refused: the row tells the parent DependencyCycle with the cycle
    assert action is ProcessAction.REFUSED
    row = aws.dependencies.get(a, waiter_id_for("token-b"))
    assert row is not None
    assert row.workflow_state is PayloadState.INVALID
    assert row.error_name is DependencyError.CYCLE
    assert row.cause == f"waiting would close a dependency cycle: {b} -> {a} -> {b}"
    # AND the callback flow sends SendTaskFailure(DependencyCycle) to B's parent
    callback = aws.app(dependencies=aws.dependencies).callback
    callback.handle(row)
    assert [c["operation"] for c in sent] == ["SendTaskFailure"]
    assert sent[0]["taskToken"] == "token-b"
    assert sent[0]["error"] == "DependencyCycle"
    cause = json.loads(sent[0]["cause"])
    assert cause["payload_id"] == a
    assert cause["error"] == "DependencyCycle"
    assert b in cause["cause"]
    # AND A's own wait on B still stands
    first = aws.dependencies.get(b, waiter_id_for("token-a"))
    assert first is not None
    assert first.workflow_state is PayloadState.PROCESSING


@pytest.mark.usefixtures("workflows")
def test_a_refused_wait_redelivered_stays_refused(aws: Aws) -> None:
    handle(aws, json.dumps(payload("a")))
    a, b = payload_id("a"), payload_id("b")
    handle(aws, wait_message("b", a, "token-a"))
    body = wait_message("a", b, "token-b")
    assert handle(aws, body, message_id="m-2") is ProcessAction.REFUSED
    before = aws.dependencies.get(a, waiter_id_for("token-b"))
    # WHEN the same message arrives again (SQS redelivery)
    assert handle(aws, body, message_id="m-2") is ProcessAction.REFUSED
    # THEN nothing changed
    assert aws.dependencies.get(a, waiter_id_for("token-b")) == before


@pytest.mark.usefixtures("workflows")
def test_a_wait_without_a_waiter_payload_is_never_checked(aws: Aws) -> None:
    handle(aws, json.dumps(payload("a")))
    body = json.dumps({**payload("a"), "callback": {"task_token": "token-x"}})
    assert handle(aws, body, message_id="m-2") is ProcessAction.WAITING
    assert edge_items(aws) == []


@pytest.mark.usefixtures("workflows")
def test_a_wait_only_reference_can_close_a_cycle(aws: Aws) -> None:
    handle(aws, json.dumps(payload("a")))
    a, b = payload_id("a"), payload_id("b")
    handle(aws, wait_message("b", a, "token-a"))
    body = json.dumps({"wait_for": a, "callback": {"task_token": "tb", "waiter_payload_id": b}})
    assert handle(aws, body, message_id="m-2") is ProcessAction.REFUSED


@pytest.mark.usefixtures("workflows")
def test_a_join_closing_a_cycle_is_refused_before_any_member_starts(
    aws: Aws, sent: list[dict[str, Any]]
) -> None:
    # GIVEN A (running) waits on B
    handle(aws, json.dumps(payload("a")))
    a, b = payload_id("a"), payload_id("b")
    handle(aws, wait_message("b", a, "token-a"))
    # WHEN B joins on {C, A}
    body = json.dumps(
        {
            "join": {"task_token": "token-join", "quorum": 1, "waiter_payload_id": b},
            "payloads": [payload("c"), payload("a")],
        }
    )
    message = read_message(body, message_id="m-3")
    assert flow(aws).handle(message) is ProcessAction.REFUSED
    # THEN the join is decided FAILED with DependencyCycle, and C was never started
    join = aws.joins.get(token_hash("token-join"))
    assert join is not None
    assert join.workflow_state is PayloadState.FAILED
    assert join.error == DependencyError.CYCLE
    assert join.cycle == [b, a, b]
    assert aws.states.get(payload_id("c")) is None
    rows = list(aws.dependencies.rows(payload_id("c")))
    assert rows == []
    # AND the parent is told DependencyCycle with the join summary and the cycle
    callback = aws.app(dependencies=aws.dependencies).callback
    callback.handle(join)
    assert [c["error"] for c in sent] == ["DependencyCycle"]
    summary = json.loads(sent[0]["cause"])
    assert summary["cycle"] == [b, a, b]
    # the join was refused before its chunk registered any member: none is listed as run
    assert (summary["succeeded"], summary["failed"]) == ([], [])
    # AND a redelivery changes nothing
    flow(aws).handle(message)
    assert list(aws.dependencies.rows(payload_id("c"))) == []
    assert aws.states.get(payload_id("c")) is None
    again = aws.joins.get(token_hash("token-join"))
    assert again is not None
    assert (again.workflow_state, again.error) == (PayloadState.FAILED, DependencyError.CYCLE)
    assert membership_id_for(join.join_id).startswith("join#")


@pytest.mark.usefixtures("workflows")
def test_a_redelivered_refused_join_is_counted_refused(aws: Aws) -> None:
    # GIVEN A (running) waits on B, and B's join on {C, A} was refused
    handle(aws, json.dumps(payload("a")))
    a, b = payload_id("a"), payload_id("b")
    handle(aws, wait_message("b", a, "token-a"))
    body = json.dumps(
        {
            "join": {"task_token": "token-join", "quorum": 1, "waiter_payload_id": b},
            "payloads": [payload("c"), payload("a")],
        }
    )
    message = read_message(body, message_id="m-3")
    assert flow(aws).handle(message) is ProcessAction.REFUSED
    # WHEN the join message is delivered again THEN it is counted refused again, as a
    # redelivered single wait is
    assert flow(aws).handle(message) is ProcessAction.REFUSED


def test_edges_do_not_show_up_as_waiter_rows(aws: Aws) -> None:
    a, b = running(aws, "a", "b")
    guard(aws).admit(a, [b], via="t1")
    assert len(edge_items(aws)) == 1
    rows = [row for page in aws.dependencies.scan_pages() for row in page]
    assert rows == []


# ---------------------------------------------------------------- concurrent closers


class ReadsFirst(CycleGuard):
    """The mutation: look for the cycle before writing the edge."""

    def admit(self, waiter: str, depends_on: Sequence[str], *, via: str) -> Cycle | None:
        cycle = self.find(waiter, depends_on)
        self.edges.add(waiter, depends_on, via=via)
        return cycle


def closing_races(aws: Aws, guard_class: type[CycleGuard]) -> Iterator[tuple[Run, bool, bool]]:
    """Two waits closing one cycle (A on B, B on A), in every interleaving of their AWS calls.

    Yields each run and whether A's and B's waits were refused.
    """
    session = client_factory.session()
    scheduler: list[Scheduler] = []
    clients = {}
    for label in ("a", "b"):
        dynamodb = session.client("dynamodb")
        dynamodb.meta.events.register("before-call.*.*", _gate(scheduler, label))
        clients[label] = dynamodb

    def closer(label: str) -> CycleGuard:
        edges = WaitEdges(clients[label], aws.dependencies.table_name, retention_days=7)
        states = StateTable(clients[label], aws.states.table_name)
        return guard_class(states=states, edges=edges, max_length=10)

    counter = itertools.count()

    def run_one(prefix: Sequence[str]) -> Run:
        n = next(counter)
        a, b = running(aws, f"{guard_class.__name__}-a-{n}", f"{guard_class.__name__}-b-{n}")
        flows: dict[str, Flow] = {
            "a": lambda: closer("a").admit(a, [b], via="t-a"),
            "b": lambda: closer("b").admit(b, [a], via="t-b"),
        }
        scheduler.append(Scheduler(prefix))
        try:
            run = scheduler[-1].execute(flows)
        finally:
            scheduler.clear()
        assert run.errors == {}, (run.calls, run.errors)
        return run

    for run in explore(run_one):
        yield run, run.results["a"] is not None, run.results["b"] is not None


def test_two_waits_closing_one_cycle_at_once_never_both_pass(aws: Aws) -> None:
    """In every interleaving of their AWS calls, at least one of two closers is refused.

    The edges are written before the graph is read (strongly consistent), so
    whichever closer reads second sees the other's edge.
    """
    outcomes: Counter[tuple[bool, bool]] = Counter()
    runs = []
    for run, a_refused, b_refused in closing_races(aws, CycleGuard):
        assert a_refused or b_refused, run.calls
        outcomes[a_refused, b_refused] += 1
        runs.append(run)
    # GIVEN about five calls a side, the search covers many orders, both sides first
    assert len(runs) >= 20
    assert {run.trace[0] for run in runs} == {"a", "b"}
    # one refused (the usual case) in both directions, and both when the reads cross
    assert outcomes[True, False] > 0
    assert outcomes[False, True] > 0
    assert outcomes[True, True] > 0


def test_the_interleaving_search_catches_a_check_that_reads_first(aws: Aws) -> None:
    both_passed = [run for run, a, b in closing_races(aws, ReadsFirst) if not (a or b)]
    assert both_passed


def _gate(scheduler: list[Scheduler], label: str) -> Any:
    def gate(**kwargs: Any) -> None:
        if scheduler:
            scheduler[-1].hook(label)(**kwargs)

    return gate


@pytest.mark.usefixtures("workflows")
def test_a_join_decided_before_a_redelivery_finds_a_cycle_stays_decided(aws: Aws) -> None:
    # GIVEN a join by "loop/j" over payload w, let through (no cycle yet) and then decided
    body = json.dumps(
        {
            "join": {"task_token": "token-j", "quorum": 1, "waiter_payload_id": "loop/j"},
            "payloads": [payload("w")],
        }
    )
    message = read_message(body, message_id="m-j")
    assert flow(aws).handle(message) is ProcessAction.JOINED
    join_id = token_hash("token-j")
    assert JoinStore(aws.dynamodb, aws.dependencies.table_name).decide_join(
        join_id, PayloadState.SUCCEEDED
    )
    # AND since then w's own workflow waits on "loop/j": the cycle exists now
    waits = guard(aws).edges
    waits.add(payload_id("w"), ["loop/j"], via=waiter_id_for("token-w"))
    # WHEN the join message is delivered again
    action = flow(aws).handle(message)
    # THEN the decided join is left as it is: no refusal is counted or recorded
    assert action is ProcessAction.JOINED
    join = aws.joins.get(join_id)
    assert join is not None
    assert join.workflow_state is PayloadState.SUCCEEDED
    assert join.cycle is None


@pytest.mark.usefixtures("workflows")
def test_a_single_wait_resolved_before_its_refusal_lands_stands(aws: Aws) -> None:
    # GIVEN A (running) waits on B, and B's wait on A closes the cycle ...
    handle(aws, json.dumps(payload("a")))
    a, b = payload_id("a"), payload_id("b")
    handle(aws, wait_message("b", a, "token-a"))
    process = flow(aws)
    message = process.parse(wait_message("a", b, "token-b"), message_id="m-2")
    # ... but A ends (and update-state resolves B's new row) between the check and the refusal
    real_refuse = process.waits.dependencies.refuse

    def a_ends_first(*args: Any, **kwargs: Any) -> bool:
        row = aws.dependencies.get(a, waiter_id_for("token-b"))
        assert row is not None
        aws.dependencies.resolve(a, row.waiter_id, Resolution(state=PayloadState.SUCCEEDED))
        return real_refuse(*args, **kwargs)

    process.waits.dependencies.refuse = a_ends_first  # type: ignore[method-assign]
    # THEN the wait stands with A's real outcome (it is not counted as refused)
    assert process.handle(message) is not ProcessAction.REFUSED
    row = aws.dependencies.get(a, waiter_id_for("token-b"))
    assert row is not None
    assert row.workflow_state is PayloadState.SUCCEEDED
    assert row.error_name is None


# ---------------------------------------------------------------- lifetimes


def age_edges(aws: Aws, hours: float) -> None:
    """Pretend every edge was written ``hours`` ago."""
    old = (datetime.now(UTC) - timedelta(hours=hours)).isoformat()
    for item in edge_items(aws):
        aws.dynamodb.update_item(
            TableName=aws.dependencies.table_name,
            Key={"payload_id": item["payload_id"], "waiter_id": item["waiter_id"]},
            UpdateExpression="SET created_at = :old",
            ExpressionAttributeValues={":old": {"S": old}},
        )


def test_a_wait_edge_lives_as_long_as_the_longest_wait(aws: Aws) -> None:
    # GIVEN a parent W (not a payload the tracker runs) waiting on A
    (a,) = running(aws, "a")
    guard(aws).admit("W", [a], via="token#w")
    # THEN its edge outlives any wait a parent can make (a Standard execution's year) plus the
    # retention; it expired after 7 days before, and a cycle through a longer wait went unseen
    (edge,) = edge_items(aws)
    created = datetime.fromisoformat(edge["created_at"]["S"]).timestamp()
    assert int(edge["expiration_time"]["N"]) - created >= (365 + 7) * 86_400 - 1


@pytest.mark.usefixtures("workflows")
def test_an_ended_wait_does_not_close_a_cycle_later(aws: Aws) -> None:
    # GIVEN W waited on A and was answered (its waiter row resolved when A ended)
    a = payload_id("a")
    assert handle(aws, wait_message("a", "W", "tok-w")) is ProcessAction.STARTED
    aws.dependencies.resolve(a, waiter_id_for("tok-w"), Resolution(state=PayloadState.SUCCEEDED))
    # WHEN A, run again, waits on W (W never ran: it counts as live)
    check = guard(aws)
    cycle = check.admit(a, ["W"], via="token#a")
    # THEN no cycle: the old edge W -> A no longer stands for a wait (it did, for its whole
    # lifetime, before: A would have been refused with DependencyCycle)
    assert cycle is None


@pytest.mark.usefixtures("workflows")
def test_a_pending_wait_closes_a_cycle_however_old(aws: Aws) -> None:
    # GIVEN W waits on A, still (its waiter row PROCESSING), for days
    a = payload_id("a")
    handle(aws, wait_message("a", "W", "tok-w"))
    age_edges(aws, hours=24 * 30)
    # WHEN A waits on W THEN the cycle is found
    cycle = guard(aws).admit(a, ["W"], via="token#a")
    assert cycle is not None
    assert cycle.path == (a, "W", a)


def test_an_edge_counts_before_its_row_is_written_but_not_for_ever(aws: Aws) -> None:
    # GIVEN an edge whose waiting row is not written (a join writes its membership rows just
    # after its edges; a crash between leaves the edge alone)
    (a,) = running(aws, "a")
    edges = WaitEdges(aws.dynamodb, aws.dependencies.table_name, retention_days=7)
    edges.add("W", [a], via=membership_id_for("j-1"))
    # THEN it counts while young, and not once its row should long have been written
    assert edges.targets("W") == [a]
    age_edges(aws, hours=2)
    assert edges.targets("W") == []
