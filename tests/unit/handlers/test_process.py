"""process handler: real SQS events in, executions and table rows out."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest
from botocore.exceptions import ClientError

from dependency_tracker import app
from dependency_tracker.core import limits, naming
from dependency_tracker.core.enums import PayloadState
from dependency_tracker.handlers.process import lambda_handler
from dependency_tracker.handlers.update_state import lambda_handler as update_state_handler
from dependency_tracker.payloads import runs as runs_module
from dependency_tracker.payloads.model import ProcessPayload
from dependency_tracker.table.items import waiter_id_for
from dependency_tracker_local.events import status_change_event
from tests.conftest import (
    ACCOUNT,
    REGION,
    ROLE_ARN,
    WORKFLOW_ARN_PREFIX,
    Aws,
    age_claim,
    fresh_app,
    load_event,
    payload,
    payload_id,
)
from tests.unit.handlers.conftest import sqs_event

if TYPE_CHECKING:
    from dependency_tracker_local.context import LocalContext


def executions(aws: Aws, workflow: str = "pass") -> list[dict[str, Any]]:
    listed: list[dict[str, Any]] = aws.sfn.list_executions(
        stateMachineArn=f"{WORKFLOW_ARN_PREFIX}{workflow}"
    )["executions"]
    return listed


def failures(response: dict[str, Any]) -> list[str]:
    return [item["itemIdentifier"] for item in response["batchItemFailures"]]


@pytest.mark.usefixtures("workflows")
def test_new_payload_starts_one_named_execution(aws: Aws, lambda_context: LocalContext) -> None:
    # GIVEN the real SQS event shape with a bare payload
    event = load_event("sqs_process.json")
    # WHEN the handler runs
    response = lambda_handler(event, lambda_context)
    # THEN one execution runs under the deterministic name and the state is recorded
    assert failures(response) == []
    started = executions(aws)
    assert [e["name"] for e in started] == [naming.execution_name(payload_id(), 1)]
    item = aws.states.get(payload_id())
    assert item is not None
    assert item.state is PayloadState.PROCESSING
    assert item.attempt == 1
    assert item.execution_arn == started[0]["executionArn"]
    assert item.claim_message_id == event["Records"][0]["messageId"]
    # the child receives the payload with its id and without any callback
    described = aws.sfn.describe_execution(executionArn=item.execution_arn)
    child_input = json.loads(described["input"])
    assert child_input["id"] == payload_id()
    assert "callback" not in child_input


@pytest.mark.usefixtures("workflows")
def test_callback_registers_a_waiter(aws: Aws, lambda_context: LocalContext) -> None:
    body = payload(callback={"task_token": "tok-1", "parent_execution": "arn:parent"})
    assert failures(lambda_handler(sqs_event(body), lambda_context)) == []
    waiter = aws.dependencies.get(payload_id(), waiter_id_for("tok-1"))
    assert waiter is not None
    assert waiter.workflow_state is PayloadState.PROCESSING
    assert waiter.task_token == "tok-1"
    assert waiter.parent_execution == "arn:parent"


@pytest.mark.usefixtures("workflows")
def test_sns_wrapped_message(aws: Aws, lambda_context: LocalContext) -> None:
    response = lambda_handler(load_event("sqs_sns_wrapped.json"), lambda_context)
    assert failures(response) == []
    assert aws.states.get(payload_id("item-sns")) is not None


@pytest.mark.usefixtures("workflows")
def test_s3_url_message(aws: Aws, lambda_context: LocalContext) -> None:
    aws.s3.create_bucket(Bucket="deptrack-payloads")
    aws.s3.put_object(
        Bucket="deptrack-payloads",
        Key="payloads/item-s3.json",
        Body=json.dumps(payload("item-s3")).encode(),
    )
    response = lambda_handler(load_event("sqs_s3_url.json"), lambda_context)
    assert failures(response) == []
    item = aws.states.get(payload_id("item-s3"))
    assert item is not None
    assert item.state is PayloadState.PROCESSING


@pytest.mark.usefixtures("workflows")
def test_missing_s3_object_fails_only_that_record(aws: Aws, lambda_context: LocalContext) -> None:
    # The bucket is there, the object not yet (a missing bucket is refused at once).
    aws.s3.create_bucket(Bucket="deptrack-payloads")
    event = load_event("sqs_s3_url.json")
    event["Records"].extend(sqs_event(payload("item-ok"), ids=["ok"])["Records"])
    response = lambda_handler(event, lambda_context)
    assert failures(response) == [event["Records"][0]["messageId"]]
    assert aws.states.get(payload_id("item-ok")) is not None


@pytest.mark.usefixtures("workflows")
def test_finished_payload_is_replayed_without_a_new_execution(
    aws: Aws, lambda_context: LocalContext
) -> None:
    # GIVEN a payload that already SUCCEEDED
    model = ProcessPayload.model_validate(payload())
    aws.finished_payload(payload(), PayloadState.SUCCEEDED, execution_arn="arn:done")
    # WHEN a new waiter arrives
    body = payload(callback={"task_token": "late"})
    assert failures(lambda_handler(sqs_event(body), lambda_context)) == []
    # THEN it is resolved at once from the stored state, and nothing runs
    waiter = aws.dependencies.get(model.id, waiter_id_for("late"))
    assert waiter is not None
    assert waiter.workflow_state is PayloadState.SUCCEEDED
    assert waiter.replayed is True
    assert waiter.execution_arn == "arn:done"
    assert executions(aws) == []


@pytest.mark.usefixtures("workflows")
def test_invalid_payload_is_replayed_as_invalid(aws: Aws, lambda_context: LocalContext) -> None:
    model = ProcessPayload.model_validate(payload())
    aws.finished_payload(
        payload(), PayloadState.INVALID, execution_arn="arn:bad", error="InvalidInput", cause="no"
    )
    lambda_handler(sqs_event(payload(callback={"task_token": "t"})), lambda_context)
    waiter = aws.dependencies.get(model.id, waiter_id_for("t"))
    assert waiter is not None
    assert (waiter.workflow_state, waiter.error) == (PayloadState.INVALID, "InvalidInput")
    assert executions(aws) == []


@pytest.mark.usefixtures("workflows")
def test_running_payload_only_gets_a_waiter(aws: Aws, lambda_context: LocalContext) -> None:
    lambda_handler(sqs_event(payload()), lambda_context)
    lambda_handler(sqs_event(payload(callback={"task_token": "t2"}), ids=["m2"]), lambda_context)
    assert len(executions(aws)) == 1
    waiter = aws.dependencies.get(payload_id(), waiter_id_for("t2"))
    assert waiter is not None
    assert waiter.workflow_state is PayloadState.PROCESSING


@pytest.mark.usefixtures("workflows")
@pytest.mark.parametrize("previous", [PayloadState.FAILED, PayloadState.ABORTED])
def test_failed_or_aborted_payload_runs_again(
    aws: Aws, lambda_context: LocalContext, previous: PayloadState
) -> None:
    model = ProcessPayload.model_validate(payload())
    aws.finished_payload(payload(), previous, execution_arn="arn:1")
    lambda_handler(sqs_event(payload()), lambda_context)
    item = aws.states.get(model.id)
    assert item is not None
    assert (item.state, item.attempt) == (PayloadState.PROCESSING, 2)
    assert [e["name"] for e in executions(aws)] == [naming.execution_name(model.id, 2)]


@pytest.mark.usefixtures("workflows")
def test_redelivered_message_does_not_rerun_the_failure_it_caused(
    aws: Aws, lambda_context: LocalContext
) -> None:
    # GIVEN a message whose attempt failed
    event = sqs_event(payload(workflow="fail", callback={"task_token": "t"}), ids=["m1"])
    lambda_handler(event, lambda_context)
    item = aws.states.get(payload_id(workflow="fail"))
    assert item is not None
    aws.states.set_final(
        payload_id=item.payload_id,
        workflow="fail",
        state=PayloadState.FAILED,
        execution_arn=item.execution_arn or "",
        attempt=1,
        error="TaskFailed",
    )
    # WHEN SQS delivers the same message again
    lambda_handler(event, lambda_context)
    # THEN nothing runs again (a new message would re-run it)
    again = aws.states.get(item.payload_id)
    assert again is not None
    assert (again.state, again.attempt) == (PayloadState.FAILED, 1)
    lambda_handler(sqs_event(payload(workflow="fail"), ids=["m2"]), lambda_context)
    rerun = aws.states.get(item.payload_id)
    assert rerun is not None
    assert rerun.attempt == 2


@pytest.mark.usefixtures("workflows")
def test_replace_reruns_a_finished_payload_once(aws: Aws, lambda_context: LocalContext) -> None:
    first = aws.finished_payload(payload(), PayloadState.SUCCEEDED, execution_arn="arn:1")
    model = ProcessPayload.model_validate(payload())
    replace = payload()
    replace["process"][0]["replace"] = True
    event = sqs_event(replace, ids=["replace-1"])
    lambda_handler(event, lambda_context)
    item = aws.states.get(model.id)
    assert item is not None
    assert item.attempt == first.attempt + 1
    # GIVEN the second run finished WHEN the same message is redelivered THEN nothing runs again
    aws.states.set_final(
        payload_id=model.id,
        workflow="pass",
        state=PayloadState.SUCCEEDED,
        execution_arn=item.execution_arn or "",
        attempt=2,
    )
    lambda_handler(event, lambda_context)
    again = aws.states.get(model.id)
    assert again is not None
    assert again.attempt == 2
    assert len(executions(aws)) == 1


def rerun_of(seen: PayloadState, attempt: int, **extra: Any) -> dict[str, Any]:
    """What ``dependency-tracker rerun`` sends for a payload it saw ``seen`` at ``attempt``."""
    body = payload(**extra)
    body["process"][0] |= {"replace": True, "replace_if": {"state": seen, "attempt": attempt}}
    return body


@pytest.mark.usefixtures("workflows")
def test_a_second_rerun_of_the_same_failure_replays_the_success_the_first_one_ran(
    aws: Aws, lambda_context: LocalContext
) -> None:
    # GIVEN a failed payload, rerun once (attempt 2), and that attempt succeeded
    model = ProcessPayload.model_validate(payload())
    aws.finished_payload(payload(), PayloadState.FAILED, execution_arn="arn:1", error="Boom")
    lambda_handler(sqs_event(rerun_of(PayloadState.FAILED, 1), ids=["op-1"]), lambda_context)
    second = aws.states.get(model.id)
    assert second is not None
    assert (second.state, second.attempt) == (PayloadState.PROCESSING, 2)
    succeeded = aws.states.set_final(
        payload_id=model.id,
        workflow="pass",
        state=PayloadState.SUCCEEDED,
        execution_arn=second.execution_arn or "",
        attempt=2,
    )
    # WHEN a second operator's rerun of the same failure arrives, with a waiter
    body = rerun_of(PayloadState.FAILED, 1, callback={"task_token": "late"})
    assert failures(lambda_handler(sqs_event(body, ids=["op-2"]), lambda_context)) == []
    # THEN nothing runs again: the stored success stays, and the waiter hears it replayed
    after = aws.states.get(model.id)
    assert after == succeeded
    assert [e["name"] for e in executions(aws)] == [naming.execution_name(model.id, 2)]
    waiter = aws.dependencies.get(model.id, waiter_id_for("late"))
    assert waiter is not None
    assert (waiter.workflow_state, waiter.replayed) == (PayloadState.SUCCEEDED, True)


@pytest.mark.usefixtures("workflows")
def test_a_rerun_whose_expected_attempt_is_running_waits_on_it(
    aws: Aws, lambda_context: LocalContext
) -> None:
    # GIVEN a failed payload whose first rerun is running (attempt 2)
    model = ProcessPayload.model_validate(payload())
    aws.finished_payload(payload(), PayloadState.FAILED, execution_arn="arn:1")
    lambda_handler(sqs_event(rerun_of(PayloadState.FAILED, 1), ids=["op-1"]), lambda_context)
    # WHEN the same rerun is sent again (a retried send), with a waiter
    body = rerun_of(PayloadState.FAILED, 1, callback={"task_token": "t2"})
    lambda_handler(sqs_event(body, ids=["op-1-again"]), lambda_context)
    # THEN it waits on the running attempt; nothing else starts
    item = aws.states.get(model.id)
    assert item is not None
    assert (item.state, item.attempt) == (PayloadState.PROCESSING, 2)
    assert len(executions(aws)) == 1
    waiter = aws.dependencies.get(model.id, waiter_id_for("t2"))
    assert waiter is not None
    assert waiter.workflow_state is PayloadState.PROCESSING


@pytest.mark.usefixtures("workflows")
def test_two_reruns_that_read_the_same_failure_at_once_start_one_attempt(
    aws: Aws, lambda_context: LocalContext
) -> None:
    # GIVEN two reruns of the same failure that both read FAILED, attempt 1
    failed = aws.finished_payload(payload(), PayloadState.FAILED, execution_arn="arn:1")
    one = ProcessPayload.model_validate(rerun_of(PayloadState.FAILED, 1))
    other = ProcessPayload.model_validate(rerun_of(PayloadState.FAILED, 1))
    runner = app.current().runner
    # WHEN the first claims and starts attempt 2, then the second acts on what it read
    assert runner.settle(one, None, message_id="op-1", seen=failed) == "started"
    action = runner.settle(other, None, message_id="op-2", seen=failed)
    # THEN its conditional claim lost: it read again and waits on attempt 2
    assert action == "waiting"
    item = aws.states.get(failed.payload_id)
    assert item is not None
    assert (item.state, item.attempt) == (PayloadState.PROCESSING, 2)
    assert len(executions(aws)) == 1


@pytest.mark.usefixtures("workflows")
def test_a_rerun_that_finds_what_it_expected_runs_even_a_success(
    aws: Aws, lambda_context: LocalContext
) -> None:
    # GIVEN a succeeded payload (attempt 1)
    model = ProcessPayload.model_validate(payload())
    aws.finished_payload(payload(), PayloadState.SUCCEEDED, execution_arn="arn:1")
    # WHEN a rerun expecting a failure arrives, then one expecting that success
    lambda_handler(sqs_event(rerun_of(PayloadState.FAILED, 1), ids=["a"]), lambda_context)
    untouched = aws.states.get(model.id)
    assert untouched is not None
    assert (untouched.state, untouched.attempt) == (PayloadState.SUCCEEDED, 1)
    lambda_handler(sqs_event(rerun_of(PayloadState.SUCCEEDED, 1), ids=["b"]), lambda_context)
    # THEN only the second runs: attempt 2
    item = aws.states.get(model.id)
    assert item is not None
    assert (item.state, item.attempt) == (PayloadState.PROCESSING, 2)
    assert len(executions(aws)) == 1


@pytest.mark.usefixtures("workflows")
def test_claim_left_by_a_dead_invocation_is_completed(
    aws: Aws, lambda_context: LocalContext
) -> None:
    # GIVEN a claim whose process invocation died before StartExecution
    model = ProcessPayload.model_validate(payload())
    aws.states.claim(model, None)
    # WHEN the message is redelivered
    lambda_handler(sqs_event(payload()), lambda_context)
    # THEN the same attempt is started, once
    item = aws.states.get(model.id)
    assert item is not None
    assert (item.state, item.attempt) == (PayloadState.PROCESSING, 1)
    assert [e["name"] for e in executions(aws)] == [naming.execution_name(model.id, 1)]


@pytest.mark.usefixtures("workflows")
def test_bad_input_is_reported_and_the_rest_of_the_batch_succeeds(
    aws: Aws,
    lambda_context: LocalContext,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # GIVEN one batch with every kind of bad message and one good one
    no_id = {
        "process": [{"workflow": "pass"}],
        "callback": {"task_token": "orphan", "parent_execution": "arn:parent-of-orphan"},
    }
    event = sqs_event(
        "{not json",
        {"hello": "world"},
        no_id,
        payload("item-x", workflow="no-such-workflow"),
        payload("item-good"),
        ids=["bad-json", "not-payload", "no-id", "unknown-workflow", "good"],
    )
    # WHEN the handler runs
    response = lambda_handler(event, lambda_context)
    # THEN only the unknown workflow is retried (it may be deployed later)
    assert failures(response) == ["unknown-workflow"]
    good = aws.states.get(payload_id("item-good"))
    assert good is not None
    assert good.state is PayloadState.PROCESSING
    # the messages retrying cannot help are recorded as invalid, with the reason
    for message_id, reason in [
        ("bad-json", "not valid JSON"),
        ("not-payload", "payload.process"),
        ("no-id", "needs an 'id'"),
    ]:
        record = aws.states.get(f"invalid-message/{message_id}")
        assert record is not None, message_id
        assert record.state is PayloadState.INVALID
        assert reason in (record.last_error or "")
    # the parent of the message with a readable token is told, not left to time out
    orphan = aws.dependencies.get("invalid-message/no-id", waiter_id_for("orphan"))
    assert orphan is not None
    assert orphan.workflow_state is PayloadState.INVALID
    assert orphan.parent_execution == "arn:parent-of-orphan"
    # structured logs and metrics name the message, never the token
    invalid_logs = [r for r in caplog.records if r.getMessage() == "invalid message"]
    assert {r.__dict__["message_id"] for r in invalid_logs} == {"bad-json", "not-payload", "no-id"}
    assert any(r.getMessage() == "unknown workflow" for r in caplog.records)
    assert "orphan" not in caplog.text
    metrics = [json.loads(line) for line in capsys.readouterr().out.splitlines() if "_aws" in line]
    assert [m["InvalidMessages"] for m in metrics if "InvalidMessages" in m] == [[1.0, 1.0, 1.0]]
    assert [m["UnknownWorkflow"] for m in metrics if "UnknownWorkflow" in m] == [[1.0]]


@pytest.mark.usefixtures("workflows")
def test_unknown_workflow_keeps_the_claim_for_the_retry(
    aws: Aws, lambda_context: LocalContext
) -> None:
    body = payload("item-late", workflow="late")
    assert failures(lambda_handler(sqs_event(body, ids=["m"]), lambda_context)) == ["m"]
    # WHEN the workflow is deployed and the message comes back
    aws.create_workflow("late", {"StartAt": "P", "States": {"P": {"Type": "Pass", "End": True}}})
    assert failures(lambda_handler(sqs_event(body, ids=["m"]), lambda_context)) == []
    item = aws.states.get(payload_id("item-late", "late"))
    assert item is not None
    assert (item.state, item.attempt) == (PayloadState.PROCESSING, 1)


@pytest.mark.usefixtures("workflows")
def test_a_run_that_ended_unreported_is_recorded_after_its_lease_not_run_again(
    aws: Aws, lambda_context: LocalContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN attempt 1 ran and succeeded, but its status change has not arrived (EventBridge
    # may still be retrying it): the item still says PROCESSING
    lambda_handler(sqs_event(payload(callback={"task_token": "t"})), lambda_context)
    item = aws.states.get(payload_id())
    assert item is not None
    assert item.execution_arn is not None
    execution = aws.wait_for_execution(item.execution_arn)
    assert execution["status"] == "SUCCEEDED"
    # WHEN a message arrives within the lease THEN nothing moves
    lambda_handler(sqs_event(payload(), ids=["within"]), lambda_context)
    same = aws.states.get(payload_id())
    assert same is not None
    assert (same.state, same.attempt) == (PayloadState.PROCESSING, 1)
    # WHEN another waiter's message arrives after the lease
    monkeypatch.setenv("DEPTRACK_CLAIM_LEASE_SECONDS", "60")
    fresh_app()
    age_claim(aws, payload_id(), 120)
    after = payload(callback={"task_token": "t2"})
    assert failures(lambda_handler(sqs_event(after, ids=["after"]), lambda_context)) == []
    # THEN the run's end is recorded as update-state would have, both waiters learn it, and
    # the payload is not started again
    recovered = aws.states.get(payload_id())
    assert recovered is not None
    assert (recovered.state, recovered.attempt) == (PayloadState.SUCCEEDED, 1)
    for token in ("t", "t2"):
        waiter = aws.dependencies.get(payload_id(), waiter_id_for(token))
        assert waiter is not None
        assert waiter.workflow_state is PayloadState.SUCCEEDED
    assert [e["name"] for e in executions(aws)] == [naming.execution_name(payload_id(), 1)]
    # AND the late event, when it comes, is a harmless repeat
    late = status_change_event(execution, region=REGION, account=ACCOUNT)
    assert update_state_handler(late, lambda_context) == {"action": "repeated"}


@pytest.mark.usefixtures("workflows")
def test_a_started_run_that_cannot_be_found_is_taken_over_after_its_lease(
    aws: Aws, lambda_context: LocalContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN attempt 1 recorded as started, whose execution does not exist (its history
    # expired, or a start that never took)
    claimed = aws.states.claim(ProcessPayload.model_validate(payload()), None)
    aws.states.set_processing(payload_id(), claimed.attempt, "arn:aws:states:gone")
    monkeypatch.setenv("DEPTRACK_CLAIM_LEASE_SECONDS", "60")
    fresh_app()
    age_claim(aws, payload_id(), 120)
    # WHEN a message arrives after the lease
    assert failures(lambda_handler(sqs_event(payload()), lambda_context)) == []
    # THEN a new attempt runs (before, the item waited for the missing run for ever)
    taken = aws.states.get(payload_id())
    assert taken is not None
    assert (taken.state, taken.attempt) == (PayloadState.PROCESSING, 2)
    assert [e["name"] for e in executions(aws)] == [naming.execution_name(payload_id(), 2)]


@pytest.mark.usefixtures("workflows")
def test_an_express_run_past_its_lease_is_taken_over_without_describing_it(
    aws: Aws, lambda_context: LocalContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN attempt 1 ran as an Express run (DescribeExecution does not support those) and
    # its report never came
    express = (
        "arn:aws:states:us-east-1:123456789012:express:deptrack-pass:"
        f"{naming.execution_name(payload_id(), 1)}:0b5a6c2e-2f52-4b8a-9d43-2a1d1f0f6a11"
    )
    claimed = aws.states.claim(ProcessPayload.model_validate(payload()), None)
    aws.states.set_processing(payload_id(), claimed.attempt, express)
    monkeypatch.setenv("DEPTRACK_CLAIM_LEASE_SECONDS", "60")
    fresh_app()
    age_claim(aws, payload_id(), 120)
    described: list[str] = []
    real = aws.sfn.describe_execution
    runs = app.current().runs

    def describe(**kwargs: Any) -> Any:
        described.append(kwargs["executionArn"])
        return real(**kwargs)

    monkeypatch.setattr(runs._sfn, "describe_execution", describe)
    # WHEN a message arrives after the lease
    assert failures(lambda_handler(sqs_event(payload()), lambda_context)) == []
    # THEN attempt 2 runs under a new name, and the Express run was never described
    taken = aws.states.get(payload_id())
    assert taken is not None
    assert (taken.state, taken.attempt) == (PayloadState.PROCESSING, 2)
    assert described == []


@pytest.mark.usefixtures("workflows")
def test_running_execution_keeps_its_claim_past_the_lease(
    aws: Aws, lambda_context: LocalContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a payload whose execution is still running (it waits for a token forever)
    aws.create_workflow(
        "hang",
        {
            "StartAt": "Hang",
            "States": {
                "Hang": {
                    "Type": "Task",
                    "Resource": "arn:aws:states:::sqs:sendMessage.waitForTaskToken",
                    "Parameters": {
                        "QueueUrl": aws.queue_url,
                        "MessageBody": {"t.$": "$$.Task.Token"},
                    },
                    "End": True,
                }
            },
        },
    )
    monkeypatch.setenv("DEPTRACK_CLAIM_LEASE_SECONDS", "60")
    lambda_handler(sqs_event(payload(workflow="hang")), lambda_context)
    age_claim(aws, payload_id(workflow="hang"), 120)
    lambda_handler(sqs_event(payload(workflow="hang"), ids=["again"]), lambda_context)
    item = aws.states.get(payload_id(workflow="hang"))
    assert item is not None
    assert (item.state, item.attempt) == (PayloadState.PROCESSING, 1)


@pytest.mark.usefixtures("workflows")
def test_oversize_payload_without_a_bucket_is_refused_before_any_claim(
    aws: Aws, lambda_context: LocalContext
) -> None:
    # GIVEN no payload bucket (the unit settings have none) and a 300 KB payload with a waiter
    big = payload("huge", callback={"task_token": "big-token"})
    big["features"][0]["properties"] = {"blob": "x" * 300_000}
    # WHEN it is processed THEN nothing is claimed and the parent is told
    assert failures(lambda_handler(sqs_event(big, ids=["huge"]), lambda_context)) == []
    assert aws.states.get(payload_id("huge")) is None
    record = aws.states.get("invalid-message/huge")
    assert record is not None
    assert "execution input limit" in (record.last_error or "")
    told = aws.dependencies.get("invalid-message/huge", waiter_id_for("big-token"))
    assert told is not None
    assert told.workflow_state is PayloadState.INVALID


def express_workflow(aws: Aws) -> None:
    """``deptrack-quick``, an Express state machine (moto runs it like a Standard one)."""
    aws.sfn.create_state_machine(
        name="deptrack-quick",
        roleArn=ROLE_ARN,
        type="EXPRESS",
        definition=json.dumps(
            {"StartAt": "Done", "States": {"Done": {"Type": "Pass", "End": True}}}
        ),
    )


def count_starts(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    started: list[str] = []
    runs = app.current().runs
    real = runs._sfn.start_execution

    def start(**kwargs: Any) -> Any:
        started.append(kwargs["name"])
        return real(**kwargs)

    monkeypatch.setattr(runs._sfn, "start_execution", start)
    return started


def test_an_express_claim_is_never_started_twice(
    aws: Aws, lambda_context: LocalContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN an Express workflow's payload, claimed by an invocation that may or may not have
    # started it yet (AWS starts a second run for a second StartExecution of the same name)
    express_workflow(aws)
    aws.states.claim(ProcessPayload.model_validate(payload(workflow="quick")), None)
    started = count_starts(monkeypatch)
    # WHEN another message for it arrives within the lease
    assert failures(lambda_handler(sqs_event(payload(workflow="quick")), lambda_context)) == []
    # THEN it waits: no second StartExecution (a Standard claim is resumed instead)
    assert started == []
    item = aws.states.get(payload_id(workflow="quick"))
    assert item is not None
    assert (item.state, item.attempt) == (PayloadState.CLAIMED, 1)


def test_an_express_claim_that_never_started_is_retaken_after_minutes_not_a_day(
    aws: Aws, lambda_context: LocalContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN an Express payload claimed 11 minutes ago, never started (the claimer died), under
    # the default one-day lease
    express_workflow(aws)
    aws.states.claim(ProcessPayload.model_validate(payload(workflow="quick")), None)
    age_claim(aws, payload_id(workflow="quick"), 660)
    started = count_starts(monkeypatch)
    # WHEN a message arrives
    assert failures(lambda_handler(sqs_event(payload(workflow="quick")), lambda_context)) == []
    # THEN attempt 2 starts under its own name (an Express run lasts five minutes at most)
    assert started == [naming.execution_name(payload_id(workflow="quick"), 2)]
    item = aws.states.get(payload_id(workflow="quick"))
    assert item is not None
    assert (item.state, item.attempt) == (PayloadState.PROCESSING, 2)


@pytest.mark.usefixtures("workflows")
def test_an_express_input_past_100_kb_goes_by_pointer(
    aws: Aws, lambda_context: LocalContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a 150 kB payload for an Express workflow (its report carries the input escaped,
    # in one 256 KiB SQS message) and the same for a Standard one
    aws.s3.create_bucket(Bucket="deptrack-payloads")
    monkeypatch.setenv("DEPTRACK_PAYLOAD_BUCKET", "deptrack-payloads")
    fresh_app()
    express_workflow(aws)
    inputs: dict[str, str] = {}
    runs = app.current().runs
    real = runs._sfn.start_execution

    def start(**kwargs: Any) -> Any:
        inputs[kwargs["stateMachineArn"].rsplit("-", 1)[-1]] = kwargs["input"]
        return real(**kwargs)

    monkeypatch.setattr(runs._sfn, "start_execution", start)
    for workflow in ("quick", "pass"):
        body = payload(workflow=workflow)
        body["features"][0]["properties"] = {"blob": "x" * 150_000}
        # WHEN each is processed
        assert failures(lambda_handler(sqs_event(body), lambda_context)) == []
    # THEN the Express run gets a pointer and the Standard one the payload itself
    assert list(json.loads(inputs["quick"])) == ["url"]
    assert json.loads(inputs["pass"])["id"] == payload_id()


def test_an_express_claim_whose_start_was_refused_is_started_again_under_its_name(
    aws: Aws, lambda_context: LocalContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN an Express payload whose claimer's StartExecution was refused (AWS answered
    # with an error: nothing started; the claim stays CLAIMED and the message fails). A
    # throttle would be waited out (core/pacing.py): a server error is not.
    express_workflow(aws)
    runs = app.current().runs
    real = runs._sfn.start_execution
    started: list[str] = []

    def start(**kwargs: Any) -> Any:
        started.append(kwargs["name"])
        if len(started) == 1:
            raise ClientError({"Error": {"Code": "InternalFailure"}}, "StartExecution")
        return real(**kwargs)

    monkeypatch.setattr(runs._sfn, "start_execution", start)
    body = payload(workflow="quick", callback={"task_token": "t"})
    assert failures(lambda_handler(sqs_event(body, ids=["m-1"]), lambda_context)) == ["m-1"]
    pid = payload_id(workflow="quick")
    refused = aws.states.get(pid)
    assert refused is not None
    assert refused.state is PayloadState.CLAIMED
    assert refused.start_refused_at is not None
    # WHEN the same message comes back
    assert failures(lambda_handler(sqs_event(body, ids=["m-1"]), lambda_context)) == []
    # THEN the same attempt starts at once under its own name (its first run: the refused
    # call ran nothing), and the attempt does not climb; before issue 15's fix the
    # redelivery waited and the parent was stranded until a later message passed the lease
    assert started == [naming.execution_name(pid, 1), naming.execution_name(pid, 1)]
    item = aws.states.get(pid)
    assert item is not None
    assert (item.state, item.attempt) == (PayloadState.PROCESSING, 1)
    assert item.start_refused_at is None


def test_an_express_run_started_before_its_record_failed_gets_no_second_attempt(
    aws: Aws, lambda_context: LocalContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN an Express payload whose claimer started attempt 1 (AWS accepted the start)
    # but failed to record it: set_processing was throttled, so the item stays CLAIMED and
    # the message fails (the chaos run's seed 5: "attempt 3, 2 executions")
    express_workflow(aws)
    started = count_starts(monkeypatch)
    states = app.current().runs.states
    real = states.set_processing
    throttled: list[int] = []

    def set_processing(payload_id: str, attempt: int, execution_arn: str) -> None:
        if not throttled:
            throttled.append(attempt)
            raise ClientError(
                {"Error": {"Code": "ProvisionedThroughputExceededException"}}, "UpdateItem"
            )
        real(payload_id, attempt, execution_arn)

    monkeypatch.setattr(states, "set_processing", set_processing)
    body = payload(workflow="quick", callback={"task_token": "t"})
    pid = payload_id(workflow="quick")
    assert failures(lambda_handler(sqs_event(body, ids=["m-1"]), lambda_context)) == ["m-1"]
    assert started == [naming.execution_name(pid, 1)]
    # WHEN the same message comes back within the lease
    response = lambda_handler(sqs_event(body, ids=["m-1"]), lambda_context)
    # THEN nothing starts: attempt 1's run may be live (before, the redelivery claimed
    # attempt 2 and started it beside the first run, whose report was then dropped as stale)
    assert failures(response) == ["m-1"]
    assert started == [naming.execution_name(pid, 1)]
    item = aws.states.get(pid)
    assert item is not None
    assert (item.state, item.attempt) == (PayloadState.CLAIMED, 1)
    # WHEN attempt 1's run reports its end (an Express run cannot be described: its
    # report carries the fields), and the message comes back once more
    (run,) = executions(aws, "quick")
    text = ProcessPayload.model_validate(body).execution_input()
    report = {**run, "status": "SUCCEEDED", "input": text, "output": text}
    event = status_change_event(report, region=REGION, account=ACCOUNT)
    assert update_state_handler(event, lambda_context) == {"action": "recorded"}
    assert failures(lambda_handler(sqs_event(body, ids=["m-1"]), lambda_context)) == []
    # THEN the payload ended as attempt 1, with that run recorded, and nothing else ran
    done = aws.states.get(pid)
    assert done is not None
    assert (done.state, done.attempt) == (PayloadState.SUCCEEDED, 1)
    assert done.executions == [run["executionArn"]]
    assert started == [naming.execution_name(pid, 1)]


def test_an_express_claim_left_by_a_crash_is_retaken_by_its_own_message_after_the_lease(
    aws: Aws, lambda_context: LocalContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN an Express attempt claimed by message m-1 whose claimer died (nothing says
    # whether it started), under a 60 s lease
    monkeypatch.setenv("DEPTRACK_CLAIM_LEASE_SECONDS", "60")
    fresh_app()
    express_workflow(aws)
    quick = ProcessPayload.model_validate(payload(workflow="quick"))
    aws.states.claim(quick, None, message_id="m-1")
    started = count_starts(monkeypatch)
    body = payload(workflow="quick", callback={"task_token": "t"})
    # WHEN m-1 comes back within the lease THEN it fails again and starts nothing
    assert failures(lambda_handler(sqs_event(body, ids=["m-1"]), lambda_context)) == ["m-1"]
    assert started == []
    # WHEN it comes back after the lease THEN attempt 2 starts under its own name
    age_claim(aws, quick.id, 120)
    assert failures(lambda_handler(sqs_event(body, ids=["m-1"]), lambda_context)) == []
    assert started == [naming.execution_name(quick.id, 2)]
    item = aws.states.get(quick.id)
    assert item is not None
    assert (item.state, item.attempt) == (PayloadState.PROCESSING, 2)


def sized(workflow: str, size: int) -> ProcessPayload:
    """A payload whose execution input is exactly ``size`` bytes of UTF-8."""
    body = payload(workflow=workflow)
    body["features"][0]["properties"] = {"blob": ""}
    base = len(ProcessPayload.model_validate(body).execution_input().encode("utf-8"))
    body["features"][0]["properties"] = {"blob": "x" * (size - base)}
    model = ProcessPayload.model_validate(body)
    assert len(model.execution_input().encode("utf-8")) == size
    return model


def test_an_express_input_is_inline_up_to_100000_bytes_and_by_pointer_past_them(
    aws: Aws, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN an Express workflow and a payload bucket
    aws.s3.create_bucket(Bucket="deptrack-payloads")
    monkeypatch.setenv("DEPTRACK_PAYLOAD_BUCKET", "deptrack-payloads")
    fresh_app()
    express_workflow(aws)
    runs = app.current().runs
    limit = runs_module.MAX_EXPRESS_INLINE_INPUT_BYTES
    # THEN an input of exactly the limit goes inline, one byte more by pointer
    assert json.loads(runs.input(sized("quick", limit), 1))["id"] == payload_id(workflow="quick")
    assert list(json.loads(runs.input(sized("quick", limit + 1), 1))) == ["url"]


def test_an_express_report_of_the_largest_inline_input_fits_one_sqs_message() -> None:
    # GIVEN the largest inline Express input, made of the characters JSON escaping doubles
    # (simulate-express's report carries it as States.JsonToString($$.Execution.Input), a
    # string inside the message body, so each quote and backslash is escaped once more)
    limit = runs_module.MAX_EXPRESS_INLINE_INPUT_BYTES
    worst = json.dumps({"blob": '"\\' * ((limit - 12) // 4)})
    assert limit - 8 <= len(worst.encode("utf-8")) <= limit
    name = "x" * 80
    arn = f"arn:aws:states:us-east-1:123456789012:express:{'m' * 80}:{name}:{'0' * 36}"
    report = {
        "status_report": {
            "executionArn": arn,
            "stateMachineArn": f"arn:aws:states:us-east-1:123456789012:stateMachine:{'m' * 80}",
            "name": name,
            "status": "FAILED",
            "input": worst,
            "error": "e" * 256,
            "cause": "",
        }
    }
    # THEN the message, with the longest name and error, is within SQS's 256 KiB
    assert len(json.dumps(report).encode("utf-8")) <= limits.SQS_DEFAULT_MAX_MESSAGE_BYTES


def test_an_express_payload_past_its_inline_limit_without_a_bucket_is_refused_before_any_claim(
    aws: Aws, lambda_context: LocalContext
) -> None:
    # GIVEN no payload bucket, an Express workflow and a payload between the Express and the
    # Standard inline limits, with a waiter
    express_workflow(aws)
    big = sized("quick", runs_module.MAX_EXPRESS_INLINE_INPUT_BYTES + 1).model_dump(mode="json")
    big["callback"] = {"task_token": "express-token"}
    # WHEN it is processed THEN nothing is claimed and the parent is told
    assert failures(lambda_handler(sqs_event(big, ids=["quick-big"]), lambda_context)) == []
    assert aws.states.get(payload_id(workflow="quick")) is None
    record = aws.states.get("invalid-message/quick-big")
    assert record is not None
    assert "100000-byte execution input limit" in (record.last_error or "")
    told = aws.dependencies.get("invalid-message/quick-big", waiter_id_for("express-token"))
    assert told is not None
    assert told.workflow_state is PayloadState.INVALID
