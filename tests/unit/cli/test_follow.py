"""``follow``: find a parent by ARN or name, show it to its end, exit as ``wait`` does."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest
from typer.testing import CliRunner

from dependency_tracker.core.enums import PayloadState
from dependency_tracker_cli.__main__ import app
from tests.conftest import FAIL_WORKFLOW, PASS_WORKFLOW, payload, payload_id
from tests.unit.cli.rows import waiter

if TYPE_CHECKING:
    from typer.testing import Result

    from tests.conftest import Aws

INVALID_JOIN = {
    "StartAt": "InvalidJoin",
    "States": {"InvalidJoin": {"Type": "Fail", "Error": "InvalidJoin", "Cause": "quorum 3"}},
}


@pytest.fixture
def parents(aws: Aws) -> dict[str, str]:
    """Stand-ins: wait-for-dependencies succeeds at once, wait-for-join fails InvalidJoin."""
    return {
        "wait-for-dependencies": aws.create_workflow("wait-for-dependencies", PASS_WORKFLOW),
        "wait-for-join": aws.create_workflow("wait-for-join", INVALID_JOIN),
    }


def start(aws: Aws, machine_arn: str, name: str, document: dict[str, Any]) -> str:
    started = aws.sfn.start_execution(
        stateMachineArn=machine_arn, name=name, input=json.dumps(document)
    )
    arn = str(started["executionArn"])
    aws.wait_for_execution(arn)
    return arn


def follow(*args: str) -> Result:
    return CliRunner().invoke(app, ["follow", *args, "--poll", "0.05"])


def test_a_parent_is_found_by_its_arn_or_its_name_and_shown_as_wait_shows_it(
    aws: Aws, parents: dict[str, str]
) -> None:
    # GIVEN a parent that waited on a payload and succeeded
    arn = start(aws, parents["wait-for-dependencies"], "p-1", {"dependencies": [payload("a")]})
    # WHEN it is followed by its ARN and by its name
    by_arn = follow(arn, "--json")
    by_name = follow("p-1", "--json")
    # THEN both show the same end: the parent, its machine, its dependencies
    assert by_arn.exit_code == 0, by_arn.output
    assert by_name.exit_code == 0, by_name.output
    shown = json.loads(by_arn.stdout)
    assert shown == json.loads(by_name.stdout)
    assert (shown["execution_arn"], shown["status"]) == (arn, "SUCCEEDED")
    assert shown["state_machine"] == "wait-for-dependencies"
    assert shown["dependencies"] == [{"payload_id": payload_id("a"), "state": None}]
    assert by_name.stderr.startswith(f"following wait-for-dependencies: {arn}")


def test_a_failed_parent_exits_1_with_its_error_and_cause(
    aws: Aws, parents: dict[str, str]
) -> None:
    # GIVEN a join parent that failed
    start(aws, parents["wait-for-join"], "j-1", {"dependencies_url": "s3://b/m.jsonl"})
    # WHEN it is followed by name
    result = follow("j-1")
    # THEN it ends as wait ends: exit 1, the error name and cause last on stderr
    assert result.exit_code == 1, result.output
    assert "FAILED" in result.stdout
    assert "wait-for-join" in result.stdout
    assert result.stderr.splitlines()[-1] == "error: parent FAILED: InvalidJoin: quorum 3"


def test_an_unknown_execution_exits_5(aws: Aws, parents: dict[str, str]) -> None:
    # GIVEN parents with no execution named "nope"
    # WHEN "nope", and an ARN no execution has, are followed
    by_name = follow("nope")
    missing = parents["wait-for-join"].replace(":stateMachine:", ":execution:") + ":nope"
    by_arn = follow(missing)
    # THEN both exit 5, naming what was looked for
    assert by_name.exit_code == 5, by_name.output
    assert by_name.stderr.startswith("error: no execution named 'nope' of deptrack-wait-for-")
    assert by_arn.exit_code == 5, by_arn.output
    assert by_arn.stderr == f"error: no execution {missing}\n"


def test_an_execution_of_another_machine_is_no_parent(aws: Aws, parents: dict[str, str]) -> None:
    # GIVEN an execution of a workflow that is not one of the parents
    other = start(aws, aws.create_workflow("fail", FAIL_WORKFLOW), "w-1", {})
    # WHEN it is followed
    result = follow(other)
    # THEN it exits 5: it waits on nothing through the tracker
    assert result.exit_code == 5, result.output
    assert result.stderr.startswith(f"error: {other} waits on nothing through the tracker")


def test_a_parent_of_your_own_is_followed_by_its_arn(aws: Aws, parents: dict[str, str]) -> None:
    # GIVEN a mosaic state machine of the user's own whose execution waited on "a"
    aws.finished_payload(payload("a"), PayloadState.SUCCEEDED)
    mosaic = start(aws, aws.create_workflow("my-mosaic", PASS_WORKFLOW), "mosaic-1", {})
    assert aws.dependencies.register(waiter(payload_id("a"), "t1", execution=mosaic))
    # WHEN it is followed by its ARN
    result = follow(mosaic, "--json")
    # THEN follow shows it like the stack's own parents, with what it waited on
    assert result.exit_code == 0, result.output
    shown = json.loads(result.stdout)
    assert shown["state_machine"] == "deptrack-my-mosaic"
    assert shown["status"] == "SUCCEEDED"
    assert payload_id("a") in json.dumps(shown)


def test_without_any_parent_machine_it_exits_4(aws: Aws) -> None:
    # GIVEN a stack without the parent machines
    # WHEN an execution is followed
    result = follow("p-1")
    # THEN it exits 4, as wait does
    assert result.exit_code == 4, result.output
    assert result.stderr.startswith("error: no state machine deptrack-wait-for-")
