"""IAM in cirrus mode: every call allowed and every grant cirrus mode adds used."""

from __future__ import annotations

import fnmatch
import json
from typing import TYPE_CHECKING, Any

import pytest

from dependency_tracker.core import clients
from dependency_tracker_local.pumps import scheduled_event
from tests.unit.handlers.conftest import sqs_event
from tests.unit.template_contract.cfn import ACCOUNT, REGION, Stack
from tests.unit.template_contract.cirrus_at_work import (
    CIRRUS_WORKFLOW,
    CirrusAtWork,
    cirrus_id,
    for_cirrus,
    run_until,
)
from tests.unit.template_contract.deployment import (
    RECORDED_SERVICES,
    Deployment,
    denied_calls,
    deployed,
    with_token_owners,
)
from tests.unit.template_contract.functions import CIRRUS_EVENTS_FUNCTION, FUNCTIONS
from tests.unit.template_contract.lambda_service import LAMBDA_SERVICE_STATEMENTS

if TYPE_CHECKING:
    from collections.abc import Iterator

# cirrus-geo's own names, from CirrusPrefix alone: cirrus-state, cirrus-process,
# cirrus-workflow-event, cirrus-payload-{account}, root prefix "cirrus".
CIRRUS_MODE = {"CirrusPrefix": "cirrus"}


def cirrus_mode_grants(template: dict[str, Any]) -> set[tuple[str, str, str, str]]:
    """(function, Sid, action, resource) of each grant cirrus mode adds to a function's role."""

    def grants(stack: Stack, functions: tuple[str, ...]) -> set[tuple[str, str, str, str]]:
        return {
            (function, statement.sid, action, resource)
            for function in functions
            for statement in stack.statements(function)
            if statement.sid not in LAMBDA_SERVICE_STATEMENTS[function]
            for action in statement.actions
            for resource in statement.resources
        }

    cirrus = Stack(template, CIRRUS_MODE)
    normal = Stack(template)
    return grants(cirrus, (*FUNCTIONS, CIRRUS_EVENTS_FUNCTION)) - grants(normal, FUNCTIONS)


@pytest.fixture
def cirrus_deployment(
    template: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> Iterator[Deployment]:
    with deployed(template, monkeypatch, CIRRUS_MODE) as running:
        yield running


def test_every_cirrus_mode_call_is_allowed_and_every_cirrus_grant_is_used(
    template: dict[str, Any], cirrus_deployment: Deployment
) -> None:
    deployment = cirrus_deployment
    stack, recorder = deployment.stack, deployment.recorder
    # GIVEN cirrus at work beside the stack: "a" succeeds (again when a replace runs it),
    # "b" fails once and then succeeds, "c" succeeds but its event is lost, "huge" (over one
    # SQS message) succeeds, and cirrus refuses "r"
    cirrus = CirrusAtWork(
        deployment,
        plan={
            "a": ["SUCCEEDED"],
            "b": ["FAILED", "SUCCEEDED"],
            "c": ["lost"],
            "huge": ["SUCCEEDED"],
            "r": ["refused"],
        },
    )
    # AND two parents on the stack's own state machines: a Map over "a" and "b", and a
    # 1-of-2 join over "a" and "c"
    parent_map = deployment.sfn.start_execution(
        stateMachineArn=stack.physical("WaitForDependenciesStateMachine").ref,
        name="parent-map",
        input=json.dumps({"dependencies": [for_cirrus("a"), for_cirrus("b")]}),
    )["executionArn"]
    parent_join = deployment.sfn.start_execution(
        stateMachineArn=stack.physical("WaitForJoinStateMachine").ref,
        name="parent-join",
        input=json.dumps({"dependencies": [for_cirrus("a"), for_cirrus("c")], "quorum": 1}),
    )["executionArn"]

    def stopped(execution: str) -> bool:
        status: str = deployment.sfn.describe_execution(executionArn=execution)["status"]
        return status != "RUNNING"

    # WHEN the process function forwards them to cirrus, cirrus runs them and announces the
    # ends through the template's subscription, and the cirrus-events function resolves the
    # waiters
    run_until(deployment, cirrus, lambda: stopped(parent_map) and stopped(parent_join))
    # THEN the parents resumed as cirrus's items say
    described = deployment.sfn.describe_execution(executionArn=parent_map)
    assert (described["status"], described.get("error")) == ("FAILED", "DependencyFailed")
    assert deployment.sfn.describe_execution(executionArn=parent_join)["status"] == "SUCCEEDED"

    # AND the paths the parents did not take: a late waiter on a payload cirrus finished
    # (replayed from cirrus's item), a wait without forwarding, a payload over one SQS
    # message (by cirrus's bucket), a waiter on the failed "b" (it waits for the next run),
    # a replace of the succeeded "a", a payload cirrus refuses, and an id cirrus cannot key
    process_handler = recorder.handler(stack, "ProcessFunction")
    late = {"task_token": "late-waiter", "parent_execution": parent_map}
    huge = for_cirrus("huge")
    huge["features"][0]["properties"] = {"blob": "x" * 300_000}
    paths = [
        ({**for_cirrus("a"), "callback": late}, "replay"),
        ({"wait_for": cirrus_id("a"), "callback": {**late, "task_token": "wait-only"}}, "wait"),
        ({**huge, "callback": {**late, "task_token": "huge"}}, "huge"),
        ({**for_cirrus("b"), "callback": {**late, "task_token": "rerun"}}, "rerun"),
        (
            {
                **for_cirrus("a"),
                "process": [{"workflow": CIRRUS_WORKFLOW, "replace": True}],
                "callback": {**late, "task_token": "replace"},
            },
            "replace",
        ),
        ({**for_cirrus("r"), "callback": {**late, "task_token": "refused"}}, "refused"),
        (
            {**for_cirrus("k"), "id": "workflow-cog/key-abc", "callback": {"task_token": "bad"}},
            "bad",
        ),
    ]
    for body, message_id in paths:
        assert process_handler(sqs_event(body, ids=[message_id])) == {"batchItemFailures": []}
    run_until(deployment, cirrus, lambda: True)
    # AND a sweep, long after "c" ended in cirrus without a word: its waiting rows look old
    table = stack.physical("DependencyTable").ref
    for item in deployment.dynamodb.scan(TableName=table)["Items"]:
        if (
            item["payload_id"]["S"] == cirrus_id("c")
            and item["workflow_state"]["S"] == "PROCESSING"
        ):
            deployment.dynamodb.update_item(
                TableName=table,
                Key={"payload_id": item["payload_id"], "waiter_id": item["waiter_id"]},
                UpdateExpression="SET updated_at = :old",
                ExpressionAttributeValues={":old": {"S": "2000-01-01T00:00:00+00:00"}},
            )
    schedule = scheduled_event(
        rule_arn=f"arn:aws:events:{REGION}:{ACCOUNT}:rule/deptrack-sweeper",
        region=REGION,
        account=ACCOUNT,
    )
    swept = recorder.handler(stack, "SweeperFunction")(schedule)
    assert (swept["reconciled"], swept["reconciled_waiters"]) == (1, 1), swept
    run_until(deployment, cirrus, lambda: True)

    # THEN each waiter heard what cirrus's item (or its refusal) says
    rows = {
        item["task_token"]["S"]: item["workflow_state"]["S"]
        for item in deployment.dynamodb.scan(TableName=table)["Items"]
        if "task_token" in item
    }
    assert {token: rows[token] for token in ("late-waiter", "wait-only", "huge", "rerun")} == {
        "late-waiter": "SUCCEEDED",
        "wait-only": "SUCCEEDED",
        "huge": "SUCCEEDED",
        "rerun": "SUCCEEDED",  # the next run's outcome, not the failure it arrived after
    }
    assert (rows["replace"], rows["refused"]) == ("SUCCEEDED", "INVALID")
    # AND "huge" went to cirrus by an object under cirrus's tmp/ prefix
    forwarded = [
        call.params["Key"]
        for call in recorder.calls
        if call.action == "s3:PutObject"
        and call.params["Bucket"] == cirrus.cirrus.outputs["CirrusPayloadBucketName"]
    ]
    assert len(forwarded) == 1
    assert forwarded[0].startswith("cirrus/tmp/deptrack-forwarded/")
    assert {"CLAIMED_PROCESSING", "NOT_A_PROCESS_PAYLOAD", "SUCCEEDED"} <= set(cirrus.announced)
    # AND every call was allowed by that function's statements, on that resource
    parents = deployment.parents_by_token()
    # an invalid message keeps no parent; this token came from a wait-for-dependencies
    parents["bad"] = stack.physical("WaitForDependenciesStateMachine").ref
    calls = with_token_owners(recorder.calls, parents)
    assert {"ProcessFunction", "SweeperFunction", CIRRUS_EVENTS_FUNCTION, "CallbackFunction"} <= {
        call.function for call in calls
    }
    assert denied_calls(stack, calls) == []
    assert recorder.enforcing
    assert recorder.iam.denials == []
    # AND every grant cirrus mode adds was needed: each (action, resource) was called by
    # the function holding it (the cirrus-events function's Lambda-service statements are
    # held to what Lambda needs by template_contract/test_cirrus_mode.py instead)
    added = cirrus_mode_grants(template)
    assert {grant[0] for grant in added} == {
        "ProcessFunction",
        "SweeperFunction",
        CIRRUS_EVENTS_FUNCTION,
    }
    unused = [
        (function, sid, action, pattern)
        for function, sid, action, pattern in sorted(added)
        if not any(
            call.function == function
            and call.action == action
            and fnmatch.fnmatchcase(call.resource, pattern)
            for call in calls
        )
    ]
    assert unused == []
    assert clients.client.cache_info().currsize == len(RECORDED_SERVICES), "unwatched client"
