"""``waiters``: a typo is not "nobody waits"; a known payload without waiters is."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from typer.testing import CliRunner

from dependency_tracker.core.enums import PayloadState
from dependency_tracker.core.errors import PayloadNotFoundError
from dependency_tracker_cli.__main__ import app
from tests.conftest import payload, payload_id
from tests.unit.cli.rows import waiter

if TYPE_CHECKING:
    from tests.conftest import Aws


def test_an_unknown_payload_id_exits_5_with_a_clear_message(aws: Aws) -> None:
    # GIVEN a payload that exists and one waiter on it
    aws.finished_payload(payload("a"), PayloadState.SUCCEEDED)
    assert aws.dependencies.register(waiter(payload_id("a"), "t1"))
    typo = payload_id("a") + "x"
    # WHEN an operator mistypes its id
    result = CliRunner().invoke(app, ["waiters", typo])
    # THEN the command fails as `status` does, naming the id, instead of "nobody waits"
    assert result.exit_code == PayloadNotFoundError.exit_code
    assert result.stderr == (
        f"error: payload not found: {typo} (no state item, and nothing waits on it)\n"
    )
    assert "nobody waits" not in result.stdout


def test_an_unknown_payload_id_in_json_says_not_found_and_exits_5(aws: Aws) -> None:
    # GIVEN an empty stack
    # WHEN a script asks for the waiters of an id nobody knows
    result = CliRunner().invoke(app, ["waiters", "no/such/id", "--json"])
    # THEN stdout is still one JSON document, saying so, and the exit code tells the script
    assert result.exit_code == PayloadNotFoundError.exit_code
    assert json.loads(result.stdout) == {"payload_id": "no/such/id", "found": False, "waiters": []}


def test_a_known_payload_nobody_waits_on_is_not_an_error(aws: Aws) -> None:
    # GIVEN a payload that ran, with no waiter
    aws.finished_payload(payload("a"), PayloadState.SUCCEEDED)
    # WHEN its waiters are listed
    result = CliRunner().invoke(app, ["waiters", payload_id("a")])
    # THEN that is the answer, with exit 0
    assert result.exit_code == 0, result.output
    assert result.stdout == f"nobody waits on {payload_id('a')}\n"


def test_waiters_of_a_payload_without_a_state_item_are_shown(aws: Aws) -> None:
    # GIVEN a wait-only reference: a waiter row on a payload that never started
    assert aws.dependencies.register(waiter("never/started", "t1", parent="p"))
    # WHEN its waiters are listed
    result = CliRunner().invoke(app, ["waiters", "never/started", "--json"])
    # THEN the waiter is there, and the payload counts as known
    assert result.exit_code == 0, result.output
    shown = json.loads(result.stdout)
    assert shown["found"] is True
    assert [view["waiter_payload_id"] for view in shown["waiters"]] == ["p"]


PARENT_ARN = "arn:aws:states:us-east-1:123456789012:execution:deptrack-wait-for-dependencies:m1"


def test_a_waiting_parents_own_id_points_to_graph_and_stuck(aws: Aws) -> None:
    # GIVEN a parent started with `wait --payload-id s2/mosaic-1`, waiting on tile-2
    assert aws.dependencies.register(
        waiter("s2/workflow-simulate/tile-2", "t1", parent="s2/mosaic-1", execution=PARENT_ARN)
    )
    for command in ("status", "waiters"):
        # WHEN the user asks `status` or `waiters` about the parent's id
        result = CliRunner().invoke(app, [command, "s2/mosaic-1"])
        # THEN it is still not a payload (exit 5), and the answer says where to look
        assert result.exit_code == PayloadNotFoundError.exit_code, command
        assert "is the id a parent waits as" in result.stderr, command
        assert "graph --root s2/mosaic-1 --all" in result.stderr, command
        assert "stuck" in result.stderr, command
    # AND the command it points to answers: the parent waits on tile-2
    graph = CliRunner().invoke(app, ["graph", "--root", "s2/mosaic-1", "--all"])
    assert graph.exit_code == 0, graph.output
    assert "tile-2" in graph.stdout


def test_a_typo_gets_no_pointer(aws: Aws) -> None:
    assert aws.dependencies.register(
        waiter("a/b", "t1", parent="s2/mosaic-1", execution=PARENT_ARN)
    )
    result = CliRunner().invoke(app, ["status", "s2/mosaic-2"])
    assert result.exit_code == PayloadNotFoundError.exit_code
    assert result.stderr == "error: payload not found: s2/mosaic-2\n"
