"""The ``ui`` page's view models and routes, on moto."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import TYPE_CHECKING

from dependency_tracker.core.enums import PayloadState, utcnow
from dependency_tracker.joins.store import JoinStore
from dependency_tracker.table.items import MembershipItem, Resolution, membership_id_for
from dependency_tracker.table.join_items import JoinItem
from dependency_tracker_cli.target import ConnectionOptions, Target
from dependency_tracker_cli.ui import joins, views
from dependency_tracker_cli.ui.app import Settings, create_app
from tests.conftest import payload, payload_id
from tests.unit.cli.rows import token, waiter

if TYPE_CHECKING:
    from tests.conftest import Aws

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
    store.register_members(rows)
    for member, state in ((rows[0], PayloadState.SUCCEEDED), (rows[1], PayloadState.FAILED)):
        resolution = Resolution(state=state)
        aws.dependencies.resolve(member.payload_id, member.waiter_id, resolution)
        assert store.count(member, resolution, retention_days=7)
    # WHEN its progress is read
    snapshot = views.read_snapshot(target())
    assert [row.join_id for row in snapshot.joins] == ["j1"]
    (progress,) = joins.join_progress(target(), ["j1"])
    # THEN 2 of 4 are counted, quorum 3, with the parent's execution
    assert (progress.counted, progress.total, progress.needed) == (2, 4, 3)
    assert progress.execution is not None
    assert progress.execution.arn == ARN
    # AND the page names what the parent waits on once ("join j1 …", not "join join j1 …")
    page = create_app(target(), Settings()).test_client().get("/").get_data(as_text=True)
    assert "join join" not in page
    assert "gone-1 · join j1" in page
    # AND on serve an execution links to the page's own JSON view
    link = views.execution_link(target("http://127.0.0.1:4600"), ARN)
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
