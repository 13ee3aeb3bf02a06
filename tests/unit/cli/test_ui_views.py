"""The ``ui`` page's view models and routes, on moto."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from dependency_tracker.core.enums import DependencyError, PayloadState, utcnow
from dependency_tracker.joins.rows import JoinItem
from dependency_tracker.joins.store import JoinStore
from dependency_tracker.table.items import MembershipItem, Resolution, membership_id_for
from dependency_tracker_cli.target import ConnectionOptions, Target
from dependency_tracker_cli.ui import joins, links, views
from dependency_tracker_cli.ui.app import Settings, create_app
from tests.conftest import payload, payload_id
from tests.unit.cli.rows import token, waiter

if TYPE_CHECKING:
    from collections.abc import Iterator

    import pytest

    from tests.conftest import Aws

FAILED = PayloadState.FAILED
ARN = "arn:aws:states:us-east-1:123456789012:execution:deptrack-wait-for-join:gone-1"


def target(endpoint_url: str | None = None) -> Target:
    return Target(ConnectionOptions(endpoint_url=endpoint_url))


def test_counts_by_state_and_pages_of_payloads(aws: Aws) -> None:
    # GIVEN 30 payloads that succeeded and 3 that failed
    for index in range(30):
        aws.finished_payload(payload(f"ok-{index:02d}"), PayloadState.SUCCEEDED)
    for index in range(3):
        aws.finished_payload(payload(f"bad-{index}"), PayloadState.FAILED, error="TaskFailed")
    # WHEN the page's snapshot is read
    snapshot = views.read_snapshot(target())
    # THEN the counts are by workflow, collection and state
    counts = {
        (c.workflow, c.collections, c.state): c.count for c in views.state_counts(snapshot.payloads)
    }
    assert counts == {
        ("pass", "sentinel-2-l2a", "FAILED"): 3,
        ("pass", "sentinel-2-l2a", "SUCCEEDED"): 30,
    }
    # AND the payloads come in pages of 25, page 2 holding the next ones
    first, second = views.paged(snapshot.payloads, 1), views.paged(snapshot.payloads, 2)
    assert (first.total, first.pages, len(first.rows), len(second.rows)) == (33, 2, 25, 8)
    assert first.rows[-1].payload_id < second.rows[0].payload_id
    assert (first.previous, first.next, second.previous, second.next) == (None, 2, 1, None)
    assert views.paged(snapshot.payloads, 99).number == 2


def test_a_join_shows_its_counted_members_total_and_quorum(aws: Aws) -> None:
    # GIVEN a join of 4 (quorum 3) with one member succeeded and one failed
    now = utcnow()
    members = [f"m{index}" for index in range(4)]
    store = JoinStore(aws.dynamodb, aws.dependencies.table_name)
    chunk_rows = aws.chunk_rows
    row = JoinItem(
        payload_id="join#j1",
        waiter_id="join",
        join_id="j1",
        task_token=token("j1"),
        quorum=3,
        total=4,
        registered=4,
        created_at=now,
        updated_at=now,
        parent_execution=ARN,
    )
    assert store.create(row)
    rows = [
        MembershipItem(
            payload_id=m,
            waiter_id=membership_id_for("j1"),
            join_id="j1",
            chunk=0,
            created_at=now,
            updated_at=now,
        )
        for m in members
    ]
    chunk_rows.register_members(rows)
    for member, state in ((rows[0], PayloadState.SUCCEEDED), (rows[1], PayloadState.FAILED)):
        resolution = Resolution(state=state)
        aws.dependencies.resolve(member.payload_id, member.waiter_id, resolution)
        assert store.count(member, resolution, retention_days=7)
    # WHEN its progress is read
    snapshot = views.read_snapshot(target())
    assert [row.join_id for row in snapshot.joins] == ["j1"]
    (progress,) = joins.join_progress(target(), snapshot.joins, snapshot.counts)
    # THEN 2 of 4 are counted, quorum 3, with the parent's execution
    assert (progress.counted, progress.total, progress.needed) == (2, 4, 3)
    assert progress.execution is not None
    assert progress.execution.arn == ARN
    # AND the page names what the parent waits on once ("join j1 …", not "join join j1 …")
    page = create_app(target(), Settings()).test_client().get("/").get_data(as_text=True)
    assert "join join" not in page
    assert "gone-1 · join j1" in page
    # AND on serve an execution links to the page's own JSON view
    link = links.execution_link(target("http://127.0.0.1:4600"), ARN)
    assert link.href.startswith("/execution?arn=arn%3Aaws%3Astates")


def test_a_stuck_parent_says_why_and_its_dependency_s_cause(aws: Aws) -> None:
    # GIVEN a parent (its execution gone) waiting on a payload that failed
    aws.finished_payload(payload("dep"), PayloadState.FAILED, error="TaskFailed", cause="boom")
    aws.dependencies.register(waiter(payload_id("dep"), "t1", parent="p", execution=ARN))
    # WHEN stuck parents are read with no threshold
    graph = views.read_snapshot(target()).graph
    (row,) = views.stuck_parents(target(), graph, timedelta(0))
    # THEN the parent is shown ended, and what holds it with its error and cause
    assert (row.parent, row.status, row.reason) == ("p", "GONE", "parent ended: GONE")
    ((name, state, _reason, failure),) = row.holds
    assert (name, state) == (payload_id("dep"), "FAILED")
    assert failure is not None
    assert failure.text() == "TaskFailed: boom"
    # AND on a deployed stack the execution links to the AWS console
    assert row.execution is not None
    assert row.execution.href.startswith(
        "https://us-east-1.console.aws.amazon.com/states/home?region=us-east-1#/v2/executions/"
    )


def test_the_page_and_its_fragment_render_every_section(aws: Aws) -> None:
    # GIVEN a payload that failed, and a cycle of two waits
    aws.finished_payload(payload("dep"), PayloadState.FAILED, error="TaskFailed", cause="boom")
    aws.dependencies.register(waiter("a", "t1", parent="b"))
    aws.dependencies.register(waiter("b", "t2", parent="a"))
    client = create_app(target(), Settings(stuck_after=timedelta(0))).test_client()
    # WHEN the page is loaded
    page = client.get("/").get_data(as_text=True)
    # THEN every section is there with its row count, and the cycle edges are red
    for section in ("counts", "parents", "joins", "stuck", "graph", "payloads"):
        assert f'<section id="{section}">' in page
    assert "(1 row)" in page
    assert "(2 nodes, 2 edges)" in page
    assert page.count('class="edge cycle"') == 2
    assert '<noscript><meta http-equiv="refresh"' in page
    fragment = client.get("/fragment").get_data(as_text=True)
    assert '<section id="graph">' in fragment
    assert "<script" not in fragment
    # AND an execution's JSON view answers, 404 for an unknown one
    missing = client.get(f"/execution?arn={ARN}")
    assert missing.status_code == 404
    assert json.loads(missing.get_data())["error"]["Code"] == "ExecutionDoesNotExist"


def join_row(
    join_id: str,
    *,
    quorum: int | None = None,
    total: int | None = 3,
    state: PayloadState = PayloadState.PROCESSING,
    decided_ago: timedelta | None = None,
    notified: bool = False,
    age: timedelta = timedelta(minutes=5),
) -> JoinItem:
    """A join row as the tracker writes it (decided ``decided_ago`` when given)."""
    now = utcnow()
    decided = None if decided_ago is None else now - decided_ago
    return JoinItem(
        payload_id=f"join#{join_id}",
        waiter_id="join",
        join_id=join_id,
        task_token=token(join_id),
        quorum=quorum,
        total=total,
        registered=total or 2,
        created_at=now - age,
        updated_at=now,
        workflow_state=state,
        resolved_at=decided,
        notified_at=decided if notified else None,
        parent_execution=ARN,
    )


def progress(
    quorum: int | None, total: int | None, succeeded: int, failed: int, **extra: object
) -> joins.JoinProgress:
    row = join_row("f" * 64, quorum=quorum, total=total)
    if extra:
        row = row.model_copy(update=extra)
    return joins.progress_of(target(), row.join_id, row, succeeded, failed)


def test_a_join_is_named_by_its_parent_s_execution_and_a_short_id() -> None:
    # GIVEN a join id of 64 hex digits
    join_id = "3f2a9c1d" + "0" * 56
    # WHEN it is named with and without a parent execution
    # THEN the parent's execution name and the first 8 digits, or those digits alone
    assert joins.join_name(join_id, ARN) == "gone-1 · join 3f2a9c1d"
    assert joins.join_name(join_id, None) == "join 3f2a9c1d"
    assert joins.execution_name("") is None


def test_the_bar_counts_successes_against_the_quorum_and_failures_apart() -> None:
    # GIVEN a quorum of 2 of 3 with 1 succeeded and 1 failed
    quorum = progress(2, 3, 1, 1)
    # THEN the green part is half (1 of 2 needed), never two thirds, and the red part half
    # (2 failures decide it), and the text says so
    assert (quorum.kind, quorum.succeeded_fraction, quorum.failed_fraction) == ("quorum", 0.5, 0.5)
    assert (quorum.succeeded_percent, quorum.failed_percent) == (50.0, 50.0)
    assert quorum.text == "1 of 2 needed succeeded, 1 failed (1 more failure decides)"
    # AND an all-of join of 4 needs every member; its first failure decides it
    all_of = progress(None, 4, 2, 0)
    assert (all_of.kind, all_of.to_succeed, all_of.failures_to_decide) == ("all-of", 4, 1)
    assert (all_of.succeeded_fraction, all_of.failed_fraction) == (0.5, 0.0)
    assert all_of.text == "2 of 4 needed succeeded, 0 failed (1 more failure decides)"
    # AND an either-or join of 3 needs one success; only 3 failures decide it
    either = progress(1, 3, 0, 2)
    assert (either.kind, either.to_succeed, either.failures_to_decide) == ("either-or", 1, 3)
    assert (either.succeeded_fraction, round(either.failed_fraction, 3)) == (0.0, 0.667)
    assert either.failed_percent == 66.6
    assert either.text == "0 of 1 needed succeeded, 2 failed (1 more failure decides)"
    # AND a quorum whose members are still being registered: no failure count decides it yet
    reading = progress(2, None, 1, 1, registered=4)
    assert (reading.to_succeed, reading.failures_to_decide, reading.failed_fraction) == (
        2,
        None,
        0.25,
    )
    assert reading.text.endswith("(members still being registered)")
    # AND more successes than needed fill the green part, no further
    assert progress(1, 3, 2, 0).succeeded_fraction == 1.0


def test_a_join_decided_quorum_unreachable_says_its_outcome_and_why() -> None:
    # GIVEN quorum 2 of 3 decided failed by 2 failures
    row = join_row("j", quorum=2, total=3, state=PayloadState.FAILED, decided_ago=timedelta(0))
    row = row.model_copy(update={"error": "QuorumUnreachable"})
    decided = joins.progress_of(target(), "j", row, 1, 2)
    # THEN its outcome names the error, its cause the counts, and no "more failures" remark
    assert (decided.decided, decided.outcome) == (True, "failed: QuorumUnreachable")
    assert decided.why == "2 of 3 members failed; quorum 2 of 3 allows at most 1 failed"
    assert decided.text == "1 of 2 needed succeeded, 2 failed"
    # AND a cause the row records (InvalidJoin's) is shown as it is
    invalid = row.model_copy(update={"error": "InvalidJoin", "cause": "quorum 5 is more"})
    assert joins.progress_of(target(), "j", invalid, 0, 0).why == "quorum 5 is more"
    succeeded = row.model_copy(update={"workflow_state": PayloadState.SUCCEEDED, "error": None})
    assert joins.progress_of(target(), "j", succeeded, 2, 0).outcome == "succeeded"


def test_running_joins_come_first_then_joins_decided_within_the_window_newest_first() -> None:
    # GIVEN joins running, decided 1 h and 2 h ago, decided 30 h ago (told), and decided 30 h
    # ago with its parent not told yet
    rows = [
        join_row("old-told", decided_ago=timedelta(hours=30), notified=True, state=FAILED),
        join_row("two-hours", decided_ago=timedelta(hours=2), notified=True, state=FAILED),
        join_row("running-new", age=timedelta(minutes=1)),
        join_row("one-hour", decided_ago=timedelta(hours=1), notified=True, state=FAILED),
        join_row("old-untold", decided_ago=timedelta(hours=30), state=FAILED),
        join_row("running-old", age=timedelta(hours=3)),
    ]
    # WHEN the listed joins are chosen with a 24 h window
    listed = joins.listed(rows, utcnow(), timedelta(hours=24))
    # THEN running ones (oldest first), then decided ones newest first; the one told 30 h ago
    # is gone, the one whose parent is not told yet stays
    assert [row.join_id for row in listed] == [
        "running-old",
        "running-new",
        "one-hour",
        "two-hours",
        "old-untold",
    ]


def test_the_summary_counts_parents_joins_stuck_and_payloads_failed_in_the_window() -> None:
    # GIVEN two parents waiting (one on two payloads), a running join, a decided one, and
    # payloads failed 1 h and 30 h ago, invalid 2 h ago, succeeded now
    from dependency_tracker_cli.readmodel.view import PayloadSource, PayloadView  # noqa: PLC0415
    from dependency_tracker_cli.waitgraph import WaitGraph  # noqa: PLC0415

    now = utcnow()
    graph = WaitGraph.from_rows(
        [
            waiter("a", "t1", parent="p1"),
            waiter("b", "t2", parent="p1"),
            waiter("a", "t3", parent="p2"),
        ]
    )

    def view(name: str, state: PayloadState, ago: timedelta) -> PayloadView:
        return PayloadView(
            payload_id=name, source=PayloadSource.TRACKER, state=state, finished_at=now - ago
        )

    payloads = [
        view("f1", PayloadState.FAILED, timedelta(hours=1)),
        view("f2", PayloadState.FAILED, timedelta(hours=30)),
        view("i1", PayloadState.INVALID, timedelta(hours=2)),
        view("s1", PayloadState.SUCCEEDED, timedelta(0)),
    ]
    decided = join_row("d", state=PayloadState.FAILED, decided_ago=timedelta(hours=1))
    snapshot = views.Snapshot(graph, payloads, [join_row("r"), decided], now)
    # WHEN the summary is made with 3 stuck parents and a 24 h window
    line = views.summary(snapshot, 3, timedelta(hours=24))
    # THEN it counts 2 parents, 1 running join, 3 stuck, and 2 payloads failed since 24 h ago
    assert (line.parents_waiting, line.joins_running, line.stuck_parents, line.failed) == (
        2,
        1,
        3,
        2,
    )
    assert line.failed_since == now - timedelta(hours=24)


def test_a_join_decided_and_told_is_still_read_and_shown_with_its_outcome(aws: Aws) -> None:
    # GIVEN a join of 3 (quorum 2) decided QuorumUnreachable and its parent told
    store = JoinStore(aws.dynamodb, aws.dependencies.table_name)
    row = join_row("a" * 64, quorum=2, total=3)
    assert store.create(row)
    assert store.decide_join(
        row.join_id, PayloadState.FAILED, error=DependencyError.QUORUM_UNREACHABLE
    )
    decided = store.get(row.join_id)
    assert decided is not None
    assert store.finish_answering(decided, outcome="SENT:FAILED", retention_days=7)
    # AND a running join
    assert store.create(join_row("b" * 64, quorum=2, total=3))
    # WHEN the page's snapshot is read and the page rendered
    snapshot = views.read_snapshot(target())
    page = create_app(target(), Settings()).test_client().get("/").get_data(as_text=True)
    # THEN both are listed, the running one first, and not in the wait graph once told
    assert [item.join_id for item in snapshot.joins] == ["b" * 64, "a" * 64]
    assert views.summary(snapshot, 0, timedelta(hours=24)).joins_running == 1
    assert "failed: QuorumUnreachable" in page
    assert "gone-1 · join aaaaaaaa" in page
    assert f'title="{"a" * 64}"' in page
    # AND a page of one join holds the running one, the next page the decided one
    one = create_app(target(), Settings(page_size=1)).test_client()
    second = one.get("/?joins_page=2").get_data(as_text=True)
    assert f'data-join-id="{"a" * 64}"' in second
    assert f'data-join-id="{"b" * 64}"' not in second
    # AND the join's own page names it the same way, its whole id in a wrapping element
    own = create_app(target(), Settings()).test_client().get(f"/join/{'a' * 64}")
    text = own.get_data(as_text=True)
    assert "<h1" in text
    assert "gone-1 · join aaaaaaaa</h1>" in text
    assert f'<code class="join-id">{"a" * 64}</code>' in text


def test_a_join_decided_while_the_page_reads_is_counted_as_the_section_shows_it(
    aws: Aws, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a running join of 3 (quorum 2)
    store = JoinStore(aws.dynamodb, aws.dependencies.table_name)
    row = join_row("c" * 64, quorum=2, total=3)
    assert store.create(row)
    page_target = target()
    scan = page_target.dependencies.scan_pages

    def scan_then_decide(**kwargs: Any) -> Iterator[list[Any]]:
        yield from scan(**kwargs)
        # AND the tracker decides it right after the page's scan saw it running
        assert store.decide_join(
            row.join_id, PayloadState.FAILED, error=DependencyError.QUORUM_UNREACHABLE
        )

    monkeypatch.setattr(page_target.dependencies, "scan_pages", scan_then_decide)
    # WHEN the page's snapshot is read
    snapshot = views.read_snapshot(page_target)
    # THEN the summary and the Joins section agree: the join is decided in both
    (progress,) = joins.join_progress(page_target, snapshot.joins, snapshot.counts)
    assert progress.decided
    assert views.summary(snapshot, 0, timedelta(hours=24)).joins_running == 0
