"""IAM against real calls: the handlers on moto, every call allowed and every grant used.

``template_contract.deployment`` deploys the template's resources on moto and records each
AWS call the handlers make; the test drives the parents' paths and those they do not take.
"""

from __future__ import annotations

import fnmatch
import json
from typing import TYPE_CHECKING, Any

import pytest

from dependency_tracker.core import clients, settings
from dependency_tracker.core.enums import PayloadState
from dependency_tracker.joins.manifest import manifest_text
from dependency_tracker.payloads.model import ProcessPayload
from dependency_tracker.payloads.state_table import StateTable
from dependency_tracker.sweeper.store import CURSOR_KEY, SweepCursor
from dependency_tracker_local.events import status_change_event
from dependency_tracker_local.pumps import scheduled_event
from tests.conftest import payload, wait_until
from tests.unit.handlers.conftest import sqs_event
from tests.unit.template_contract.cfn import ACCOUNT, REGION
from tests.unit.template_contract.deployment import (
    RECORDED_SERVICES,
    Deployment,
    denied_calls,
    deployed,
    reset_handlers,
    with_token_owners,
)
from tests.unit.template_contract.functions import FUNCTIONS
from tests.unit.template_contract.lambda_service import LAMBDA_SERVICE_STATEMENTS

if TYPE_CHECKING:
    from collections.abc import Iterator

# Statements granted ahead of the code that uses them: (function, Sid).
AWAITING_CODE: set[tuple[str, str]] = set()
# Statements only a failure uses, which the paths below do not provoke: (function, Sid).
# A results manifest's multipart upload that fails is aborted
# (tests/unit/flows/test_join_results.py provokes it).
ON_FAILURE_ONLY = {
    ("CallbackFunction", "AbortJoinResultsUploads"),
    ("SweeperFunction", "AbortJoinResultsUploads"),
}
# GetObject of a missing key answers NoSuchKey only to a caller allowed s3:ListBucket for
# that request (else AccessDenied), and a GetObject carries no s3:prefix: the sweeper lists
# under its cursor's key first (FindCursor), a call of its own; the IAM model holds S3's rule.


@pytest.fixture
def deployment(template: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Iterator[Deployment]:
    with deployed(template, monkeypatch) as running:
        yield running


def simulated(item_id: str, outcome: str = "succeed", **extra: Any) -> dict[str, Any]:
    """A payload for the stack's example workflow ``simulate``."""
    body = payload(item_id, workflow="simulate", **extra)
    body["process"][0]["tasks"] = {"simulate": {"seconds": 0, "outcome": outcome}}
    return body


def untaken_paths(bucket: str, parent_map: str, parent_join: str) -> list[tuple[Any, str]]:
    """Process messages (body, message id) for the paths the two parents do not take."""
    late = {"task_token": "late-waiter", "parent_execution": parent_map}
    join: dict[str, Any] = {
        "join": {
            "task_token": "join-token",
            "join_id": "retried",
            "quorum": 1,
            "parent_execution": parent_join,
        },
        "payloads": [simulated("a")],
    }
    # the same join sent again by its parent's retry (a new token: it joins the wait)
    retried = {**join, "join": {**join["join"], "task_token": "join-token-2"}}
    lost = {
        # It cancels with its parent (ended by now): registering it finds the parent gone,
        # and its answer, refused as closed, cancels it again (the callback, the sweeper).
        "join": {
            "task_token": "lost-join",
            "quorum": 1,
            "parent_execution": parent_join,
            "on_parent_gone": "cancel",
        },
        "payloads": [simulated("b", "fail")],
    }
    big = simulated("big")
    big["features"][0]["properties"] = {"blob": "x" * 5000}
    huge = simulated("huge")
    huge["features"][0]["properties"] = {"blob": "x" * 300_000}  # over the execution limit
    chained = simulated("chained")
    chained["process"].append({"workflow": "simulate", "collections": ["next-step"]})
    huge_chain = simulated("huge-chain")
    huge_chain["features"][0]["properties"] = {"blob": "x" * 300_000}
    huge_chain["process"].append({"workflow": "simulate", "collections": ["huge-next"]})
    # ids under the 2,048-byte key limit whose list outgrows the join summary's bound
    members = [{**simulated(f"wide-{i}"), "id": f"wide-{i:02d}-" + "w" * 1_900} for i in range(18)]
    wide = {
        "join": {"task_token": "wide-join", "parent_execution": parent_join},
        "payloads": members,
    }
    # a member by reference: n is known only once the last chunk is read
    by_reference = {
        "join": {"task_token": "ref-join", "parent_execution": parent_join},
        "payloads": [simulated("e"), simulated("f"), {"url": f"s3://{bucket}/p/d.json"}],
    }
    # an Express child: it writes its output to the bucket and reports its end by pointer
    express = simulated("express")
    express["process"][0]["workflow"] = "simulate-express"
    x_id, y_id = (ProcessPayload.model_validate(simulated(n)).id for n in ("x", "y"))
    x_waits = {**simulated("y"), "callback": {**late, "task_token": "x", "waiter_payload_id": x_id}}
    y_waits = {**simulated("x"), "callback": {**late, "task_token": "y", "waiter_payload_id": y_id}}
    # a join by a manifest in a versioned bucket: its later chunks read the version read first
    by_manifest = {
        "join": {"task_token": "manifest-join", "parent_execution": parent_join},
        "payloads_url": f"s3://{bucket}/{VERSIONED_MANIFEST}",
    }
    return [
        ({"url": f"s3://{bucket}/p/d.json"}, "s3-pointer"),
        (by_manifest, "manifest-join"),
        (big, "big-result"),
        (express, "express"),
        (chained, "chained"),
        (huge, "huge-input"),
        (huge_chain, "huge-chain"),
        (wide, "wide-join"),
        (by_reference, "ref-join"),
        ({**simulated("a"), "callback": late}, "late-waiter"),
        ({"process": [{"workflow": "simulate"}], "callback": {"task_token": "bad"}}, "bad"),
        (join, "join"),
        (join, "join"),
        (retried, "retried-join"),
        (lost, "lost-join"),
        (x_waits, "x-waits"),
        (y_waits, "y-waits"),
    ]


VERSIONED_MANIFEST = "manifests/versioned.jsonl"


def put_versioned_manifest(deployment: Deployment, entries: list[dict[str, Any]]) -> None:
    """The payload bucket versioned (as its operator may), and a manifest in it."""
    s3, bucket = deployment.s3, deployment.stack.physical("PayloadBucket").ref
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    s3.put_object(Bucket=bucket, Key=VERSIONED_MANIFEST, Body=manifest_text(entries).encode())


def take_over_a_lost_chain(deployment: Deployment, item: str) -> dict[str, Any]:
    """Run a two-step payload whose status change is lost; the process function takes it over.

    The process function claims and starts the first step; the run ends but update-state
    never hears of it (the executions pump is not pumped), so the state item still says
    PROCESSING. Once its lease ran out (claimed long ago), the same message comes back: the
    lease finds the run SUCCEEDED, records it, and chains to the next step. Its answer.
    """
    stack, recorder = deployment.stack, deployment.recorder
    process_handler = recorder.handler(stack, "ProcessFunction")
    first = simulated(item)
    first["features"][0]["properties"] = {"blob": "x" * 300_000}  # a next step by reference
    first["process"].append({"workflow": "simulate", "collections": [f"{item}-next"]})
    payload_id = ProcessPayload.model_validate(first).id
    assert process_handler(sqs_event(first, ids=[f"{item}-1"])) == {"batchItemFailures": []}
    states = StateTable(deployment.dynamodb, stack.physical("StateTable").ref)

    def run_ended() -> bool:
        seen = states.get(payload_id)
        return bool(
            seen is not None
            and seen.execution_arn is not None
            and deployment.sfn.describe_execution(executionArn=seen.execution_arn)["status"]
            == "SUCCEEDED"
        )

    wait_until(run_ended, timeout=30)
    deployment.dynamodb.update_item(
        TableName=stack.physical("StateTable").ref,
        Key={"payload_id": {"S": payload_id}},
        UpdateExpression="SET claimed_at = :old",
        ExpressionAttributeValues={":old": {"S": "2000-01-01T00:00:00+00:00"}},
    )
    answer: dict[str, Any] = process_handler(sqs_event(first, ids=[f"{item}-2"]))
    return answer


def sweep_lost_callbacks(deployment: Deployment, resume_after: str) -> dict[str, Any]:
    """Un-notify, long ago, a success and a failure for each parent machine; run one sweep.

    The Map's waiter on "b", the late waiter on "a", the lost join and the wide join (whose
    summary goes by reference); the sweep continues a state-table pass after ``resume_after``.
    """
    stack, recorder = deployment.stack, deployment.recorder
    bucket = stack.physical("PayloadBucket").ref
    table = stack.physical("DependencyTable").ref
    failed_id = ProcessPayload.model_validate(simulated("b", "fail")).id
    lost = [
        {"payload_id": item["payload_id"], "waiter_id": item["waiter_id"]}
        for item in deployment.dynamodb.scan(TableName=table)["Items"]
        if item.get("task_token", {}).get("S") in {"wide-join", "lost-join", "late-waiter"}
        or (item["payload_id"]["S"] == failed_id and "task_token" in item)
    ]
    assert len(lost) == 4
    for key in lost:
        deployment.dynamodb.update_item(
            TableName=table,
            Key=key,
            # A lost record: no token of the row was answered (a join records each).
            UpdateExpression="SET resolved_at = :old REMOVE notified_at, answered",
            ExpressionAttributeValues={":old": {"S": "2000-01-01T00:00:00+00:00"}},
        )
    deployment.s3.put_object(
        Bucket=bucket,
        Key=CURSOR_KEY,
        Body=SweepCursor(
            dependency_table=table,
            state_table=stack.physical("StateTable").ref,
            states={"payload_id": {"S": resume_after}},
        ).model_dump_json(),
    )
    schedule = scheduled_event(
        rule_arn=f"arn:aws:events:{REGION}:{ACCOUNT}:rule/deptrack-sweeper",
        region=REGION,
        account=ACCOUNT,
    )
    swept: dict[str, Any] = recorder.handler(stack, "SweeperFunction")(schedule)
    return swept


def decide_a_deadline(deployment: Deployment) -> bool:
    """A join whose deadline (1 s) passes while its member runs, decided by the sweeper.

    The process function hands the join to the join queue, whose pump registers it (nothing
    else is pumped); the sweeper's minute schedule then decides it at its deadline.
    """
    stack, recorder = deployment.stack, deployment.recorder
    slow = simulated("dl")
    slow["process"][0]["tasks"]["simulate"]["seconds"] = 600
    body = {"join": {"task_token": "deadline-join", "deadline": 1}, "payloads": [slow]}
    process_handler = recorder.handler(stack, "ProcessFunction")
    assert process_handler(sqs_event(body, ids=["deadline"])) == {"batchItemFailures": []}
    joins_pump = next(pump for pump in deployment.pumps if pump.name == "joins")
    sweeper_handler = recorder.handler(stack, "SweeperFunction")

    def decided() -> bool:
        joins_pump.pump_once()
        return bool(sweeper_handler({"deadlines": True})["deadlines_decided"])

    return bool(wait_until(decided, timeout=30))


def cancel_a_join(deployment: Deployment) -> bool:
    """A wait-for-join parent with on_parent_gone cancel, aborted while its member runs.

    Update-state reads the parent's link and sends the join_cancel; the process function
    fans it out and stops the member.
    """
    stack, recorder = deployment.stack, deployment.recorder
    slow = simulated("cx")
    slow["process"][0]["tasks"]["simulate"]["seconds"] = 600
    parent = deployment.sfn.start_execution(
        stateMachineArn=stack.physical("WaitForJoinStateMachine").ref,
        name="parent-cancel",
        input=json.dumps({"dependencies": [slow], "on_parent_gone": "cancel"}),
    )["executionArn"]
    states = StateTable(deployment.dynamodb, stack.physical("StateTable").ref)
    member = ProcessPayload.model_validate(slow).id

    def state_is(wanted: PayloadState) -> bool:
        deployment.pump()
        found = states.get(member)
        return found is not None and found.state is wanted

    wait_until(lambda: state_is(PayloadState.PROCESSING), timeout=30)
    # moto's interpreter outlives StopExecution here (the strict layer is not on): the
    # parent's end reaches update-state as EventBridge would send it
    described = deployment.sfn.describe_execution(executionArn=parent)
    described.update(status="ABORTED", stopDate=described["startDate"])
    event = status_change_event(described, region=REGION, account=ACCOUNT)
    recorder.handler(stack, "UpdateStateFunction")(event)
    table = stack.physical("DependencyTable").ref

    def stopped() -> bool:
        deployment.pump()
        rows = deployment.dynamodb.query(
            TableName=table,
            KeyConditionExpression="payload_id = :p",
            ExpressionAttributeValues={":p": {"S": member}},
        )["Items"]
        return any(row.get("error", {}).get("S") == "JoinParentGone" for row in rows)

    return bool(wait_until(stopped, timeout=30))


def test_every_aws_call_is_allowed_and_every_grant_is_used(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack, recorder = deployment.stack, deployment.recorder
    # Joins of more than two members register in chunks: the wide join below carries on
    # through join_chunk messages and a member list written to the bucket.
    monkeypatch.setenv(settings.ENV_JOIN_CHUNK_SIZE, "2")
    reset_handlers(keep_clients=True)
    # GIVEN two parents on the stack's own state machines: a Map over a succeeding and
    # a failing dependency, and a 1-of-2 join sharing the succeeding one
    parent_map = deployment.sfn.start_execution(
        stateMachineArn=stack.physical("WaitForDependenciesStateMachine").ref,
        name="parent-map",
        input=json.dumps({"dependencies": [simulated("a"), simulated("b", "fail")]}),
    )["executionArn"]
    parent_join = deployment.sfn.start_execution(
        stateMachineArn=stack.physical("WaitForJoinStateMachine").ref,
        name="parent-join",
        input=json.dumps({"dependencies": [simulated("a"), simulated("c")], "quorum": 1}),
    )["executionArn"]
    # WHEN the pumps feed the three handlers until everything rests
    deployment.settle()
    # THEN the parents resumed as the tracker told them
    described = deployment.sfn.describe_execution(executionArn=parent_map)
    assert (described["status"], described.get("error")) == ("FAILED", "DependencyFailed")
    assert deployment.sfn.describe_execution(executionArn=parent_join)["status"] == "SUCCEEDED"

    # AND the paths the parents did not take: an S3 pointer, a join by a manifest in a
    # versioned bucket (its later chunks read the version the first read), a late waiter on
    # a finished payload (replay), an invalid message with a token, a join delivered twice, a
    # result too large to keep inline (it goes to the bucket), a two-step chain, a
    # payload too large for an execution input (it goes by reference), a chain whose next
    # step is too large for the queue (by reference too), a join whose summary is too
    # large for its callback output (by reference: long member ids), and two payloads
    # waiting on each other (the second wait is refused with DependencyCycle)
    process_handler = recorder.handler(stack, "ProcessFunction")
    bucket = stack.physical("PayloadBucket").ref
    deployment.s3.put_object(Bucket=bucket, Key="p/d.json", Body=json.dumps(simulated("d")))
    put_versioned_manifest(deployment, [simulated(f"m-{i}") for i in range(3)])
    for body, message_id in untaken_paths(bucket, parent_map, parent_join):
        assert process_handler(sqs_event(body, ids=[message_id])) == {"batchItemFailures": []}
    # AND a repeated status change whose input EventBridge left out
    done = StateTable(deployment.dynamodb, stack.physical("StateTable").ref).get(
        ProcessPayload.model_validate(simulated("a")).id
    )
    assert done is not None
    assert done.state is PayloadState.SUCCEEDED
    assert done.execution_arn is not None
    event = status_change_event(
        deployment.sfn.describe_execution(executionArn=done.execution_arn),
        region=REGION,
        account=ACCOUNT,
    )
    event["detail"].update(input=None, inputDetails={"included": False})
    assert recorder.handler(stack, "UpdateStateFunction")(event) == {"action": "repeated"}
    deployment.settle()
    # AND a lease that ran out on a claim whose run's status change was lost: "big" (a result
    # too large to keep inline) looks claimed long ago and not started, so the next message
    # asks whether its workflow is Express, finds its run ended and records it
    big = simulated("big")
    big["features"][0]["properties"] = {"blob": "x" * 5000}
    deployment.dynamodb.update_item(
        TableName=stack.physical("StateTable").ref,
        Key={"payload_id": {"S": ProcessPayload.model_validate(big).id}},
        UpdateExpression="SET #state = :claimed, claimed_at = :old REMOVE execution_arn",
        ExpressionAttributeNames={"#state": "state"},
        ExpressionAttributeValues={
            ":claimed": {"S": "CLAIMED"},
            ":old": {"S": "2000-01-01T00:00:00+00:00"},
        },
    )
    assert process_handler(sqs_event(big, ids=["takeover"])) == {"batchItemFailures": []}
    deployment.settle()
    # AND a lease that finds a two-step payload's run ended, whose status change was lost:
    # it records the end and publishes the next step (too large for the queue: by reference)
    assert take_over_a_lost_chain(deployment, "lost-chain") == {"batchItemFailures": []}
    deployment.settle()
    # AND a sweep, continuing an earlier pass of the state table, over callbacks the stream
    # left un-notified long ago
    swept = sweep_lost_callbacks(deployment, done.payload_id)
    assert (swept["found"], swept["parents_gone"] + swept["sent"]) == (4, 4), swept
    # AND a join whose deadline passes while its member still runs, and a join that
    # cancels with its parent, whose parent is aborted while a member runs
    assert all((decide_a_deadline(deployment), cancel_a_join(deployment)))

    # THEN every call was allowed by that function's statements, on that resource
    parents = deployment.parents_by_token()
    # an invalid message keeps no parent; this token came from a wait-for-dependencies
    # (and the deadline's and the cancelled join's tokens are this test's own, answered late)
    parents.update(
        {
            "bad": stack.physical("WaitForDependenciesStateMachine").ref,
            "deadline-join": stack.physical("WaitForJoinStateMachine").ref,
        }
    )
    calls = with_token_owners(recorder.calls, parents)
    assert {call.function for call in calls} == set(FUNCTIONS)
    assert denied_calls(stack, calls) == []
    # AND the IAM model, on (DEPTRACK_IAM=0 turns it off), refused nothing as they were made
    assert recorder.enforcing
    assert recorder.iam.denials == []
    # AND every grant was needed: each (action, resource) of each statement was called
    # (the Lambda-service statements serve the event source mapping, log delivery, failure
    # destinations and X-Ray, not the code: test_lambda_service_statements_grant_exactly_
    # what_lambda_needs holds each of them to its resource instead)
    for function in FUNCTIONS:
        sids = {statement.sid for statement in stack.statements(function)}
        assert sids >= LAMBDA_SERVICE_STATEMENTS[function], function
    unused = [
        (function, statement.sid, action, pattern)
        for function in FUNCTIONS
        for statement in stack.statements(function)
        if statement.sid not in LAMBDA_SERVICE_STATEMENTS[function]
        for action in statement.actions
        for pattern in statement.resources
        if not any(
            call.function == function
            and call.action == action
            and fnmatch.fnmatchcase(call.resource, pattern)
            for call in calls
        )
    ]
    assert [u for u in unused if u[:2] not in AWAITING_CODE | ON_FAILURE_ONLY] == [], unused
    # a grant waits for its code only until the code uses it
    assert {u[:2] for u in unused} >= AWAITING_CODE
    assert clients.client.cache_info().currsize == len(RECORDED_SERVICES), "unwatched client"
    # AND the template's stream filter let through only terminal rows not yet notified
    assert recorder.images
    # the stream the schema creates (NEW_IMAGE, as deployed) carries no old image
    assert "NewImage" in recorder.record_fields
    assert "OldImage" not in recorder.record_fields
    assert all("notified_at" not in image for image in recorder.images)
    assert all(image["workflow_state"]["S"] != "PROCESSING" for image in recorder.images)


def test_a_lease_takeover_of_a_chain_publishes_its_next_step(deployment: Deployment) -> None:
    # GIVEN a two-step payload whose first run ended while its status change was lost
    # WHEN its message comes back after the lease and the process function takes it over
    answer = take_over_a_lost_chain(deployment, "takeover-chain")
    # THEN the first step is recorded and the next one is on the process queue (by reference)
    assert answer == {"batchItemFailures": []}
    assert deployment.recorder.enforcing
    assert deployment.recorder.iam.denials == []
    queue = deployment.stack.physical("ProcessQueue").ref
    bodies = [
        json.loads(message["Body"])
        for message in deployment.sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10).get(
            "Messages", []
        )
    ]
    (pointer,) = [body for body in bodies if set(body) == {"url"}]
    assert "/chained/" in pointer["url"]
