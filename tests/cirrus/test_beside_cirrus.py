"""The tracker in cirrus mode beside cirrus-geo 2.0.0, whose own Lambdas run every payload.

One embedded stack in cirrus mode: the tracker's real parents
(``wait-for-dependencies`` and ``wait-for-join``) send to the tracker's process
queue; the tracker forwards to cirrus's process queue; cirrus's own ``process``
and ``update_state`` handlers claim, start and record the runs on cirrus's
layout; cirrus's workflow events reach the tracker through an SQS queue
subscribed to cirrus's topic. Nothing here imitates cirrus: every state and
every event is written by cirrus-geo's code.
"""

from __future__ import annotations

import importlib
import io
import json
from typing import TYPE_CHECKING, Any

import pytest

from dependency_tracker.cirrus.models import subscription_attributes
from dependency_tracker.cirrus.store import CirrusStateTable
from dependency_tracker.core.enums import PayloadState
from dependency_tracker.table.dependency_table import DependencyTable
from dependency_tracker_local import EmbeddedStack
from dependency_tracker_local.cirrus import CIRRUS_TEST_WORKFLOWS
from tests.conftest import wait_until
from tests.e2e.conftest import finished

if TYPE_CHECKING:
    from collections.abc import Iterator

    from dependency_tracker.cirrus.models import CirrusStateItem

COLLECTION = "beside"
PARENT_TIMEOUT = 60


@pytest.fixture(scope="module")
def stack() -> Iterator[EmbeddedStack]:
    with EmbeddedStack(
        prefix="deptrack",
        sink=io.StringIO(),
        cirrus=True,
        sweeper_interval=None,
        sweeper_min_age_seconds=1,
    ) as running:
        assert running.cirrus is not None
        running.cirrus.create_test_workflows(running.client)
        yield running


def member(item: str, workflow: str = "succeed", **process: Any) -> dict[str, Any]:
    """A cirrus payload for one of cirrus's test workflows."""
    return {
        "type": "FeatureCollection",
        "features": [{"type": "Feature", "id": item, "collection": COLLECTION}],
        "process": [{"workflow": workflow, "upload_options": {}, "tasks": {}, **process}],
    }


def pid(item: str, workflow: str = "succeed") -> str:
    return f"{COLLECTION}/workflow-{workflow}/{item}"


def cirrus_state(stack: EmbeddedStack, payload_id: str) -> CirrusStateItem | None:
    table = CirrusStateTable(stack.client("dynamodb"), stack.outputs["CirrusStateTableName"])
    return table.get(payload_id)


def start(stack: EmbeddedStack, name: str, body: dict[str, Any], *, join: bool = False) -> str:
    machine = "wait-for-join" if join else "wait-for-dependencies"
    response = stack.client("stepfunctions").start_execution(
        stateMachineArn=stack.outputs["StateMachines"][machine],
        name=name,
        input=json.dumps({"timeout_seconds": PARENT_TIMEOUT, **body}),
    )
    return str(response["executionArn"])


def ended_in_cirrus(stack: EmbeddedStack, payload_id: str, runs: int = 1) -> CirrusStateItem:
    def ended() -> CirrusStateItem | None:
        item = cirrus_state(stack, payload_id)
        ok = item is not None and item.state.is_terminal and len(item.executions) >= runs
        return item if ok else None

    item: CirrusStateItem = wait_until(ended, timeout=30)
    return item


def cirrus_runs(stack: EmbeddedStack, workflow: str, payload_id: str) -> list[dict[str, Any]]:
    """Executions of cirrus's workflow whose input is ``payload_id`` (moto's, not cirrus's)."""
    sfn = stack.client("stepfunctions")
    assert stack.cirrus is not None
    arn = stack.cirrus.state_machine_arn(workflow)
    found = []
    for execution in sfn.list_executions(stateMachineArn=arn)["executions"]:
        described = sfn.describe_execution(executionArn=execution["executionArn"])
        if json.loads(described["input"]).get("id") == payload_id:
            found.append(described)
    return found


def rows_of(stack: EmbeddedStack, payload_id: str) -> list[Any]:
    table = DependencyTable(stack.client("dynamodb"), stack.outputs["DependencyTableName"])
    return list(table.rows(payload_id))


def send_to_cirrus(stack: EmbeddedStack, body: dict[str, Any]) -> None:
    """A payload cirrus gets from someone else (its own users), not from the tracker."""
    stack.client("sqs").send_message(
        QueueUrl=stack.outputs["CirrusProcessQueueUrl"], MessageBody=json.dumps(body)
    )


def test_the_stack_runs_cirrus_own_code() -> None:
    process = importlib.import_module("cirrus.lambda_functions.process")
    assert "site-packages" in (process.__file__ or "")
    assert set(CIRRUS_TEST_WORKFLOWS) >= {"succeed", "fail", "invalid", "timeout", "minimal"}


def test_outcomes_through_the_map_parent(stack: EmbeddedStack) -> None:
    # GIVEN one parent per outcome, each waiting on a payload cirrus has never seen
    cases = {
        "ok": ("succeed", "SUCCEEDED", None),
        "broken": ("fail", "FAILED", "DependencyFailed"),
        "rejected": ("invalid", "FAILED", "DependencyInvalid"),
        "slow": ("timeout", "FAILED", "DependencyFailed"),
    }
    parents = {
        item: start(stack, f"map-{item}", {"dependencies": [member(item, workflow)]})
        for item, (workflow, _, _) in cases.items()
    }
    # THEN each parent ends as its dependency did in cirrus, each payload ran once
    for item, (workflow, status, error) in cases.items():
        described = finished(stack, parents[item])
        assert (described["status"], described.get("error")) == (status, error), item
        assert len(cirrus_runs(stack, workflow, pid(item, workflow))) == 1
    ok = json.loads(finished(stack, parents["ok"])["output"])["dependencies"][0]
    assert ok == {"payload_id": pid("ok"), "replayed": False}
    # what the waiter learned: cirrus's run, and where cirrus keeps its output
    (row,) = rows_of(stack, pid("ok"))
    recorded = cirrus_state(stack, pid("ok"))
    assert recorded is not None
    assert row.workflow_state is PayloadState.SUCCEEDED
    assert row.execution_arn == recorded.executions[-1]
    result = json.loads(row.result_json or "{}")
    # output_url names the output payload cirrus stored (cirrus 2.0.0 records no outputs)
    bucket, key = result["output_url"].removeprefix("s3://").split("/", 1)
    stored = stack.client("s3").get_object(Bucket=bucket, Key=key)["Body"].read()
    assert json.loads(stored)["id"] == pid("ok")
    assert result["items"] == []
    # cirrus recorded TIMED_OUT as FAILED, with its own error
    slow = cirrus_state(stack, pid("slow", "timeout"))
    assert slow is not None
    assert slow.state is PayloadState.FAILED
    assert (slow.last_error or "").startswith("TimedOutError")


def test_a_payload_cirrus_already_ran_is_replayed(stack: EmbeddedStack) -> None:
    # GIVEN a payload cirrus ran for someone else before any parent waited
    send_to_cirrus(stack, member("early"))
    ended_in_cirrus(stack, pid("early"))
    # WHEN a parent waits on it
    parent = start(stack, "replay-early", {"dependencies": [member("early")]})
    described = finished(stack, parent)
    # THEN it resumes from cirrus's state, and cirrus ran nothing more
    assert described["status"] == "SUCCEEDED"
    (summary,) = json.loads(described["output"])["dependencies"]
    assert summary["replayed"] is True
    assert len(cirrus_runs(stack, "succeed", pid("early"))) == 1


def test_a_failed_payload_is_run_again_by_cirrus(stack: EmbeddedStack) -> None:
    # GIVEN a payload that FAILED in cirrus (cirrus-geo's own minimal workflow, succeed false)
    send_to_cirrus(stack, member("fixed", "minimal", succeed=False))
    first = ended_in_cirrus(stack, pid("fixed", "minimal"))
    assert first.state is PayloadState.FAILED
    # WHEN a parent waits on it with its input fixed
    parent = start(
        stack, "rerun-fixed", {"dependencies": [member("fixed", "minimal", succeed=True)]}
    )
    described = finished(stack, parent)
    # THEN cirrus ran it a second time, and the parent got that run's result, not the old one
    assert described["status"] == "SUCCEEDED"
    again = cirrus_state(stack, pid("fixed", "minimal"))
    assert again is not None
    assert again.state is PayloadState.SUCCEEDED
    assert len(again.executions) == 2
    (row,) = rows_of(stack, pid("fixed", "minimal"))
    assert row.execution_arn == again.executions[-1]
    assert len(cirrus_runs(stack, "minimal", pid("fixed", "minimal"))) == 2


def test_replace_runs_a_succeeded_payload_again(stack: EmbeddedStack) -> None:
    send_to_cirrus(stack, member("again"))
    ended_in_cirrus(stack, pid("again"))
    parent = start(stack, "replace-again", {"dependencies": [member("again", replace=True)]})
    described = finished(stack, parent)
    assert described["status"] == "SUCCEEDED"
    (summary,) = json.loads(described["output"])["dependencies"]
    assert summary["replayed"] is False
    item = cirrus_state(stack, pid("again"))
    assert item is not None
    assert len(item.executions) == 2
    (row,) = rows_of(stack, pid("again"))
    assert row.execution_arn == item.executions[-1]


def test_many_parents_on_one_payload_run_it_once(stack: EmbeddedStack) -> None:
    # GIVEN five parents on one payload that takes two seconds in cirrus
    shared = member("shared", workflow_options={"wait_seconds": 2})
    parents = [start(stack, f"many-{n}", {"dependencies": [shared]}) for n in range(5)]
    # THEN all resume, and cirrus ran the payload once (its claim turned the others away)
    for parent in parents:
        assert finished(stack, parent)["status"] == "SUCCEEDED"
    assert len(cirrus_runs(stack, "succeed", pid("shared"))) == 1
    item = cirrus_state(stack, pid("shared"))
    assert item is not None
    assert len(item.executions) == 1
    rows = rows_of(stack, pid("shared"))
    assert len(rows) == 5
    assert {row.workflow_state for row in rows} == {PayloadState.SUCCEEDED}


def test_a_join_over_cirrus_payloads(stack: EmbeddedStack) -> None:
    # GIVEN a 2-of-3 join: two members succeed, one fails
    members = [member("j-1"), member("j-2"), member("j-3", "fail")]
    parent = start(
        stack,
        "join-2of3",
        {"dependencies": members, "quorum": 2, "payload_id": f"{COLLECTION}/workflow-join/j"},
        join=True,
    )
    described = finished(stack, parent)
    assert described["status"] == "SUCCEEDED"
    summary = json.loads(described["output"])["join"]
    assert summary["quorum"] == 2
    assert summary["counts"]["succeeded"] == 2
    for item, workflow in (("j-1", "succeed"), ("j-2", "succeed")):
        assert len(cirrus_runs(stack, workflow, pid(item, workflow))) == 1


def test_a_join_that_cannot_reach_its_quorum(stack: EmbeddedStack) -> None:
    members = [member("q-1", "fail"), member("q-2", "invalid"), member("q-3")]
    parent = start(stack, "join-unreachable", {"dependencies": members, "quorum": 2}, join=True)
    described = finished(stack, parent)
    assert (described["status"], described.get("error")) == ("FAILED", "QuorumUnreachable")


def test_a_lost_event_is_recovered_by_the_sweeper(stack: EmbeddedStack) -> None:
    # GIVEN cirrus's events stop reaching the tracker (the subscription is gone)
    sns = stack.client("sns")
    topic = stack.outputs["CirrusWorkflowEventTopicArn"]
    queue_arn = stack.outputs["CirrusEventQueueArn"]
    (subscription,) = [
        s["SubscriptionArn"]
        for s in sns.list_subscriptions_by_topic(TopicArn=topic)["Subscriptions"]
        if s["Endpoint"] == queue_arn
    ]
    sns.unsubscribe(SubscriptionArn=subscription)
    try:
        parent = start(stack, "lost-event", {"dependencies": [member("lost")]})
        ended_in_cirrus(stack, pid("lost"))
        # WHEN cirrus has run the payload, no event came: the waiter still waits
        (row,) = rows_of(stack, pid("lost"))
        assert row.workflow_state is PayloadState.PROCESSING
        # THEN the sweeper asks cirrus's state table, and the parent resumes
        report = wait_until(lambda: (r := stack.sweep_once())["reconciled"] and r, timeout=10)
        assert report["reconciled_waiters"] == 1
        assert finished(stack, parent)["status"] == "SUCCEEDED"
    finally:
        sns.subscribe(
            TopicArn=topic,
            Protocol="sqs",
            Endpoint=queue_arn,
            Attributes=subscription_attributes(),
        )


def test_nothing_was_left_behind(stack: EmbeddedStack) -> None:
    # Runs last in this file: no message in any DLQ, no event the pumps gave up on.
    sqs = stack.client("sqs")
    for name in ("ProcessDlqUrl", "CirrusEventDlqUrl", "CirrusProcessDlqUrl"):
        attributes = sqs.get_queue_attributes(
            QueueUrl=stack.outputs[name], AttributeNames=["ApproximateNumberOfMessages"]
        )["Attributes"]
        assert attributes["ApproximateNumberOfMessages"] == "0", name
    assert stack.dead_letters == {"update-state": [], "callback": []}
    assert stack.pump_errors == 0
