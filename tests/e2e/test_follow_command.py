"""``follow`` re-attaches to a parent ``wait --no-follow`` started, through ``serve``.

One ``serve`` runs in a subprocess for the module (as a user runs it); the CLI runs in
this process. Also here: ``wait`` refuses a join its parent could only fail.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest

from tests.e2e.conftest import dependency, dependency_id
from tests.e2e.serving import Server, serving, write

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving(tmp_path_factory.mktemp("serve")) as running:
        yield running


def simulate(item: str, *, seconds: int = 0) -> dict[str, Any]:
    return dependency(item, seconds=seconds, collection="follow")


def test_follow_shows_a_parent_started_without_following_to_its_end(
    serve: Server, tmp_path: Path
) -> None:
    # GIVEN a parent started with --no-follow on a payload that takes a moment
    slow = write(tmp_path, "slow.json", simulate("f-1", seconds=2))
    started = serve.cli("wait", slow, "--name", "follow-1", "--no-follow", "--json")
    assert started.exit_code == 0, started.output
    arn = json.loads(started.stdout)["execution_arn"]
    # WHEN it is followed by its ARN, and once it ended, by its name
    by_arn = serve.cli("follow", arn, "--json", "--poll", "0.1")
    by_name = serve.cli("follow", "follow-1", "--json")
    # THEN both show what wait would have shown: its end and each dependency's state
    assert by_arn.exit_code == 0, by_arn.output
    shown = json.loads(by_arn.stdout)
    assert (shown["execution_arn"], shown["status"]) == (arn, "SUCCEEDED")
    assert shown["state_machine"] == "wait-for-dependencies"
    assert shown["dependencies"] == [
        {"payload_id": dependency_id("f-1", "follow"), "state": "SUCCEEDED"}
    ]
    assert by_name.exit_code == 0, by_name.output
    assert json.loads(by_name.stdout) == shown


def test_follow_of_an_unknown_execution_exits_5(serve: Server) -> None:
    result = serve.cli("follow", "no-such-parent")
    assert result.exit_code == 5, result.output
    assert result.stderr.startswith("error: no execution named 'no-such-parent' of deptrack-")


def test_wait_starts_no_join_whose_quorum_is_over_its_members(
    serve: Server, tmp_path: Path
) -> None:
    # GIVEN one payload file
    one = write(tmp_path, "one.json", simulate("never"))
    # WHEN a parent needing 3 of it is asked for
    result = serve.cli("wait", one, "--quorum", "3", "--name", "over-quorum")
    # THEN it exits 3 with the tracker's cause, and no such parent exists
    assert result.exit_code == 3, result.output
    assert result.stderr == (
        "error: nothing started: the parent would fail InvalidJoin: "
        "quorum must be between 1 and the 1 distinct payloads, got 3\n"
    )
    sfn = serve.client("stepfunctions")
    arn = serve.outputs["StateMachines"]["wait-for-join"]
    names = [e["name"] for e in sfn.list_executions(stateMachineArn=arn)["executions"]]
    assert "over-quorum" not in names
