"""Every SQS and DynamoDB Task of every ASL document retries transient faults, and only those.

The documents: the stack's ``stepfunctions/``, every example parent, and what the
``dependency_tracker.asl`` builders return. A parent whose send is throttled once
(one of 1,500 Map iterations) must not fail; a parent must never retry the
tracker's answer (a ``SendTaskFailure``) or its own callback timeout, each of
which would publish the dependency again.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from dependency_tracker import asl
from dependency_tracker.core.enums import DependencyError
from dependency_tracker_local import definitions

if TYPE_CHECKING:
    from collections.abc import Iterator

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
SERVICE = re.compile(r"arn:[^:]+:states:::(?P<service>sqs|dynamodb):")
# Never to be retried: the catch-alls and the callback timeout (asl.NEVER_RETRIED), and
# every error the tracker answers with (a SendTaskFailure surfaces under its own name).
FORBIDDEN = asl.NEVER_RETRIED | {error.value for error in DependencyError}
REQUIRED = {
    "sqs": set(asl.SQS_TRANSIENT_ERRORS) | set(asl.SQS_UNCLASSIFIED_ERRORS),
    "dynamodb": set(asl.DYNAMODB_TRANSIENT_ERRORS),
}
# The throttling and 5xx names each integration must retry at the least.
ESSENTIAL = {
    "sqs": {
        "SQS.RequestThrottledException",
        "SQS.KmsThrottledException",
        "SQS.SdkClientException",
        "SQS.AmazonSQSException",
    },
    "dynamodb": {
        "DynamoDB.ProvisionedThroughputExceededException",
        "DynamoDB.ThrottlingException",
        "DynamoDB.InternalServerError",
        "DynamoDB.AmazonDynamoDBException",
    },
}


def task_states(states: dict[str, Any], where: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every Task state, nested Map and Parallel states included, with its path."""
    for name, state in states.items():
        if state.get("Type") == "Task":
            yield f"{where}/{name}", state
        inner = [state.get("ItemProcessor"), state.get("Iterator"), *state.get("Branches", [])]
        for index, machine in enumerate(part for part in inner if part):
            yield from task_states(machine["States"], f"{where}/{name}[{index}]")


def documents() -> dict[str, dict[str, Any]]:
    """Every ASL document the project ships or builds, by a name for the failure message."""
    found: dict[str, dict[str, Any]] = {}
    for name, path in definitions.discover().items():
        text = definitions.render(path, dict.fromkeys(definitions.SUBSTITUTION_KEYS, "1"))
        found[f"stepfunctions/{name}"] = json.loads(text)
    for path in sorted(EXAMPLES.rglob("*.asl.json")):
        found[str(path.relative_to(ROOT))] = json.loads(path.read_text(encoding="utf-8"))
    built = {
        "wait_state": asl.wait_state("${ProcessQueueUrl}", on_error="Failed"),
        "join_state": asl.join_state("${ProcessQueueUrl}", on_error="Failed"),
        "join_state(manifest)": asl.join_state(
            "${ProcessQueueUrl}", payloads_path=None, payloads_url_path="$.url", on_error="F"
        ),
    }
    for name, state in built.items():
        found[f"asl.{name}"] = {"StartAt": "Wait", "States": {"Wait": state}}
    return found


def integration_tasks() -> list[tuple[str, str, dict[str, Any]]]:
    tasks = []
    for name, document in documents().items():
        for where, state in task_states(document["States"], name):
            found = SERVICE.match(state["Resource"])
            if found:
                tasks.append((where, found["service"], state))
    return tasks


TASKS = integration_tasks()


def test_the_walk_finds_every_kind_of_task() -> None:
    # GIVEN every document: the stack's parents, the examples, the builders' states
    where = {name.split("/")[0] for name, _, _ in TASKS}
    # THEN the walk reaches each source, and both integrations, nested states included
    assert {"stepfunctions", "examples", "asl.wait_state", "asl.join_state"} <= where
    assert {service for _, service, _ in TASKS} == {"sqs", "dynamodb"}
    assert any("ReadCounts[0]/ReadShard" in name for name, _, _ in TASKS)
    assert any("WaitForEach[0]/PublishAndWait" in name for name, _, _ in TASKS)


@pytest.mark.parametrize(("where", "service", "state"), TASKS, ids=[t[0] for t in TASKS])
def test_every_sqs_and_dynamodb_task_retries_transient_faults_only(
    where: str, service: str, state: dict[str, Any]
) -> None:
    retriers = state.get("Retry", [])
    retried = {error for retrier in retriers for error in retrier["ErrorEquals"]}
    # THEN throttling and 5xx are retried, as Step Functions names them for the integration
    assert ESSENTIAL[service] <= retried, f"{where}: retries {sorted(retried)}"
    assert retried <= REQUIRED[service], f"{where}: retries {sorted(retried - REQUIRED[service])}"
    # AND never a catch-all, the callback timeout or one of the tracker's answers
    assert not retried & FORBIDDEN, f"{where}: retries {sorted(retried & FORBIDDEN)}"
    for retrier in retriers:
        # AND with jittered, capped backoff: Map iterations throttled together spread out,
        # and the retries end within about a minute
        assert retrier["JitterStrategy"] == "FULL", where
        # (SQS's unclassified errors get a brief retry of their own: the test below)
        if retrier["ErrorEquals"] != list(asl.SQS_UNCLASSIFIED_ERRORS):
            assert retrier["MaxAttempts"] >= 3, where
        waits = sum(
            min(
                retrier["IntervalSeconds"] * retrier["BackoffRate"] ** n, retrier["MaxDelaySeconds"]
            )
            for n in range(retrier["MaxAttempts"])
        )
        assert waits <= 60, f"{where}: {waits} s of backoff"


@pytest.mark.parametrize(("where", "service", "state"), TASKS, ids=[t[0] for t in TASKS])
def test_a_caught_tracker_error_is_never_retried_first(
    where: str, service: str, state: dict[str, Any]
) -> None:
    # GIVEN a send-and-wait Task: the tracker's answers reach it as task failures
    del service
    if not state["Resource"].endswith(".waitForTaskToken"):
        return
    caught = {error for catcher in state.get("Catch", []) for error in catcher["ErrorEquals"]}
    retried = {error for retrier in state["Retry"] for error in retrier["ErrorEquals"]}
    # THEN what it catches (the tracker's errors, the timeout) goes to its Catch at once
    assert caught, where
    assert not caught & retried, where


def test_every_shipped_resource_names_the_partition_placeholder() -> None:
    # GIVEN the stack's definitions and the examples as files (placeholders unfilled)
    paths = [*definitions.discover().values(), *sorted(EXAMPLES.rglob("*.asl.json"))]
    for path in paths:
        document = json.loads(
            path.read_text(encoding="utf-8").replace("${DefaultTimeoutSeconds}", "1")
            .replace("${DefaultMaxConcurrency}", "1")
        )  # fmt: skip
        # THEN every Task's Resource is in the deployment's partition, not hard-coded aws
        for where, state in task_states(document["States"], path.name):
            assert state["Resource"].startswith("arn:${Partition}:"), where


def test_the_builders_take_the_partition() -> None:
    # GIVEN a wait built for another partition, and one built with the placeholder
    china = asl.wait_state("q", on_error="F", partition="aws-cn")
    placeholder = asl.join_state("q", on_error="F", partition="${Partition}")
    # THEN the Resource names it (the default stays the aws partition, as before)
    assert china["Resource"] == "arn:aws-cn:states:::sqs:sendMessage.waitForTaskToken"
    assert placeholder["Resource"] == "arn:${Partition}:states:::sqs:sendMessage.waitForTaskToken"
    assert asl.wait_state("q", on_error="F")["Resource"] == asl.SEND_AND_WAIT


def test_the_local_stack_fills_the_partition_in() -> None:
    # GIVEN a definition rendered as the local stack and the tests do (no Partition given)
    path = definitions.discover()["wait-for-dependencies"]
    values = dict.fromkeys(definitions.SUBSTITUTION_KEYS - {"Partition"}, "1")
    rendered = json.loads(definitions.render(path, values))
    (_, task), *_ = task_states(rendered["States"], "wait-for-dependencies")
    # THEN it runs in the aws partition; a deployment's own value wins
    assert task["Resource"].startswith("arn:aws:states:::")
    rendered = json.loads(definitions.render(path, {**values, "Partition": "aws-us-gov"}))
    (_, task), *_ = task_states(rendered["States"], "wait-for-dependencies")
    assert task["Resource"].startswith("arn:aws-us-gov:states:::")


# The SDK's classes of SQS errors that no retry can mend (the queue is gone, the message is
# malformed, the key refuses the caller, the request is not HTTPS/SigV4, ...): Step Functions
# names them "SQS.<class>" (AWS SDK for Java, package com.amazonaws.services.sqs.model).
SQS_PERMANENT = {
    "SQS.QueueDoesNotExistException",
    "SQS.InvalidMessageContentsException",
    "SQS.InvalidAddressException",
    "SQS.InvalidAttributeNameException",
    "SQS.InvalidAttributeValueException",
    "SQS.InvalidSecurityException",
    "SQS.KmsAccessDeniedException",
    "SQS.KmsDisabledException",
    "SQS.KmsInvalidKeyUsageException",
    "SQS.KmsInvalidStateException",
    "SQS.KmsNotFoundException",
    "SQS.KmsOptInRequired",
    "SQS.UnsupportedOperationException",
}


def backoff(retrier: dict[str, Any]) -> float:
    """Seconds a retrier waits at most, over all its attempts."""
    return float(
        sum(
            min(
                retrier["IntervalSeconds"] * retrier["BackoffRate"] ** n, retrier["MaxDelaySeconds"]
            )
            for n in range(retrier["MaxAttempts"])
        )
    )


@pytest.mark.parametrize(
    ("where", "state"),
    [(where, state) for where, service, state in TASKS if service == "sqs"],
    ids=[where for where, service, _ in TASKS if service == "sqs"],
)
def test_an_sqs_send_retries_permanent_refusals_never_and_unclassified_errors_briefly(
    where: str, state: dict[str, Any]
) -> None:
    retriers = {name: r for r in state["Retry"] for name in r["ErrorEquals"]}
    # THEN SQS's permanent refusals, by the SDK's names, are never retried
    assert not SQS_PERMANENT & set(retriers), where
    # AND the throttling classes get the full backoff (6 attempts)
    for name in asl.SQS_TRANSIENT_ERRORS:
        assert retriers[name]["MaxAttempts"] == asl.RETRY_MAX_ATTEMPTS, (where, name)
    # AND AmazonSQSException, which names permanent refusals too (AccessDenied, a message over
    # the size limit), is retried twice, within a few seconds, by a retrier of its own
    (unclassified,) = asl.SQS_UNCLASSIFIED_ERRORS
    brief = retriers[unclassified]
    assert brief["ErrorEquals"] == [unclassified], where
    assert brief["MaxAttempts"] == asl.UNCLASSIFIED_MAX_ATTEMPTS == 2, where
    assert backoff(brief) <= 3, where


def test_a_task_that_catches_dependency_cycle_sends_the_id_it_waits_as() -> None:
    # A DependencyCycle Catch can only fire when the message names the parent's own payload
    # id (waiter_payload_id): without it the tracker cannot see the cycle.
    # (The asl helpers take it as waiter_payload_id_path, for the parents that have one.)
    missing = []
    for where, _service, state in TASKS:
        if where.startswith("asl."):
            continue
        caught = {error for catch in state.get("Catch", []) for error in catch["ErrorEquals"]}
        body = state.get("Parameters", {}).get("MessageBody")
        if "DependencyCycle" not in caught or not isinstance(body, dict):
            continue
        wait = body.get("join") or body.get("callback") or body
        if not {"waiter_payload_id", "waiter_payload_id.$"} & set(wait):
            missing.append(where)
    assert missing == []
