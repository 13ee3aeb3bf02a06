"""``rerun``: a failed payload goes back to the process queue, with ``replace``, from its input."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest
from typer.testing import CliRunner

from dependency_tracker.core.enums import PayloadState, utcnow
from dependency_tracker.core.limits import SQS_DEFAULT_MAX_MESSAGE_BYTES
from dependency_tracker.intake.parse import read_message
from dependency_tracker.joins.store import JoinStore
from dependency_tracker.payloads.bucket import PayloadBucket
from dependency_tracker.payloads.model import ProcessPayload
from dependency_tracker.table.items import (
    InvalidMessageItem,
)
from dependency_tracker.table.prefixes import INVALID_MESSAGE_PREFIX
from dependency_tracker.waits.messages import ProcessMessage
from dependency_tracker_cli.__main__ import app
from tests.conftest import ACCOUNT, PREFIX, REGION, payload, payload_id
from tests.unit.cli.rows import register_join

if TYPE_CHECKING:
    from pathlib import Path

    from tests.conftest import Aws

FAIL = {"StartAt": "Fail", "States": {"Fail": {"Type": "Fail", "Error": "Boom"}}}
BUCKET = "deptrack-payloads"
# The stack's payload bucket, as the template names it (no stack outputs here).
STACK_BUCKET = f"{PREFIX}-payloads-{ACCOUNT}-{REGION}"


def ran(aws: Aws, body: dict[str, Any], state: PayloadState, *, pointer: bool = False) -> str:
    """``body`` started as the tracker starts it (its canonical input) and ended in ``state``."""
    model = ProcessPayload.model_validate(body)
    arn = aws.create_workflow(model.workflow, FAIL)
    text = model.execution_input()
    if pointer:  # a large payload: the input is a pointer into the payload bucket
        aws.s3.create_bucket(Bucket=BUCKET)
        aws.s3.put_object(Bucket=BUCKET, Key=f"payloads/{model.id}.json", Body=text.encode())
        text = json.dumps({"url": f"s3://{BUCKET}/payloads/{model.id}.json"})
    execution = aws.sfn.start_execution(stateMachineArn=arn, name="run-1", input=text)
    aws.finished_payload(body, state, execution_arn=execution["executionArn"], error="Boom")
    return model.id


def queued(aws: Aws) -> list[dict[str, Any]]:
    """Bodies waiting on the process queue."""
    messages = aws.sqs.receive_message(QueueUrl=aws.queue_url, MaxNumberOfMessages=10).get(
        "Messages", []
    )
    return [json.loads(message["Body"]) for message in messages]


def invoke(*args: str) -> Any:
    return CliRunner().invoke(app, ["rerun", *args])


@pytest.mark.parametrize("pointer", [False, True], ids=["inline", "s3-pointer"])
def test_a_failed_payload_is_sent_again_from_its_last_input_with_replace(
    aws: Aws, *, pointer: bool
) -> None:
    # GIVEN a payload whose run failed (its input inline, or in the payload bucket)
    body = payload("a", workflow="cog", extra_field={"keep": 1})
    pid = ran(aws, body, PayloadState.FAILED, pointer=pointer)
    # WHEN it is rerun
    result = invoke(pid, "--json")
    # THEN the process queue gets the same document with process[0].replace = true
    assert result.exit_code == 0, result.output
    (sent,) = queued(aws)
    assert sent["process"][0]["replace"] is True
    # AND it says what it replaces: the state and attempt read
    assert sent["process"][0]["replace_if"] == {"state": "FAILED", "attempt": 1}
    assert sent["extra_field"] == {"keep": 1}
    assert ProcessPayload.model_validate(sent).id == pid
    shown = json.loads(result.stdout)
    assert shown["sent"] == 1
    assert shown["payloads"][0]["document_from"] == (
        f"s3://{BUCKET}/payloads/{pid}.json" if pointer else "execution input"
    )


def test_a_dry_run_prints_the_message_and_sends_nothing(aws: Aws) -> None:
    # GIVEN an aborted payload
    pid = ran(aws, payload("a", workflow="cog"), PayloadState.ABORTED)
    # WHEN its rerun is only tried
    result = invoke(pid, "--dry-run", "--json")
    # THEN the message is shown, with replace, and the queue stays empty
    assert result.exit_code == 0, result.output
    shown = json.loads(result.stdout)
    assert shown["payloads"][0]["message"]["process"][0]["replace"] is True
    assert shown["sent"] == 0
    assert queued(aws) == []
    human = invoke(pid, "--dry-run")
    assert '"replace":true' in human.stdout
    assert "would send 1 payload(s)" in human.stdout


def test_a_payload_in_another_state_is_refused_and_nothing_is_sent(aws: Aws) -> None:
    # GIVEN a failed payload and a succeeded one
    failed = ran(aws, payload("a", workflow="cog"), PayloadState.FAILED)
    aws.finished_payload(payload("b", workflow="cog"), PayloadState.SUCCEEDED)
    done = payload_id("b", workflow="cog")
    # WHEN both are rerun
    result = invoke(failed, done)
    # THEN the command exits 3 naming the succeeded one, and sends nothing
    assert result.exit_code == 3
    assert f"{done}: SUCCEEDED" in result.stderr
    assert queued(aws) == []
    # AND with --skip-others the failed one goes, the other is noted
    skipped = invoke(failed, done, "--skip-others", "--json")
    assert skipped.exit_code == 0, skipped.output
    assert "skipped" in skipped.stderr
    assert [ProcessPayload.model_validate(body).id for body in queued(aws)] == [failed]


def test_an_unknown_payload_is_refused(aws: Aws) -> None:
    result = invoke("no/workflow-x/such")
    assert result.exit_code == 3
    assert "no/workflow-x/such: not found" in result.stderr


def test_without_an_execution_input_the_document_must_come_from_a_file(
    aws: Aws, tmp_path: Path
) -> None:
    # GIVEN a failed payload whose execution is gone (history expired)
    body = payload("a", workflow="cog")
    aws.finished_payload(
        body,
        PayloadState.FAILED,
        execution_arn="arn:aws:states:us-east-1:123456789012:execution:deptrack-cog:gone",
    )
    pid = payload_id("a", workflow="cog")
    # WHEN it is rerun without a document
    result = invoke(pid)
    # THEN the command says why, points at --from, and sends nothing
    assert result.exit_code == 1
    assert "--from" in result.stderr
    assert queued(aws) == []
    # AND with its (fixed) document in a file it goes
    fixed = tmp_path / "fixed.json"
    fixed.write_text(json.dumps(body | {"note": "fixed"}), encoding="utf-8")
    sent = invoke("--from", str(fixed))
    assert sent.exit_code == 0, sent.output
    (message,) = queued(aws)
    assert (message["note"], message["process"][0]["replace"]) == ("fixed", True)


def test_state_selects_the_payloads_list_would_show(aws: Aws) -> None:
    # GIVEN two failed payloads of two workflows and a succeeded one
    cog = ran(aws, payload("a", workflow="cog"), PayloadState.FAILED)
    ran(aws, payload("b", workflow="ndvi"), PayloadState.FAILED)
    aws.finished_payload(payload("c", workflow="cog"), PayloadState.SUCCEEDED)
    # WHEN the failed cog payloads are rerun
    result = invoke("--state", "FAILED", "--workflow", "cog", "--json")
    # THEN only that one is sent
    assert result.exit_code == 0, result.output
    assert [ProcessPayload.model_validate(body).id for body in queued(aws)] == [cog]


def test_filters_without_state_or_ids_are_a_usage_error(aws: Aws) -> None:
    assert invoke("--workflow", "cog").exit_code == 2
    assert invoke().exit_code == 2


def big_failure(aws: Aws) -> str:
    """A failed payload whose document is over one SQS message (its input an S3 pointer)."""
    return ran(
        aws, payload("big", workflow="cog", blob="x" * 300_000), PayloadState.FAILED, pointer=True
    )


def test_a_payload_over_one_message_is_sent_by_reference_with_replace(aws: Aws) -> None:
    # GIVEN a failed payload of 300 kB, and the stack's payload bucket
    pid = big_failure(aws)
    aws.s3.create_bucket(Bucket=STACK_BUCKET)
    # WHEN it is rerun
    result = invoke(pid, "--json")
    # THEN the queue gets {"url"} naming the message in the payload bucket
    assert result.exit_code == 0, result.output
    (sent,) = queued(aws)
    assert list(sent) == ["url"]
    assert sent["url"].startswith(f"s3://{STACK_BUCKET}/reruns/")
    assert json.loads(result.stdout)["payloads"][0]["url"] == sent["url"]
    # AND the tracker reads it as the payload, with replace and what it replaces
    message = read_message(json.dumps(sent), load_url=PayloadBucket(aws.s3).read_url)
    assert isinstance(message, ProcessMessage)
    assert message.payload.id == pid
    assert message.payload.replace is True
    assert message.payload.replace_if is not None
    assert (message.payload.replace_if.state, message.payload.replace_if.attempt) == (
        PayloadState.FAILED,
        1,
    )
    # AND a retried rerun writes the same object and sends the same url
    assert invoke(pid).exit_code == 0
    (again,) = queued(aws)
    assert again == sent
    listed = aws.s3.list_objects_v2(Bucket=STACK_BUCKET, Prefix="reruns/")["Contents"]
    assert len(listed) == 1


def test_a_dry_run_of_a_large_payload_says_it_would_send_it_by_reference(aws: Aws) -> None:
    # GIVEN a failed payload over one SQS message
    pid = big_failure(aws)
    aws.s3.create_bucket(Bucket=STACK_BUCKET)
    # WHEN its rerun is only tried
    result = invoke(pid, "--dry-run", "--json")
    # THEN it names where the message would be written, and writes and sends nothing
    assert result.exit_code == 0, result.output
    (shown,) = json.loads(result.stdout)["payloads"]
    assert shown["url"].startswith(f"s3://{STACK_BUCKET}/reruns/")
    assert len(json.dumps(shown["message"])) > SQS_DEFAULT_MAX_MESSAGE_BYTES
    assert aws.s3.list_objects_v2(Bucket=STACK_BUCKET).get("KeyCount") == 0
    assert queued(aws) == []
    human = invoke(pid, "--dry-run")
    assert human.exit_code == 0, human.output
    assert json.dumps({"url": shown["url"]}) in human.stdout


def refused_message_record(aws: Aws, message_id: str) -> str:
    """The tracker's record of a refused message, as the process flow writes it."""
    now = utcnow()
    record_id = f"{INVALID_MESSAGE_PREFIX}{message_id}"
    aws.states.record_invalid(
        InvalidMessageItem(
            payload_id=record_id,
            created_at=now,
            updated_at=now,
            finished_at=now,
            last_error="not a payload",
            message_id=message_id,
            body_excerpt="{}",
            expiration_time=int(now.timestamp()) + 3600,
        )
    )
    return record_id


def test_state_invalid_never_selects_the_trackers_records_of_refused_messages(aws: Aws) -> None:
    # GIVEN an invalid payload and two of the tracker's records of refused messages
    pid = ran(aws, payload("a", workflow="cog"), PayloadState.INVALID)
    records = [refused_message_record(aws, f"m-{index}") for index in range(2)]
    # WHEN the invalid payloads are rerun (one at a time)
    result = invoke("--state", "INVALID", "--limit", "1", "--json")
    # THEN only the payload is selected and sent; the records are not mentioned
    assert result.exit_code == 0, result.output
    assert [ProcessPayload.model_validate(body).id for body in queued(aws)] == [pid]
    shown = json.loads(result.stdout)
    assert [one["payload_id"] for one in shown["payloads"]] == [pid]
    assert not any(record in result.output for record in records)


def test_join_selects_its_members_whose_latest_outcome_failed(aws: Aws) -> None:
    # GIVEN a join of 3: A failed, B succeeded, C still running
    succeeded = payload("jb", workflow="cog")
    aws.finished_payload(succeeded, PayloadState.SUCCEEDED)
    ids = [
        ran(aws, payload("ja", workflow="cog"), PayloadState.FAILED),
        payload_id("jb", workflow="cog"),
        payload_id("jc", workflow="cog"),
    ]
    outcomes = {ids[0]: PayloadState.FAILED, ids[1]: PayloadState.SUCCEEDED}
    register_join(aws, "jr", ids, quorum=2, outcomes=outcomes)
    store = JoinStore(aws.dynamodb, aws.dependencies.table_name)
    # WHEN the join's failed members are rerun
    result = invoke("--join", "jr", "--json")
    # THEN only A is sent, with what it replaces
    assert result.exit_code == 0, result.output
    (sent,) = queued(aws)
    assert ProcessPayload.model_validate(sent).id == ids[0]
    assert sent["process"][0]["replace_if"] == {"state": "FAILED", "attempt": 1}
    # AND once the join is decided, a rerun is still sent, with a note that it no longer counts
    assert store.decide_join("jr", PayloadState.SUCCEEDED)
    again = invoke("--join", "jr", "--dry-run")
    assert again.exit_code == 0, again.output
    assert "no longer change its outcome" in again.stderr
    # AND an unknown join is an error naming it, exit 5
    unknown = invoke("--join", "nope")
    assert (unknown.exit_code, "no join nope" in unknown.stderr) == (5, True)
