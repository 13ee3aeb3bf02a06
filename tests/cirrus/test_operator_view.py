"""The operator's commands in cirrus mode, on state cirrus-geo 2.0.0's own Lambdas wrote.

``status``, ``stuck``, ``graph`` and ``publish --wait`` run in process
(``CliRunner``) against an embedded stack in cirrus mode, finding cirrus's state
table through the stack's outputs (``--stack-name``, registered as ``serve``
registers them) or ``--cirrus-prefix``. A payload cirrus is running shows as
running in cirrus, one it failed as failed with cirrus's own error; neither is
"not found" or "not started", and a published payload is seen to end.
``serve --cirrus`` itself is started once, as a subprocess.
"""

from __future__ import annotations

import io
import json
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest
from typer.testing import CliRunner

from dependency_tracker.cirrus.store import CirrusStateTable
from dependency_tracker.core.enums import PayloadState
from dependency_tracker.table.dependency_table import DependencyTable
from dependency_tracker.table.items import WaiterItem, waiter_id_for
from dependency_tracker_cli.__main__ import app
from dependency_tracker_cli.commands.serve import register_stack
from dependency_tracker_local import EmbeddedStack
from tests.conftest import wait_until
from tests.e2e.conftest import finished

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

COLLECTION = "operator"
STACK_NAME = "deptrack"
RUNNING = f"{COLLECTION}/workflow-succeed/slow"
FAILED = f"{COLLECTION}/workflow-fail/broken"
CIRRUS_ERROR = "WorkflowFailed: the cirrus test workflow failed"
# Long enough for every command below; the test stops the run when it is done.
RUN_SECONDS = 120


def member(item: str, workflow: str, **options: Any) -> dict[str, Any]:
    process: dict[str, Any] = {"workflow": workflow, "upload_options": {}, "tasks": {}}
    if options:
        process["workflow_options"] = options
    return {
        "type": "FeatureCollection",
        "features": [{"type": "Feature", "id": item, "collection": COLLECTION}],
        "process": [process],
    }


@pytest.fixture(scope="module")
def stack() -> Iterator[EmbeddedStack]:
    with EmbeddedStack(
        prefix="deptrack", sink=io.StringIO(), cirrus=True, sweeper_interval=None
    ) as running:
        assert running.cirrus is not None
        running.cirrus.create_test_workflows(running.client)
        register_stack(
            running.client("cloudformation"),
            STACK_NAME,
            {**running.outputs, "StackName": STACK_NAME},
        )
        yield running


def start(stack: EmbeddedStack, name: str, dependency: dict[str, Any]) -> str:
    response = stack.client("stepfunctions").start_execution(
        stateMachineArn=stack.outputs["StateMachines"]["wait-for-dependencies"],
        name=name,
        input=json.dumps(
            {
                "payload_id": f"{COLLECTION}/{name}",
                "dependencies": [dependency],
                "timeout_seconds": 300,
            }
        ),
    )
    return str(response["executionArn"])


def cli(*args: str) -> Any:
    result = CliRunner().invoke(app, [*args, "--stack-name", STACK_NAME])
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture(scope="module")
def cirrus_at_work(stack: EmbeddedStack) -> Iterator[str]:
    """A parent waiting on a payload cirrus is running; a waiter whose FAILED event was lost.

    Yields the running payload's execution ARN (cirrus's).
    """
    cirrus_table = CirrusStateTable(stack.client("dynamodb"), stack.outputs["CirrusStateTableName"])
    # cirrus fails this one; its event answers the parent
    failed_parent = start(stack, "failed-parent", member("broken", "fail"))
    assert finished(stack, failed_parent)["status"] == "FAILED"
    # A waiter that came after the event was handled, as if its event had been lost
    # (the sweeper, off here, would settle it): it still waits on a payload cirrus failed.
    since = datetime.now(UTC) - timedelta(hours=1)
    DependencyTable(stack.client("dynamodb"), stack.outputs["DependencyTableName"]).register(
        WaiterItem(
            payload_id=FAILED,
            waiter_id=waiter_id_for("lost-event-token"),
            task_token="lost-event-token",
            workflow_state=PayloadState.PROCESSING,
            created_at=since,
            updated_at=since,
            waiter_payload_id=f"{COLLECTION}/lost-event-parent",
        )
    )
    # cirrus runs this one for a while
    waiting_parent = start(
        stack, "waiting-parent", member("slow", "succeed", wait_seconds=RUN_SECONDS)
    )
    item = wait_until(
        lambda: (
            (found := cirrus_table.get(RUNNING)) is not None
            and found.state is PayloadState.PROCESSING
            and found
        ),
        timeout=30,
    )
    assert item.last_execution is not None
    yield item.last_execution
    sfn = stack.client("stepfunctions")
    sfn.stop_execution(executionArn=waiting_parent)
    sfn.stop_execution(executionArn=item.last_execution)


def test_status_shows_the_running_payload_and_the_failed_one_with_cirrus_s_error(
    cirrus_at_work: str,
) -> None:
    shown = cli("status", RUNNING, FAILED, "--json")
    views = {view["payload_id"]: view for view in json.loads(shown.stdout)}
    assert views[RUNNING]["source"] == "cirrus"
    assert views[RUNNING]["state"] == "PROCESSING"
    assert views[RUNNING]["execution_arn"] == cirrus_at_work
    assert views[RUNNING]["attempt"] is None
    assert views[FAILED]["state"] == "FAILED"
    assert views[FAILED]["last_error"] == CIRRUS_ERROR
    card = cli("status", RUNNING, FAILED)
    assert "cirrus (cirrus-state)" in card.stdout
    assert CIRRUS_ERROR in card.stdout


def test_stuck_says_running_in_cirrus_and_failed_in_cirrus(cirrus_at_work: str) -> None:
    def both_held() -> dict[str, Any] | None:
        # --all: the lost-event waiter's row names no parent execution
        shown = json.loads(cli("stuck", "--older-than", "1s", "--all", "--json").stdout)
        holds = {
            hold["payload_id"]: hold
            for parent in shown["parents"]
            for hold in parent["dependencies"]
        }
        return holds if {RUNNING, FAILED} <= holds.keys() else None

    holds: dict[str, Any] = wait_until(both_held, timeout=30, every=0.5)
    run = cirrus_at_work.split(":", 6)[-1]
    assert holds[RUNNING]["reason"] == f"running in cirrus (PROCESSING, {run})"
    assert holds[FAILED]["reason"] == "FAILED in cirrus, waiter not resolved"
    assert holds[FAILED]["last_error"] == CIRRUS_ERROR
    table = CliRunner().invoke(app, ["stuck", "--older-than", "1s", "--cirrus-prefix", "cirrus"])
    assert "running in cirrus" in table.stdout
    assert "not started" not in table.stdout


def test_graph_json_colours_the_payloads_with_cirrus_s_states(cirrus_at_work: str) -> None:
    shown = json.loads(cli("graph", "--format", "json", "--all").stdout)
    nodes = {node["label"]: node for node in shown["nodes"]}
    assert (nodes[RUNNING]["state"], nodes[RUNNING]["source"]) == ("PROCESSING", "cirrus")
    assert nodes[RUNNING]["execution_arn"] == cirrus_at_work
    assert (nodes[FAILED]["state"], nodes[FAILED]["last_error"]) == ("FAILED", CIRRUS_ERROR)


def test_publish_wait_follows_cirrus_to_each_payload_s_end(
    stack: EmbeddedStack, tmp_path: Path
) -> None:
    # GIVEN a payload cirrus will run to success, and one it will fail
    done, broken = (
        f"{COLLECTION}/workflow-succeed/published",
        f"{COLLECTION}/workflow-fail/published",
    )
    files = []
    for name, workflow in (("ok", "succeed"), ("bad", "fail")):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(member("published", workflow)), encoding="utf-8")
        files.append(str(path))
    # WHEN they are published and waited for (cirrus's table found through the stack's
    # outputs; the workflows checked against cirrus's machines, {cirrus prefix}-{workflow})
    waited = ("--wait", "--timeout", "60", "--json")
    result = CliRunner().invoke(app, ["publish", *files, *waited, "--stack-name", STACK_NAME])
    # THEN both end as cirrus's own Lambdas recorded them, and the failure exits 1
    assert result.exit_code == 1, result.output
    shown = {view["payload_id"]: view for view in json.loads(result.stdout)["payloads"]}
    assert {pid: (view["state"], view["source"]) for pid, view in shown.items()} == {
        done: ("SUCCEEDED", "cirrus"),
        broken: ("FAILED", "cirrus"),
    }
    assert shown[broken]["last_error"] == CIRRUS_ERROR
    assert result.stderr.endswith(f"did not succeed: {broken} (FAILED)\n")
    # AND the success published again is a replay, done at once
    again = cli("publish", files[0], *waited)
    (replayed,) = json.loads(again.stdout)["payloads"]
    assert (replayed["state"], replayed["updated_at"]) == ("SUCCEEDED", shown[done]["updated_at"])
    # AND a misspelt workflow is refused before anything is sent, with cirrus's names
    typo = tmp_path / "typo.json"
    typo.write_text(json.dumps(member("typo", "succed")), encoding="utf-8")
    refused = CliRunner().invoke(app, ["publish", str(typo), "--stack-name", STACK_NAME])
    assert refused.exit_code == 4, refused.output
    assert "did you mean 'succeed'?" in refused.stderr


def test_serve_cirrus_publishes_cirrus_s_outputs(tmp_path: Path) -> None:
    # GIVEN serve --cirrus on a free port, in this (the tier's) Python
    outputs_file = tmp_path / "outputs.json"
    served = subprocess.Popen(  # noqa: S603  (this interpreter, this package)
        [
            sys.executable,
            "-m",
            "dependency_tracker_cli",
            "serve",
            "--cirrus",
            "--port",
            "0",
            "--outputs-file",
            str(outputs_file),
            "--log-file",
            str(tmp_path / "serve.log"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # WHEN it is up
        wait_until(outputs_file.exists, timeout=120, every=0.2)
        outputs = json.loads(outputs_file.read_text(encoding="utf-8"))
        # THEN its outputs name cirrus's resources, for the other commands' --stack-name
        assert outputs["CirrusStateTableName"] == "cirrus-state"
        assert outputs["CirrusProcessQueueUrl"].endswith("/cirrus-process")
    finally:
        served.send_signal(signal.SIGINT)
        _, errors = served.communicate(timeout=60)
    assert served.returncode == 0, errors
