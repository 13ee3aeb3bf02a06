"""The wait-for graph: edges, cycles, the part around a root, stuck parents, renderers."""

from __future__ import annotations

import json
from datetime import timedelta

from dependency_tracker.core.enums import PayloadState
from dependency_tracker.core.tokens import token_hash
from dependency_tracker.table.items import PayloadStateItem
from dependency_tracker_cli.waitgraph import WaitGraph, execution_label, strongly_connected
from tests.unit.cli.rows import NOW, TOKEN_PREFIX, join, waiter

PARENT_ARN = "arn:aws:states:us-east-1:123456789012:execution:deptrack-wait-for-dependencies:p1"


def state(payload_id: str, value: PayloadState, attempt: int = 1) -> PayloadStateItem:
    return PayloadStateItem(
        payload_id=payload_id,
        state=value,
        workflow="simulate",
        attempt=attempt,
        created_at=NOW,
        updated_at=NOW,
        last_error="TaskFailed" if value is PayloadState.FAILED else None,
    )


def test_waiters_point_from_parent_to_dependency_and_done_waits_drop_out() -> None:
    # GIVEN a parent payload waiting on two dependencies, one of them already notified
    rows = [
        waiter("dep-a", "t1", parent="parent"),
        waiter("dep-b", "t2", parent="parent", state=PayloadState.SUCCEEDED, notified=True),
    ]
    # WHEN the graph is built with and without finished waits
    active = WaitGraph.from_rows(rows)
    everything = WaitGraph.from_rows(rows, include_done=True)
    # THEN only the live wait is an edge by default
    assert [(e.source, e.target) for e in active.edges] == [("payload:parent", "payload:dep-a")]
    assert {(e.target, e.notified) for e in everything.edges} == {
        ("payload:dep-a", False),
        ("payload:dep-b", True),
    }


def test_parent_without_payload_id_is_its_execution_or_its_token_hash() -> None:
    rows = [waiter("dep", "t1", execution=PARENT_ARN), waiter("dep", "t2")]
    graph = WaitGraph.from_rows(rows)
    kinds = sorted(graph.nodes[e.source].kind for e in graph.edges)
    assert kinds == ["execution", "waiter"]
    execution = graph.nodes[f"execution:{PARENT_ARN}"]
    assert execution.label == "deptrack-wait-for-dependencies:p1"
    assert graph.find("p1") is execution
    assert graph.find(PARENT_ARN) is execution
    anonymous = next(n for n in graph.nodes.values() if n.kind == "waiter")
    assert anonymous.label.startswith("waiter sha256:")


def test_cycles_are_found_and_outlined() -> None:
    # GIVEN a waits on b, b waits on c, c waits on a, and d waits on a (not in the cycle)
    rows = [
        waiter("b", "t1", parent="a"),
        waiter("c", "t2", parent="b"),
        waiter("a", "t3", parent="c"),
        waiter("a", "t4", parent="d"),
    ]
    graph = WaitGraph.from_rows(rows)
    # THEN the cycle is one group, without d
    assert graph.cycles() == [["payload:a", "payload:b", "payload:c"]]
    assert "classDef cycle" in graph.to_mermaid()
    assert graph.to_dot().count('color="#e03131"') == 3
    assert graph.to_json()["cycles"] == [["payload:a", "payload:b", "payload:c"]]


def test_self_wait_is_a_cycle_and_a_chain_is_not() -> None:
    assert WaitGraph.from_rows([waiter("a", "t", parent="a")]).cycles() == [["payload:a"]]
    chain = [waiter("b", "t1", parent="a"), waiter("c", "t2", parent="b")]
    assert WaitGraph.from_rows(chain).cycles() == []


def test_strongly_connected_handles_long_chains_without_recursion() -> None:
    size = 5000
    adjacency = {str(i): [str(i + 1)] for i in range(size)}
    adjacency[str(size)] = ["0"]
    groups = strongly_connected(adjacency)
    assert len(groups) == 1
    assert len(groups[0]) == size + 1


def test_around_a_root_keeps_what_it_waits_on_and_who_waits_on_it() -> None:
    rows = [
        waiter("mid", "t1", parent="top"),
        waiter("leaf", "t2", parent="mid"),
        waiter("other", "t3", parent="elsewhere"),
    ]
    graph = WaitGraph.from_rows(rows)
    root = graph.find("mid")
    assert root is not None
    sub = graph.around(root)
    assert set(sub.nodes) == {"payload:top", "payload:mid", "payload:leaf"}
    assert len(sub.edges) == 2


def test_join_edges_run_parent_to_join_to_pending_members() -> None:
    # GIVEN a 2-of-3 join whose first member succeeded
    row, members = join("j1", ["m1", "m2", "m3"], quorum=2, parent="parent", succeeded=("m1",))
    graph = WaitGraph.from_rows([row, *members])
    # THEN the parent waits on the join, and the join on its two pending members
    assert sorted((e.source, e.target) for e in graph.edges) == [
        ("join:j1", "payload:m2"),
        ("join:j1", "payload:m3"),
        ("payload:parent", "join:j1"),
    ]
    assert graph.nodes["join:j1"].label == "join j1: 2 of 3 needed"
    assert graph.find("j1") is graph.nodes["join:j1"]


def test_memberships_of_a_notified_or_missing_join_hold_nobody() -> None:
    row, members = join("j2", ["m1"])
    told = row.model_copy(update={"notified_at": NOW})
    assert WaitGraph.from_rows([told, *members]).edges == []
    assert WaitGraph.from_rows(members).edges == []


def test_a_released_join_holds_nobody_until_its_parent_sends_it_again() -> None:
    # GIVEN a join whose one token an operator released (answered, the join undecided)
    row, members = join("j3", ["m1", "m2"], parent="parent")
    released = row.model_copy(
        update={"answered": {token_hash(row.task_token): "RELEASED:r"}, "released_at": NOW}
    )
    # THEN it is no wait: no edge, nothing for stuck or the page
    assert WaitGraph.from_rows([released, *members]).edges == []
    # WHEN its parent's Retry sends it again THEN the new token's wait counts
    again = released.model_copy(update={"retry_tokens": {"h2": "token-2"}, "released_at": None})
    assert len(WaitGraph.from_rows([again, *members]).edges) == 3


def test_stuck_lists_old_parents_with_what_holds_them() -> None:
    # GIVEN an old parent on a failed-but-unresolved and a running dependency, a young parent,
    # and an old join parent
    rows = [
        waiter("dep-run", "t1", parent="old", age=timedelta(hours=3)),
        waiter("dep-done", "t2", parent="old", age=timedelta(hours=2), state=PayloadState.FAILED),
        waiter("dep-run", "t3", parent="young", age=timedelta(minutes=10)),
    ]
    join_row, members = join("j", ["m1", "m2"], execution=PARENT_ARN, age=timedelta(hours=5))
    graph = WaitGraph.from_rows([*rows, join_row, *members])
    graph.set_states(
        {
            "dep-run": state("dep-run", PayloadState.PROCESSING),
            "dep-done": state("dep-done", PayloadState.FAILED),
        }
    )
    # WHEN parents older than an hour are asked for
    stuck = graph.stuck(NOW - timedelta(hours=1))
    # THEN the join parent (oldest) comes first, then "old"; "young" is left out
    assert [parent.parent.id for parent in stuck] == [f"execution:{PARENT_ARN}", "payload:old"]
    via_join, old = stuck
    assert [hold.dependency.label for hold in via_join.holds] == ["m1", "m2"]
    assert {hold.reason for hold in via_join.holds} == {"not started (no state item)"}
    reasons = {hold.dependency.label: hold.reason for hold in old.holds}
    assert reasons == {
        "dep-run": "running",
        "dep-done": "resolved FAILED, parent not notified yet",
    }
    assert old.since == NOW - timedelta(hours=3)
    report = old.to_json(NOW)
    assert report["waiting_seconds"] == 3 * 3600
    assert {d["payload_id"] for d in report["dependencies"]} == {"dep-run", "dep-done"}


REFUSED_REASON = (
    "resolved SUCCEEDED; the tracker may not answer this parent (AccessDeniedException): "
    "its state machine is not in ExtraParentStateMachineArns"
)


def test_a_parent_whose_answer_was_refused_is_held_by_the_missing_grant() -> None:
    # GIVEN a resolved waiter whose answer Step Functions refused (the row records it), and a
    # decided join refused the same way while one of its members still runs
    refused = {"notify_refused": "AccessDeniedException", "notify_refused_at": NOW}
    done = waiter("dep", "t1", parent="p", state=PayloadState.SUCCEEDED)
    row, members = join("j", ["m1", "m2"], quorum=1, execution=PARENT_ARN, succeeded=("m1",))
    decided = row.model_copy(update={"workflow_state": PayloadState.SUCCEEDED, **refused})
    graph = WaitGraph.from_rows([done.model_copy(update=refused), decided, *members])
    # WHEN stuck parents are asked for
    by_parent = {parent.parent.id: parent for parent in graph.stuck(NOW)}
    # THEN each says the tracker may not answer it, and why; in JSON too
    (hold,) = by_parent["payload:p"].holds
    assert hold.reason == REFUSED_REASON
    assert hold.to_json()["notify_refused"] == "AccessDeniedException"
    reasons = {h.dependency.label: h.reason for h in by_parent[f"execution:{PARENT_ARN}"].holds}
    assert reasons["join j: 1 of 2 needed"] == REFUSED_REASON
    # AND a row without the record keeps the old reason
    plain = WaitGraph.from_rows([done]).stuck(NOW)[0].holds[0]
    assert plain.reason == "resolved SUCCEEDED, parent not notified yet"
    assert plain.to_json()["notify_refused"] is None


def test_renderers_never_show_a_task_token() -> None:
    row, members = join("j", ["m1"], parent="p")
    graph = WaitGraph.from_rows([waiter("d", "t1"), waiter("d", "t2", parent="x"), row, *members])
    for text in (graph.to_mermaid(), graph.to_dot(), graph.to_json_text()):
        assert TOKEN_PREFIX not in text


def test_json_lists_nodes_with_states_and_edges() -> None:
    graph = WaitGraph.from_rows([waiter("dep", "t1", parent="parent")])
    graph.set_states({"dep": state("dep", PayloadState.FAILED, attempt=2)})
    data = json.loads(graph.to_json_text())
    nodes = {node["id"]: node for node in data["nodes"]}
    assert nodes["payload:dep"]["state"] == "FAILED"
    assert nodes["payload:dep"]["attempt"] == 2
    assert nodes["payload:dep"]["last_error"] == "TaskFailed"
    assert nodes["payload:parent"]["state"] is None
    assert data["edges"] == [
        {
            "from": "payload:parent",
            "to": "payload:dep",
            "state": "PROCESSING",
            "since": (NOW - timedelta(minutes=5)).isoformat(),
            "notified": False,
            "via": data["edges"][0]["via"],
            "error": None,
            "cause": None,
            "notify_refused": None,
        }
    ]
    assert data["edges"][0]["via"].startswith("sha256:")


def test_mermaid_and_dot_escape_labels_and_colour_by_state() -> None:
    graph = WaitGraph.from_rows([waiter('we"ird<id>', "t1", parent="p")])
    graph.set_states({'we"ird<id>': state('we"ird<id>', PayloadState.SUCCEEDED)})
    mermaid = graph.to_mermaid()
    assert "we#quot;ird#lt;id#gt;<br/>SUCCEEDED" in mermaid
    assert ":::s_succeeded" in mermaid
    dot = graph.to_dot()
    assert 'label="we\\"ird<id>\\nSUCCEEDED"' in dot
    assert 'fillcolor="#b2f2bb"' in dot


def test_execution_label_falls_back_to_the_text() -> None:
    assert execution_label("not-an-arn") == "not-an-arn"


def test_a_parent_payload_is_found_by_its_execution_too() -> None:
    graph = WaitGraph.from_rows([waiter("dep", "t1", parent="parent", execution=PARENT_ARN)])
    node = graph.nodes["payload:parent"]
    assert graph.find("p1") is node
    assert graph.find(PARENT_ARN) is node
    assert node.colour_key == "PARENT"
    assert "deptrack-wait-for-dependencies:p1" in graph.to_mermaid()
