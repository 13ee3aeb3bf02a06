"""Why things stopped, as the operator's commands tell it, against ``dependency-tracker serve``.

A failed wait shows its parent's error and cause; ``stuck`` leaves out parents
that ended; ``status`` and ``redrive --dry-run`` say why a message for an
unknown workflow does not move on.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest

from dependency_tracker.core.enums import utcnow
from tests.conftest import wait_until
from tests.e2e.serving import Server, serving, write
from tests.unit.cli.rows import waiter

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

pytestmark = pytest.mark.e2e

UNKNOWN_REASON = "unknown workflow 'nope': no state machine deptrack-nope"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving(tmp_path_factory.mktemp("serve")) as running:
        yield running


def simulate(item: str, *, workflow: str = "simulate", **task: Any) -> dict[str, Any]:
    return {
        "type": "FeatureCollection",
        "features": [{"type": "Feature", "id": item, "collection": "why"}],
        "process": [{"workflow": workflow, "tasks": {"simulate": task}}],
    }


def start_parent(server: Server, name: str, dependency: dict[str, Any]) -> str:
    response = server.client("stepfunctions").start_execution(
        stateMachineArn=server.outputs["StateMachines"]["wait-for-dependencies"],
        name=name,
        input=json.dumps(
            {"dependencies": [dependency], "timeout_seconds": 600, "payload_id": f"why/{name}"}
        ),
    )
    return str(response["executionArn"])


def described(server: Server, arn: str) -> dict[str, Any]:
    sfn = server.client("stepfunctions")

    def stopped() -> dict[str, Any] | None:
        found: dict[str, Any] = sfn.describe_execution(executionArn=arn)
        return None if found["status"] == "RUNNING" else found

    result: dict[str, Any] = wait_until(stopped, timeout=30, every=0.25)
    return result


def test_waiters_show_the_failed_parent_s_error_and_cause(server: Server) -> None:
    # GIVEN a parent that failed because its dependency failed
    arn = start_parent(server, "told", simulate("w-bad", outcome="fail"))
    parent = described(server, arn)
    assert parent["status"] == "FAILED"
    # WHEN the dependency's waiters are listed
    result = server.cli("waiters", "why/workflow-simulate/w-bad", "--json")
    # THEN the wait shows the parent's own error and cause, whole
    assert result.exit_code == 0, result.output
    (view,) = json.loads(result.stdout)["waiters"]
    assert view["state"] == "FAILED"
    assert view["parent_status"] == "FAILED"
    assert view["failure"] == {
        "source": "parent",
        "error": parent["error"],
        "cause": parent["cause"],
    }


def test_stuck_leaves_out_a_parent_that_ended_unless_all(server: Server) -> None:
    # GIVEN a parent that ended (it failed) while a row still says it waits, as when it
    # timed out before its dependency ended
    arn = start_parent(server, "ended", simulate("e-bad", outcome="fail"))
    parent = described(server, arn)
    row = waiter("why/never-ends", "ended-parent", parent="why/ended", execution=arn)
    since = utcnow() - timedelta(hours=2)
    server.dependencies().register(row.model_copy(update={"created_at": since}))
    # WHEN stuck parents are listed
    shown = json.loads(server.cli("stuck", "--older-than", "1h", "--json").stdout)
    # THEN the ended parent is not among them, only counted
    assert "payload:why/ended" not in [p["parent"]["id"] for p in shown["parents"]]
    assert shown["hidden_ended"] >= 1
    # AND --all lists it once, saying how it ended, with its error and cause
    every = json.loads(server.cli("stuck", "--older-than", "1h", "--all", "--json").stdout)
    (ended,) = [p for p in every["parents"] if p["parent"]["id"] == "payload:why/ended"]
    assert ended["reason"] == "parent ended: FAILED"
    assert (ended["error"], ended["cause"]) == (parent["error"], parent["cause"])


def test_status_and_redrive_say_why_an_unknown_workflow_sits(
    server: Server, tmp_path: Path
) -> None:
    # GIVEN a payload for a workflow with no state machine, sent without the check
    path = write(tmp_path, "nope.json", simulate("lost", workflow="nope"))
    sent = server.cli("publish", path, "--no-check-workflows")
    assert sent.exit_code == 0, sent.output
    payload_id = "why/workflow-nope/lost"

    # WHEN the tracker claimed it (it cannot start it, and retries)
    def claimed() -> dict[str, Any] | None:
        result = server.cli("status", payload_id, "--json")
        views: list[dict[str, Any]] = json.loads(result.stdout) if result.stdout else []
        return views[0] if views and views[0].get("state") == "CLAIMED" else None

    view = wait_until(claimed, timeout=30, every=0.25)
    # THEN status says why, in JSON and on the card
    assert view["reason"] == UNKNOWN_REASON
    card = server.cli("status", payload_id)
    assert card.exit_code == 0, card.output
    assert UNKNOWN_REASON in card.stdout
    # AND a dead letter for the same workflow is listed with that reason
    server.client("sqs").send_message(
        QueueUrl=server.outputs["ProcessDlqUrl"],
        MessageBody=json.dumps(simulate("dead", workflow="nope")),
    )
    listed = json.loads(server.cli("redrive", "--dry-run", "--json").stdout)
    reasons = {m["payload_ids"][0]: m["reason"] for m in listed["messages"] if m["payload_ids"]}
    assert reasons["why/workflow-nope/dead"] == UNKNOWN_REASON
