"""Quorum, either-or and all-of waits with one token, through the real wait-for-join."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest
from botocore.exceptions import ClientError

from dependency_tracker.core.enums import PayloadState
from dependency_tracker.joins.manifest import manifest_text
from dependency_tracker.joins.results import read_results, results_key
from dependency_tracker.joins.store import JoinStore
from dependency_tracker.table.items import membership_id_for
from tests.conftest import wait_until
from tests.e2e.conftest import dependency, dependency_id, finished, state_of, waiters

if TYPE_CHECKING:
    from dependency_tracker_local import LocalStack

pytestmark = pytest.mark.e2e

JOIN = "wait-for-join"


def start_join(stack: LocalStack, name: str, members: list[dict[str, Any]], **fields: Any) -> str:
    response = stack.client("stepfunctions").start_execution(
        stateMachineArn=stack.outputs["StateMachines"][JOIN],
        name=name,
        input=json.dumps({"dependencies": members, **fields}),
    )
    return str(response["executionArn"])


def history_events(stack: LocalStack, execution_arn: str) -> int:
    sfn = stack.client("stepfunctions")
    pages = sfn.get_paginator("get_execution_history").paginate(executionArn=execution_arn)
    return sum(len(page["events"]) for page in pages)


def test_quorum_exits_early_while_a_member_still_runs(stack: LocalStack) -> None:
    members = [dependency("jq-1"), dependency("jq-2"), dependency("jq-slow", seconds=4)]
    described = finished(stack, start_join(stack, "quorum-early", members, quorum=2))
    # THEN the parent resumed with 2 of 3 while the slow member was still running
    assert described["status"] == "SUCCEEDED"
    summary = json.loads(described["output"])["join"]
    assert summary["succeeded"] == [dependency_id("jq-1"), dependency_id("jq-2")]
    assert summary["pending"] == [dependency_id("jq-slow")]
    assert (summary["quorum"], summary["total"], summary["failed"]) == (2, 3, [])
    assert "winner" not in summary
    slow = state_of(stack, dependency_id("jq-slow"))
    assert slow is not None
    assert slow.state is PayloadState.PROCESSING
    # AND its later result is recorded on the join without firing it again
    join_id = summary["join_id"]
    dependencies = waiters(stack)
    joins = JoinStore(dependencies.client, dependencies.table_name)

    def recorded() -> bool:
        return joins.read(join_id)[1:] == (3, 0)

    wait_until(recorded, timeout=30)
    row = joins.get(join_id)
    assert row is not None
    assert row.notify_outcome == "SENT:SUCCEEDED"
    membership = dependencies.get_row(dependency_id("jq-slow"), membership_id_for(join_id))
    assert membership is not None
    assert membership.notify_outcome == "COUNTED:SUCCEEDED"


def test_quorum_unreachable_fails_early(stack: LocalStack) -> None:
    members = [
        dependency("ju-1", outcome="fail"),
        dependency("ju-2", outcome="invalid"),
        dependency("ju-slow", seconds=4),
    ]
    described = finished(stack, start_join(stack, "quorum-unreachable", members, quorum=2))
    assert (described["status"], described["error"]) == ("FAILED", "QuorumUnreachable")
    slow = state_of(stack, dependency_id("ju-slow"))
    assert slow is not None
    assert slow.state is PayloadState.PROCESSING


def test_either_or_names_the_winner(stack: LocalStack) -> None:
    members = [dependency("je-slow", seconds=3), dependency("je-fast")]
    described = finished(stack, start_join(stack, "either", members, quorum=1))
    summary = json.loads(described["output"])["join"]
    assert summary["winner"] == dependency_id("je-fast")
    assert summary["pending"] == [dependency_id("je-slow")]


def test_all_of_two_hundred_members_in_one_parent(stack: LocalStack) -> None:
    members = [dependency(f"ja-{index:03d}") for index in range(200)]
    parent = start_join(stack, "all-200", members)
    described = finished(stack, parent, timeout=120)
    assert described["status"] == "SUCCEEDED"
    summary = json.loads(described["output"])["join"]
    assert (summary["quorum"], summary["total"], len(summary["succeeded"])) == (200, 200, 200)
    assert summary["pending"] == []
    # one token: the parent's history does not grow with n
    assert history_events(stack, parent) < 20


def test_timeout_then_the_summary_says_who_finished(stack: LocalStack) -> None:
    members = [dependency("jt-fast"), dependency("jt-slow", seconds=5)]
    described = finished(stack, start_join(stack, "join-timeout", members, timeout_seconds=2))
    assert (described["status"], described["error"]) == ("FAILED", "DependencyTimedOut")
    cause = json.loads(described["cause"])
    assert cause["total"] == 2
    assert cause["counts"] == {"succeeded": 1, "failed": 0}
    # the row it names is the join's; each membership row says how its member ended
    assert cause["row"] == {"payload_id": f"join#{cause['join_id']}", "waiter_id": "join"}
    joins = JoinStore(stack.client("dynamodb"), stack.outputs["DependencyTableName"])
    outcomes, _ = joins.members(cause["join_id"])
    assert [(m.payload_id, m.state) for m in outcomes] == [
        (dependency_id("jt-fast"), PayloadState.SUCCEEDED),
        (dependency_id("jt-slow"), None),
    ]
    # AND the cause names the results manifest, written once the join is decided (here when
    # its slow member ends), with every member's outcome
    bucket = stack.outputs["PayloadBucketName"]
    assert cause["results_url"] == f"s3://{bucket}/{results_key(cause['join_id'])}"

    def manifest() -> list[tuple[str, str | None]]:
        try:
            found = read_results(cause["results_url"], s3=stack.client("s3"))
            return [(member.payload_id, member.state) for member in found]
        except ClientError:
            return []

    assert wait_until(lambda: len(manifest()) == 2, timeout=30)
    assert sorted(manifest()) == [
        (dependency_id("jt-fast"), PayloadState.SUCCEEDED),
        (dependency_id("jt-slow"), PayloadState.SUCCEEDED),
    ]


def test_map_pattern_history_grows_with_n_and_the_join_does_not(stack: LocalStack) -> None:
    members = [dependency(f"jh-{index}") for index in range(10)]
    sfn = stack.client("stepfunctions")
    map_parent = sfn.start_execution(
        stateMachineArn=stack.outputs["StateMachines"]["wait-for-dependencies"],
        name="history-map",
        input=json.dumps({"dependencies": members}),
    )["executionArn"]
    join_parent = start_join(stack, "history-join", members)
    for arn in (map_parent, join_parent):
        assert finished(stack, arn)["status"] == "SUCCEEDED"
    assert history_events(stack, join_parent) < 20
    assert history_events(stack, map_parent) >= 80


def test_a_join_by_manifest_mixing_payloads_and_references(stack: LocalStack) -> None:
    # GIVEN a JSON Lines manifest in the payload bucket: payloads, a reference, a duplicate
    s3, bucket = stack.client("s3"), stack.outputs["PayloadBucketName"]
    s3.put_object(Bucket=bucket, Key="refs/jm-ref.json", Body=json.dumps(dependency("jm-ref")))
    entries = [dependency(f"jm-{i}") for i in range(4)]
    entries += [{"url": f"s3://{bucket}/refs/jm-ref.json"}, dependency("jm-0")]
    s3.put_object(Bucket=bucket, Key="manifests/jm.jsonl", Body=manifest_text(entries).encode())
    # WHEN a parent waits on all of it through wait-for-join's dependencies_url
    described = finished(
        stack,
        start_join_by_url(stack, "manifest-join", f"s3://{bucket}/manifests/jm.jsonl"),
        timeout=60,
    )
    # THEN it resumes once every distinct member succeeded
    assert described["status"] == "SUCCEEDED"
    summary = json.loads(described["output"])["join"]
    expected = [dependency_id(f"jm-{i}") for i in range(4)] + [dependency_id("jm-ref")]
    assert (summary["total"], summary["succeeded"]) == (5, expected)
    assert summary["counts"] == {"succeeded": 5, "failed": 0, "pending": 0}
    assert summary["duplicates"] == [dependency_id("jm-0")]


def test_an_unreadable_manifest_fails_the_parent_with_invalid_join(stack: LocalStack) -> None:
    url = f"s3://{stack.outputs['PayloadBucketName']}/manifests/none.jsonl"
    described = finished(stack, start_join_by_url(stack, "manifest-missing", url), timeout=60)
    assert (described["status"], described["error"]) == ("FAILED", "InvalidJoin")


def start_join_by_url(stack: LocalStack, name: str, url: str) -> str:
    response = stack.client("stepfunctions").start_execution(
        stateMachineArn=stack.outputs["StateMachines"][JOIN],
        name=name,
        input=json.dumps({"dependencies_url": url, "timeout_seconds": 60}),
    )
    return str(response["executionArn"])
