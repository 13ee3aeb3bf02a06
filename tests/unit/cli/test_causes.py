"""Failure causes and stalled payloads, as the operator's commands show them (on moto).

A failed wait shows its parent's error and cause when the parent failed, else
what the tracker stored on the row; ``stuck`` lists only parents still running;
``status`` and ``redrive --dry-run`` say why a message does not move on.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest
from typer.testing import CliRunner

from dependency_tracker.core.enums import PayloadState, utcnow
from dependency_tracker.payloads.model import ProcessPayload
from dependency_tracker.table.items import InvalidMessageItem, WaiterItem
from dependency_tracker_cli.__main__ import app
from tests.conftest import payload, payload_id
from tests.unit.cli.parents import failed_parent, running_parent
from tests.unit.cli.rows import TOKEN_PREFIX, waiter

if TYPE_CHECKING:
    from tests.conftest import Aws

GONE_ARN = "arn:aws:states:us-east-1:123456789012:execution:deptrack-parked:gone"
LONG_CAUSE = "the dependency failed: " + "x" * 300


def failed_wait(pid: str, name: str, *, execution: str | None, parent: str) -> WaiterItem:
    """A wait on ``pid`` resolved ``FAILED`` and told, with the error and cause stored."""
    row = waiter(pid, name, parent=parent, execution=execution, state=PayloadState.FAILED)
    now = utcnow()
    return row.model_copy(
        update={
            "error": "States.TaskFailed",
            "cause": LONG_CAUSE,
            "created_at": now - timedelta(minutes=5),
            "updated_at": now,
            "resolved_at": now,
            "notified_at": now,
            "notify_outcome": "SENT:FAILED",
        }
    )


def old_wait(pid: str, name: str, *, execution: str | None, parent: str) -> WaiterItem:
    """A wait on ``pid`` for two hours, not resolved."""
    since = utcnow() - timedelta(hours=2)
    row = waiter(pid, name, parent=parent, execution=execution)
    return row.model_copy(update={"created_at": since, "updated_at": since})


def run(*args: str) -> Any:
    # Wide enough that a table keeps each cell on one line.
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    return result


# ---------------------------------------------------------------- causes


def test_waiters_show_the_failed_parent_s_cause_else_the_row_s(aws: Aws) -> None:
    # GIVEN two failed waits on one payload: one parent failed, the other is gone
    parent = failed_parent(aws, "told-parent")
    table = aws.dependencies
    assert table.register(failed_wait("dep/a", "t1", execution=parent["executionArn"], parent="p1"))
    assert table.register(failed_wait("dep/a", "t2", execution=GONE_ARN, parent="p2"))
    # WHEN their waiters are listed
    shown = json.loads(run("waiters", "dep/a", "--json").stdout)
    # THEN the failed parent's error and cause are shown, else the row's, whole in JSON
    failures = {view["waiter_payload_id"]: view for view in shown["waiters"]}
    assert failures["p1"]["parent_status"] == "FAILED"
    assert failures["p1"]["failure"] == {
        "source": "parent",
        "error": "TaskFailed",
        "cause": "simulated failure",
    }
    assert failures["p2"]["parent_status"] == "GONE"
    assert failures["p2"]["failure"] == {
        "source": "row",
        "error": "States.TaskFailed",
        "cause": LONG_CAUSE,
    }
    assert failures["p2"]["cause"] == LONG_CAUSE
    # AND the table clips the long cause but names both
    human = run("waiters", "dep/a").stdout
    assert "parent FAILED: TaskFailed: simulated failure" in human
    assert "States.TaskFailed: the dependency failed" in human
    assert LONG_CAUSE not in human
    assert TOKEN_PREFIX not in human


def test_graph_shows_the_failed_parent_s_and_the_row_s_error_and_cause(aws: Aws) -> None:
    # GIVEN a failed wait told to a parent that failed
    parent = failed_parent(aws, "graph-parent")
    row = failed_wait("dep/g", "t1", execution=parent["executionArn"], parent="gp")
    assert aws.dependencies.register(row)
    # WHEN the whole graph is drawn as JSON and as mermaid
    graph = json.loads(run("graph", "--all", "--format", "json").stdout)
    mermaid = run("graph", "--all").stdout
    # THEN the edge carries the row's error and cause, the parent its execution's
    (edge,) = graph["edges"]
    assert (edge["error"], edge["cause"]) == ("States.TaskFailed", LONG_CAUSE)
    nodes = {node["id"]: node for node in graph["nodes"]}
    assert nodes["payload:gp"]["parent_status"] == "FAILED"
    assert nodes["payload:gp"]["parent_error"] == "TaskFailed"
    assert nodes["payload:gp"]["parent_cause"] == "simulated failure"
    # AND the labels say it briefly
    assert "parent FAILED: TaskFailed: simulated failure" in mermaid
    assert "FAILED: States.TaskFailed" in mermaid
    assert LONG_CAUSE not in mermaid


# ---------------------------------------------------------------- stuck


def test_stuck_lists_only_parents_still_running_and_all_adds_the_ended(aws: Aws) -> None:
    # GIVEN three parents waiting two hours: one running, one failed, one with no execution
    running = running_parent(aws, "alive")
    failed = failed_parent(aws, "dead")["executionArn"]
    table = aws.dependencies
    assert table.register(old_wait("dep/s1", "t1", execution=running, parent="alive"))
    assert table.register(old_wait("dep/s2", "t2", execution=failed, parent="dead"))
    assert table.register(old_wait("dep/s3", "t3", execution=None, parent="nameless"))
    # WHEN stuck parents are listed
    shown = json.loads(run("stuck", "--older-than", "1h", "--json").stdout)
    # THEN only the running one is there; the others are counted as hidden
    assert [p["parent"]["id"] for p in shown["parents"]] == ["payload:alive"]
    assert shown["parents"][0]["parent_status"] == "RUNNING"
    assert shown["parents"][0]["reason"] is None
    assert shown["hidden_ended"] == 2
    human = CliRunner().invoke(app, ["stuck", "--older-than", "1h"])
    assert "alive" in human.stdout
    assert "dead" not in human.stdout
    assert "2 parent(s) whose execution ended not listed" in human.stderr
    # WHEN --all is given
    every = json.loads(run("stuck", "--older-than", "1h", "--all", "--json").stdout)
    # THEN the ended ones are there with why, the failed one with its error and cause
    parents = {p["parent"]["id"]: p for p in every["parents"]}
    assert parents["payload:dead"]["reason"] == "parent ended: FAILED"
    assert (parents["payload:dead"]["error"], parents["payload:dead"]["cause"]) == (
        "TaskFailed",
        "simulated failure",
    )
    assert parents["payload:nameless"]["reason"] == "parent ended: UNKNOWN"
    assert every["hidden_ended"] == 0
    lines = run("stuck", "--older-than", "1h", "--all").stdout
    assert "parent ended: FAILED" in lines
    assert "TaskFailed: simulated failure" in lines
    assert lines.count("dead") == 1  # shown once, not once per dependency


def test_stuck_says_so_when_every_old_parent_has_ended(aws: Aws) -> None:
    assert aws.dependencies.register(old_wait("dep/x", "t1", execution=GONE_ARN, parent="gone"))
    result = CliRunner().invoke(app, ["stuck", "--older-than", "1h"])
    assert result.exit_code == 0, result.output
    assert result.stdout == "no running parent has waited longer than 1h\n"
    every = json.loads(run("stuck", "--older-than", "1h", "--all", "--json").stdout)
    assert every["parents"][0]["reason"] == "parent ended: GONE"


# ---------------------------------------------------------------- why a message sits


def claimed(aws: Aws, body: dict[str, Any], message_id: str | None = None) -> str:
    """``body`` claimed by a message, never started (as the tracker leaves it)."""
    model = ProcessPayload.model_validate(body)
    aws.states.claim(model, None, message_id=message_id)
    return model.id


def test_status_says_a_claimed_payload_waits_on_an_unknown_workflow(aws: Aws) -> None:
    # GIVEN a payload claimed for a workflow with no state machine
    stuck_id = claimed(aws, payload("lost", workflow="nope"))
    # WHEN its status is asked for
    shown = json.loads(run("status", stuck_id, "--json").stdout)
    # THEN it says why it does not start
    reason = "unknown workflow 'nope': no state machine deptrack-nope"
    assert shown[0]["state"] == "CLAIMED"
    assert shown[0]["reason"] == reason
    assert reason in run("status", stuck_id).stdout


def test_status_gives_the_tracker_s_reason_from_the_message_s_invalid_record(aws: Aws) -> None:
    # GIVEN a claimed payload whose message the tracker answered on its last receive
    aws.create_workflow("pass", {"StartAt": "D", "States": {"D": {"Type": "Pass", "End": True}}})
    pid = claimed(aws, payload("refused"), message_id="m-1")
    why = "processing failed: RuntimeError: boom (failed on receive 3, the last ...)"
    now = utcnow()
    aws.states.record_invalid(
        InvalidMessageItem(
            payload_id="invalid-message/m-1",
            created_at=now,
            updated_at=now,
            finished_at=now,
            last_error=why,
            message_id="m-1",
            claimed_payload_id=pid,
            body_excerpt="{}",
            expiration_time=int(now.timestamp()) + 3600,
        )
    )
    # WHEN its status is asked for
    shown = json.loads(run("status", pid, "--json").stdout)
    # THEN the record's reason is shown
    assert shown[0]["reason"] == why


def test_a_payload_that_started_has_no_reason(aws: Aws) -> None:
    aws.finished_payload(payload("ok"), PayloadState.SUCCEEDED)
    shown = json.loads(run("status", payload_id("ok"), "--json").stdout)
    assert shown[0]["reason"] is None


@pytest.fixture
def dlq(aws: Aws) -> str:
    return str(aws.sqs.create_queue(QueueName="deptrack-process-dlq")["QueueUrl"])


def test_redrive_dry_run_lists_each_message_with_its_reason(aws: Aws, dlq: str) -> None:
    # GIVEN three dead letters: an unknown workflow, one the tracker answered, one unreadable
    aws.create_workflow("pass", {"StartAt": "D", "States": {"D": {"Type": "Pass", "End": True}}})
    sqs = aws.sqs
    sqs.send_message(QueueUrl=dlq, MessageBody=json.dumps(payload("a", workflow="nope")))
    answered = sqs.send_message(QueueUrl=dlq, MessageBody=json.dumps(payload("b")))["MessageId"]
    sqs.send_message(QueueUrl=dlq, MessageBody="not json")
    now = utcnow()
    aws.states.record_invalid(
        InvalidMessageItem(
            payload_id=f"invalid-message/{answered}",
            created_at=now,
            updated_at=now,
            finished_at=now,
            last_error="processing failed: boom",
            message_id=answered,
            body_excerpt="{}",
            expiration_time=int(now.timestamp()) + 3600,
        )
    )
    # WHEN a dry run lists the DLQ
    listed = json.loads(run("redrive", "--dry-run", "--json").stdout)
    # THEN each message says why it is there
    reasons = {(m["payload_ids"] or ["?"])[0]: m["reason"] for m in listed["messages"]}
    assert reasons[payload_id("a", "nope")] == (
        "unknown workflow 'nope': no state machine deptrack-nope"
    )
    assert reasons[payload_id("b")] == "processing failed: boom"
    assert reasons["?"]  # the body cannot be read: the parse error says so
    human = run("redrive", "--dry-run").stdout
    assert "unknown workflow 'nope'" in human
