"""What the handlers emit and keep: tokens only as hashes, metrics with fixed dimensions only.

The three Lambda handlers run on moto through the local pumps: real parents waiting with
Step Functions task tokens (a succeeding, a failing and an invalid dependency), then long
synthetic tokens on the remaining paths (a late waiter replayed from a finished payload, an
invalid message with a token, a join, and a stream image the callback cannot read, whose error
is logged). Everything they print, log and store is then searched for the tokens.
docs/security.md ("Where task tokens live", "Logs, metrics and traces") says what these
tests hold the code to.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.resources
import io
import json
import re
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

from dependency_tracker import app
from dependency_tracker.answers.actions import CallbackAction
from dependency_tracker.core import observability
from dependency_tracker.core.tokens import redact_token
from dependency_tracker.handlers import callback, process
from dependency_tracker.intake.invalid import redact_tokens
from dependency_tracker.payloads.update_state import UpdateAction
from dependency_tracker.table.items import JOIN_ROW_KEY
from dependency_tracker.waits.process import ProcessAction
from dependency_tracker_local.context import LocalContext
from tests.conftest import (
    PREFIX,
    aws_account,
    captured_logs,
    create_workflows,
    load_event,
    payload,
    payload_id,
    tracker_env,
)
from tests.harness import Pumps, create_parent, start_parent
from tests.unit.handlers.conftest import sqs_event

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.conftest import Aws

# The only dimensions a metric may carry, with the only value each may take.
ALLOWED_DIMENSIONS = {"service": observability.SERVICE}
METRIC_NAME = re.compile(r"[A-Z][A-Za-z]{2,63}")
# A sort key holds at most 1,024 bytes; the synthetic tokens are longer than that.
MAX_SORT_KEY_BYTES = 1024
LONG_TOKEN_HEX = 700
# Where a whole token may be stored: (table, attribute). The state table's entry is the
# known gap test_invalid_message_records_keep_no_token expects to fail.
TOKEN_HOMES = {("dependencies", "task_token"), ("state", "body_excerpt")}


@dataclass
class Run:
    """What one run of the scenario left behind."""

    tokens: dict[str, str]  # what the token is for → the token, for every stored waiter
    rejected: str  # the token in the stream image the callback rejected (stored nowhere)
    stdout: str  # everything printed: the EMF metric lines
    logs: str  # every log record, formatted as Lambda ships it
    dependencies: list[dict[str, Any]]  # dependency-table items (DynamoDB JSON)
    states: list[dict[str, Any]]  # state-table items
    child_inputs: list[str]  # the input of every managed execution
    parent_outputs: list[str]  # what the parents resumed with

    @property
    def every_token(self) -> list[str]:
        return [*self.tokens.values(), self.rejected]

    def metric_blobs(self) -> list[dict[str, Any]]:
        blobs = [json.loads(line) for line in self.stdout.splitlines() if '"_aws"' in line]
        return [blob for blob in blobs if isinstance(blob, dict)]


def leaks(text: str, token: str) -> bool:
    """Whether ``text`` holds ``token``, or (for a long token) any 32-character piece of it."""
    if token in text:
        return True
    if len(token) < 64:
        return False
    return any(token[start : start + 32] in text for start in range(0, len(token) - 32, 16))


def sha256(token: str) -> str:
    """The documented hash of a token, computed here rather than by the code under test."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def long_token(purpose: str) -> str:
    """A synthetic token longer than a sort key may be, unique in every 32-character piece."""
    return f"{purpose}-{secrets.token_hex(LONG_TOKEN_HEX)}"


@pytest.fixture(scope="module")
def run() -> Iterator[Run]:
    """The scenario, run once for the module's tests (each only reads what it left)."""
    with pytest.MonkeyPatch.context() as patch:
        tracker_env(patch)
        app.use(None)
        with (
            aws_account() as aws,
            captured_logs() as log_lines,
            contextlib.redirect_stdout(io.StringIO()) as printed,
        ):
            try:
                yield _scenario(aws, create_workflows(aws), printed, log_lines)
            finally:
                app.use(None)


def _scenario(
    aws: Aws, workflows: dict[str, str], printed: io.StringIO, log_lines: io.StringIO
) -> Run:
    # GIVEN real parents waiting on a succeeding, a failing and an invalid dependency
    pumps = Pumps.create(aws)
    parent = create_parent(aws)
    parents = [
        start_parent(aws, parent, payload(f"item-{workflow}", workflow=workflow), name=workflow)
        for workflow in workflows
    ]
    pumps.settle()
    # AND long synthetic tokens on the other paths
    tokens = {purpose: long_token(purpose) for purpose in ("late", "invalid", "join")}
    waiter = payload_id("downstream")
    context = LocalContext(function_name=f"{PREFIX}-process")
    late = {**payload("item-pass"), "callback": {"task_token": tokens["late"]}}
    late["callback"].update(waiter_payload_id=waiter, parent_execution=parents[0])
    invalid = {"process": [{"workflow": "pass"}], "callback": {"task_token": tokens["invalid"]}}
    join = {
        "join": {"task_token": tokens["join"], "waiter_payload_id": waiter},
        "payloads": [payload("item-pass"), payload("item-join")],
    }
    for body, message_id in ((late, "late"), (invalid, "invalid"), (join, "join")):
        assert process.lambda_handler(sqs_event(body, ids=[message_id]), context) == {
            "batchItemFailures": []
        }
    # AND a terminal stream image the callback cannot read, its token where a repr shows most
    rejected = long_token("rejected")
    event = load_event("ddb_stream_waiter.json")
    record = event["Records"][0]["dynamodb"]
    image = record["NewImage"]
    image = {k: v for k, v in image.items() if k not in {"created_at", "task_token"}}
    record["NewImage"] = {"task_token": {"S": rejected}, **image}
    context = LocalContext(function_name=f"{PREFIX}-callback")
    assert callback.lambda_handler(event, context) == {
        "batchItemFailures": [{"itemIdentifier": record["SequenceNumber"]}]
    }
    # WHEN the pumps feed the three handlers until everything rests
    pumps.settle()
    # THEN (the tests below) look at what they left
    dependencies = aws.dynamodb.scan(TableName=aws.dependencies.table_name)["Items"]
    stored = [item["task_token"]["S"] for item in dependencies if "task_token" in item]
    real = sorted(set(stored) - set(tokens.values()))
    tokens |= {f"parent-{index}": token for index, token in enumerate(real)}
    child_inputs = [
        aws.sfn.describe_execution(executionArn=execution["executionArn"])["input"]
        for machine in aws.sfn.list_state_machines()["stateMachines"]
        if machine["name"].startswith(f"{PREFIX}-")
        for execution in aws.sfn.list_executions(stateMachineArn=machine["stateMachineArn"])[
            "executions"
        ]
    ]
    return Run(
        tokens=tokens,
        rejected=rejected,
        stdout=printed.getvalue(),
        logs=log_lines.getvalue(),
        dependencies=dependencies,
        states=aws.dynamodb.scan(TableName=aws.states.table_name)["Items"],
        child_inputs=child_inputs,
        parent_outputs=[json.dumps(aws.wait_for_execution(arn).get("output")) for arn in parents],
    )


def test_scenario_covers_every_handler_and_token_path(run: Run) -> None:
    # three real parents plus the three synthetic tokens, each stored for its parent
    assert len(run.tokens) == 6
    stored = {item["task_token"]["S"] for item in run.dependencies if "task_token" in item}
    assert stored == set(run.tokens.values())
    names = {name for blob in run.metric_blobs() for name in blob if name != "_aws"}
    for actions in (ProcessAction, UpdateAction, CallbackAction):
        assert names & {action.metric_name for action in actions}, actions.__name__
    assert len(run.child_inputs) >= 4  # pass, fail, invalid and the join's new member


def test_metrics_have_only_the_service_dimension_and_no_properties(run: Run) -> None:
    blobs = run.metric_blobs()
    assert blobs
    payload_ids = [item["payload_id"]["S"] for item in run.states]
    for blob in blobs:
        directives = blob["_aws"]["CloudWatchMetrics"]
        dimensions = {name for d in directives for names in d["Dimensions"] for name in names}
        metrics = {metric["Name"] for d in directives for metric in d["Metrics"]}
        # every dimension is one of the fixed set, with its fixed value
        assert dimensions == set(ALLOWED_DIMENSIONS), blob
        for name in dimensions:
            assert blob[name] == ALLOWED_DIMENSIONS[name], blob
        assert {d["Namespace"] for d in directives} == {observability.metrics.namespace}
        # nothing else rides along: no property, no metadata, only numeric values
        assert set(blob) == {"_aws"} | dimensions | metrics, blob
        for name in metrics:
            assert METRIC_NAME.fullmatch(name), name
            values = blob[name] if isinstance(blob[name], list) else [blob[name]]
            assert all(isinstance(value, int | float) for value in values), blob
        text = json.dumps(blob)
        assert not [pid for pid in payload_ids if pid in text], blob
        assert not [t for t in run.every_token if leaks(text, t)], blob


def test_logs_and_printed_output_hold_token_hashes_never_tokens(run: Run) -> None:
    lines = run.logs.splitlines()
    assert lines
    for line in lines:
        json.loads(line)  # structured, as CloudWatch Logs receives it
    for purpose, token in [*run.tokens.items(), ("rejected", run.rejected)]:
        assert not leaks(run.logs, token), f"{purpose} token in a log line"
        assert not leaks(run.stdout, token), f"{purpose} token printed"
    for purpose, token in run.tokens.items():
        # the logs name it by its hash instead: "sha256:" and 16 hex digits of its SHA-256
        assert f'"token_hash":"sha256:{sha256(token)[:16]}"' in run.logs, purpose
    # the rejected image's error was logged, with its traceback, and still no token
    assert "stream image is not a waiter row" in run.logs


def test_table_keys_hold_token_hashes_never_tokens(run: Run) -> None:
    hashes = {sha256(token): purpose for purpose, token in run.tokens.items()}
    keyed = set()
    for item in run.dependencies:
        partition, sort = item["payload_id"]["S"], item["waiter_id"]["S"]
        assert len(sort.encode("utf-8")) <= MAX_SORT_KEY_BYTES, sort
        for token in run.every_token:
            assert not leaks(f"{partition} {sort}", token), (partition, sort)
        keyed |= {digest for digest in hashes if digest in partition or digest in sort}
        if "task_token" not in item:
            continue
        token = item["task_token"]["S"]
        if sort == JOIN_ROW_KEY:
            # a join without a join_id is keyed by its token's hash
            assert partition == f"join#{sha256(token)}"
        else:
            assert sort == f"token#{sha256(token)}"
    # every token was keyed, by its hash
    assert keyed == set(hashes)


def test_whole_tokens_are_kept_only_where_documented(run: Run) -> None:
    found = set()
    for table, items in (("dependencies", run.dependencies), ("state", run.states)):
        for item in items:
            for attribute, value in item.items():
                if any(leaks(json.dumps(value), token) for token in run.tokens.values()):
                    found.add((table, attribute))
    assert ("dependencies", "task_token") in found
    assert found <= TOKEN_HOMES
    everything = json.dumps([run.dependencies, run.states])
    assert not leaks(everything, run.rejected), "a rejected stream image was stored"
    # a waiter row holds its own token only
    for item in run.dependencies:
        others = [t for t in run.tokens.values() if t != item.get("task_token", {}).get("S")]
        assert not [t for t in others if leaks(json.dumps(item), t)], item["payload_id"]
    # children never see a parent's token, and parents get none back
    for text in (*run.child_inputs, *run.parent_outputs):
        assert not [t for t in run.every_token if leaks(text, t)], text[:200]


def test_invalid_message_records_keep_no_token(run: Run) -> None:
    invalid = [item for item in run.states if item["payload_id"]["S"].startswith("invalid-")]
    assert invalid
    for item in invalid:
        assert not leaks(json.dumps(item), run.tokens["invalid"])


# X-Ray: what the SDK's boto3 patch records of each call, per service and operation.
XRAY_PARAMETERS = (
    importlib.resources.files("aws_xray_sdk.ext") / "resources" / "aws_para_whitelist.json"
)
# Parameters that would carry a token, an item or a payload, per service the handlers call.
CONTENT_PARAMETERS = {
    "dynamodb": {"Item", "Items", "Key", "Keys", "ExpressionAttributeValues", "Attributes"},
    "sqs": {"MessageBody", "Messages", "Entries"},
    "s3": {"Body"},
}


def test_xray_records_no_token_or_content_parameter() -> None:
    services = json.loads(XRAY_PARAMETERS.read_text())["services"]
    # Step Functions calls (SendTaskSuccess carries the token) are recorded without parameters
    assert not {"stepfunctions", "states", "sfn"} & set(services)
    for service, content in CONTENT_PARAMETERS.items():
        for operation, spec in services[service]["operations"].items():
            recorded = set(spec.get("request_parameters", [])) | set(
                spec.get("response_parameters", [])
            )
            for group in ("request_descriptors", "response_descriptors"):
                recorded |= {
                    name
                    for name, descriptor in spec.get(group, {}).items()
                    if not descriptor.get("get_keys") and not descriptor.get("get_count")
                }
            assert not recorded & content, (service, operation, recorded & content)


@pytest.mark.parametrize("wrap", ["plain", "sns", "unreadable"])
def test_invalid_message_excerpts_hash_every_token_field(wrap: str) -> None:
    token = "AQB" + "k" * 600 + "/+="
    body = json.dumps({"callback": {"task_token": token}, "process": "not a list"})
    if wrap == "sns":
        body = json.dumps({"Type": "Notification", "Message": body})
    elif wrap == "unreadable":
        body = body[:-5]  # broken JSON: the token cannot be read, the field is still found
    excerpt = redact_tokens(body, None)
    assert token[:32] not in excerpt
    assert f"{redact_token(token)}" in excerpt
