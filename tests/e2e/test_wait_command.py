"""``dependency-tracker wait`` against ``serve``: a parent started from files, followed to its end.

One ``serve`` runs in a subprocess on a free port for the module (as a user runs it);
the CLI runs in this process. ``--stack-name`` finds the parents through the local
CloudFormation stack ``serve`` registers.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from typer.testing import CliRunner

from dependency_tracker_cli.__main__ import app
from dependency_tracker_cli.commands.serve import template_outputs
from tests.conftest import wait_until
from tests.e2e.conftest import dependency, dependency_id
from tests.e2e.serving import serving, write

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from typer.testing import Result

pytestmark = pytest.mark.e2e

STACK = "quickstart"
PARENT_ID = "wait/mosaic-1"


@pytest.fixture(scope="module")
def serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """``serve --port 0 --stack-name quickstart``; its outputs."""
    with serving(tmp_path_factory.mktemp("serve"), "--stack-name", STACK) as running:
        yield running.outputs


def cli(outputs: dict[str, Any], *args: str) -> Result:
    return CliRunner().invoke(
        app,
        [*args, "--endpoint-url", outputs["EndpointUrl"]],
        env={"DEPTRACK_PREFIX": None, "DEPTRACK_STACK_NAME": None},
    )


def simulate(item: str, *, seconds: int = 0, outcome: str = "succeed") -> dict[str, Any]:
    return dependency(item, seconds=seconds, outcome=outcome, collection="wait")


def sim_id(item: str) -> str:
    return dependency_id(item, collection="wait")


def test_serve_answers_for_its_outputs_as_a_cloudformation_stack(serve: dict[str, Any]) -> None:
    # GIVEN serve started with --stack-name
    assert serve["StackName"] == STACK
    # WHEN a plain CloudFormation client describes that stack on the endpoint
    cloudformation = boto3.session.Session().client(
        "cloudformation", endpoint_url=serve["EndpointUrl"], region_name=serve["Region"]
    )
    (stack,) = cloudformation.describe_stacks(StackName=STACK)["Stacks"]
    # THEN its outputs are serve's, under the deployed template's names
    outputs = {output["OutputKey"]: output["OutputValue"] for output in stack["Outputs"]}
    assert outputs == template_outputs(serve)
    assert outputs["ProcessQueueUrl"] == serve["ProcessQueueUrl"]
    assert outputs["WaitForJoinStateMachineArn"] == serve["StateMachines"]["wait-for-join"]


def test_wait_follows_a_parent_to_its_end_through_the_local_stack_name(
    serve: dict[str, Any], tmp_path: Path
) -> None:
    # GIVEN two payload files
    one = write(tmp_path, "one.json", simulate("w-1"))
    two = write(tmp_path, "two.json", simulate("w-2"))
    # WHEN a parent is started over them by stack name, and followed
    result = cli(serve, "wait", one, two, "--stack-name", STACK, "--json", "--poll", "0.1")
    # THEN it ran the stack's wait-for-dependencies to success, with both summaries
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["status"] == "SUCCEEDED"
    assert ":stateMachine:" not in report["execution_arn"]
    assert ":execution:deptrack-wait-for-dependencies:wait-" in report["execution_arn"]
    assert [d["payload_id"] for d in report["output"]["dependencies"]] == [
        sim_id("w-1"),
        sim_id("w-2"),
    ]
    assert report["dependencies"] == [
        {"payload_id": sim_id("w-1"), "state": "SUCCEEDED"},
        {"payload_id": sim_id("w-2"), "state": "SUCCEEDED"},
    ]
    assert result.stderr.startswith("started wait-for-dependencies: arn:aws:states:")


def test_a_join_that_cannot_reach_its_quorum_exits_1_with_the_error_name(
    serve: dict[str, Any], tmp_path: Path
) -> None:
    # GIVEN two payloads in one file, one of which fails
    both = write(tmp_path, "both.json", [simulate("j-ok"), simulate("j-bad", outcome="fail")])
    # WHEN a join needing both is followed
    result = cli(serve, "wait", both, "--quorum", "2", "--name", "join-1", "--poll", "0.1")
    # THEN it ran wait-for-join and failed with QuorumUnreachable, and printed the cause the
    # tracker sent (the join's summary, naming the member that failed): the embedded stack
    # keeps SendTaskFailure's cause, as AWS does
    assert result.exit_code == 1, result.output
    assert "FAILED" in result.stdout
    assert "join-1" in result.stdout
    last = result.stderr.splitlines()[-1]
    assert last.startswith("error: parent FAILED: QuorumUnreachable: {")
    assert sim_id("j-bad") in last


def test_a_parent_left_waiting_shows_in_waiters_stuck_and_graph(
    serve: dict[str, Any], tmp_path: Path
) -> None:
    # GIVEN a parent started without following, on a payload that takes a minute
    slow = write(tmp_path, "slow.json", simulate("w-slow", seconds=60))
    started = cli(serve, "wait", slow, "--payload-id", PARENT_ID, "--no-follow", "--json")
    assert started.exit_code == 0, started.output
    arn = json.loads(started.stdout)["execution_arn"]

    # WHEN the tracker registered its wait
    def waiting() -> list[dict[str, Any]]:
        shown = cli(serve, "waiters", sim_id("w-slow"), "--json")
        views: list[dict[str, Any]] = json.loads(shown.stdout)["waiters"] if shown.stdout else []
        return views

    (view,) = wait_until(waiting, timeout=30, every=0.25)
    # THEN waiters, stuck and graph all name it
    assert (view["parent_execution"], view["waiter_payload_id"]) == (arn, PARENT_ID)
    stuck = json.loads(cli(serve, "stuck", "--older-than", "0s", "--json").stdout)
    assert f"payload:{PARENT_ID}" in [p["parent"]["id"] for p in stuck["parents"]]
    graph = json.loads(cli(serve, "graph", "--root", PARENT_ID, "--json").stdout)
    edges = {(edge["from"], edge["to"]) for edge in graph["edges"]}
    assert edges == {(f"payload:{PARENT_ID}", f"payload:{sim_id('w-slow')}")}


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["missing.json"], 2, "error: missing.json: no such file"),
        ([], 2, "error: nothing to wait on"),
        (["{file}", "--manifest-url", "s3://b/m.jsonl"], 2, "error: give FILE|- ... or"),
        (["{bad}"], 3, "error: invalid message: "),
        (["{unknown}"], 4, "error: unknown workflow 'nope'"),
    ],
)
def test_wait_refuses_before_starting_anything(
    serve: dict[str, Any], tmp_path: Path, args: list[str], code: int, message: str
) -> None:
    files = {
        "{file}": write(tmp_path, "ok.json", simulate("never")),
        "{bad}": write(tmp_path, "bad.json", {"process": [{"workflow": "simulate"}]}),
        "{unknown}": write(
            tmp_path, "unknown.json", {**simulate("never"), "process": [{"workflow": "nope"}]}
        ),
    }
    result = cli(serve, "wait", *[files.get(arg, arg) for arg in args])
    assert result.exit_code == code, result.output
    assert result.stderr.startswith(message), result.stderr
