"""``publish --wait`` (and ``follow``'s dependencies) read payload state through the read model.

In cirrus mode cirrus-geo runs every payload and records its end in cirrus's
state table, never in the tracker's: ``publish --wait`` must follow cirrus's
table there, or a published payload never ends and ``--wait`` times out.
Cirrus's items are written as cirrus-geo 2.0.0's ``StateDB`` writes them
(``state_updated = "{STATE}_{iso}"``); "cirrus runs it" is the item written as
the message is sent.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pytest
from typer.testing import CliRunner

from dependency_tracker.cirrus.models import cirrus_key
from dependency_tracker.core import settings
from dependency_tracker.core.enums import PayloadState
from dependency_tracker_cli.__main__ import app
from dependency_tracker_cli.commands import publish as publish_command
from dependency_tracker_local.cirrus import _state_table_spec
from tests.conftest import PASS_WORKFLOW, ROLE_ARN, payload, payload_id

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from typer.testing import Result

    from tests.conftest import Aws

CIRRUS_TABLE = "cirrus-state"
EXECUTIONS = "arn:aws:states:us-east-1:123456789012:execution:cirrus-pass:"
EARLIER = "2026-01-01T00:00:00+00:00"
ERROR = "WorkflowFailed: the cirrus test workflow failed"


def cirrus_writes(
    aws: Aws, pid: str, state: PayloadState, run: str, *, at: str, error: str | None = None
) -> None:
    """cirrus's item as StateDB leaves it after ``run``: its state at ``at``, its error."""
    item: dict[str, Any] = {
        **{name: {"S": value} for name, value in cirrus_key(pid).items()},
        "created": {"S": EARLIER},
        "updated": {"S": at},
        "state_updated": {"S": f"{state.value}_{at}"},
        "executions": {"L": [{"S": f"{EXECUTIONS}{run}"}]},
    }
    if error is not None:
        item["last_error"] = {"S": error}
    aws.dynamodb.put_item(TableName=CIRRUS_TABLE, Item=item)


@pytest.fixture
def cirrus_table(aws: Aws, workflows: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Aws:
    """cirrus's state table beside the tracker's, named by the variable the Lambdas read.

    With cirrus's ``pass`` workflow (cirrus names its machines ``{prefix}-{workflow}``, its
    table ``{prefix}-state``): publish checks the workflow against cirrus's machines.
    """
    aws.dynamodb.create_table(**_state_table_spec(CIRRUS_TABLE))
    aws.sfn.create_state_machine(
        name=CIRRUS_TABLE.replace("-state", "-pass"),
        roleArn=ROLE_ARN,
        definition=json.dumps(PASS_WORKFLOW),
    )
    monkeypatch.setenv(settings.ENV_CIRRUS_STATE_TABLE, CIRRUS_TABLE)
    return aws


def runs_when_sent(monkeypatch: pytest.MonkeyPatch, effect: Callable[[], object]) -> None:
    """``effect`` happens once the messages are sent, as cirrus (or the tracker) runs them."""
    send = publish_command._send

    def sending(target: Any, publications: Any) -> None:
        send(target, publications)
        effect()

    monkeypatch.setattr(publish_command, "_send", sending)


def write(tmp_path: Path, name: str, document: Any) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(document))
    return str(path)


def publish(*args: str, timeout: float = 10) -> Result:
    return CliRunner().invoke(
        app, ["publish", *args, "--wait", "--timeout", str(timeout), "--poll", "0.05"]
    )


def test_publish_wait_sees_each_payload_end_in_cirrus_s_state_table(
    cirrus_table: Aws, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a payload cirrus never saw, and one it failed before (cirrus reruns it)
    fresh, again = payload_id("fresh"), payload_id("again")
    cirrus_writes(cirrus_table, again, PayloadState.FAILED, "run-1", at=EARLIER, error=ERROR)

    def cirrus_runs_them() -> None:
        now = datetime.now(UTC).isoformat()
        cirrus_writes(cirrus_table, fresh, PayloadState.SUCCEEDED, "run-1", at=now)
        cirrus_writes(cirrus_table, again, PayloadState.SUCCEEDED, "run-2", at=now)

    runs_when_sent(monkeypatch, cirrus_runs_them)
    # WHEN both are published and waited for in cirrus mode (the variable names the table)
    files = [write(tmp_path, f"{n}.json", payload(n)) for n in ("fresh", "again")]
    result = publish(*files, "--json")
    # THEN both end, as cirrus recorded them, and nothing times out
    assert result.exit_code == 0, result.output
    shown = {view["payload_id"]: view for view in json.loads(result.stdout)["payloads"]}
    assert {pid: view["state"] for pid, view in shown.items()} == {
        fresh: "SUCCEEDED",
        again: "SUCCEEDED",
    }
    assert {view["source"] for view in shown.values()} == {"cirrus"}
    assert shown[again]["execution_arn"] == f"{EXECUTIONS}run-2"


def test_a_failure_in_cirrus_exits_1_naming_the_payload(
    cirrus_table: Aws, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = payload_id("broken")

    def cirrus_fails_it() -> None:
        at = datetime.now(UTC).isoformat()
        cirrus_writes(cirrus_table, broken, PayloadState.FAILED, "run-1", at=at, error=ERROR)

    runs_when_sent(monkeypatch, cirrus_fails_it)
    source = write(tmp_path, "broken.json", payload("broken"))
    result = publish(source, "--cirrus-prefix", "cirrus", "--json")
    assert result.exit_code == 1, result.output
    (view,) = json.loads(result.stdout)["payloads"]
    assert (view["state"], view["last_error"]) == ("FAILED", ERROR)
    assert result.stderr == f"error: 1 of 1 payload(s) did not succeed: {broken} (FAILED)\n"


def test_an_old_end_in_cirrus_is_a_replay_or_not_this_submission_s_end(
    cirrus_table: Aws, tmp_path: Path
) -> None:
    # GIVEN a payload cirrus finished before, and one it failed before
    done, failed = payload_id("done"), payload_id("failed")
    cirrus_writes(cirrus_table, done, PayloadState.SUCCEEDED, "run-1", at=EARLIER)
    cirrus_writes(cirrus_table, failed, PayloadState.FAILED, "run-1", at=EARLIER, error=ERROR)
    # WHEN each is published again and nothing runs
    replayed = publish(write(tmp_path, "done.json", payload("done")))
    rerun = publish(write(tmp_path, "failed.json", payload("failed")), timeout=0.3)
    # THEN the success is replayed at once; the failure is not this submission's end
    assert replayed.exit_code == 0, replayed.output
    assert "SUCCEEDED" in replayed.stdout
    assert rerun.exit_code == 1, rerun.output
    assert rerun.stderr == f"error: timed out after 0.3 s; not finished: {failed}\n"


def test_publish_wait_still_reads_the_tracker_s_table_in_normal_mode(
    aws: Aws, workflows: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs_when_sent(monkeypatch, lambda: aws.finished_payload(payload("a"), PayloadState.SUCCEEDED))
    result = publish(write(tmp_path, "a.json", payload("a")), "--json")
    assert result.exit_code == 0, result.output
    (view,) = json.loads(result.stdout)["payloads"]
    assert (view["payload_id"], view["state"], view["source"], view["attempt"]) == (
        payload_id("a"),
        "SUCCEEDED",
        "tracker",
        1,
    )


def test_follow_shows_the_dependencies_states_from_cirrus(cirrus_table: Aws) -> None:
    # GIVEN a parent that waited on a payload cirrus ran to its end
    machine = cirrus_table.create_workflow("wait-for-dependencies", PASS_WORKFLOW)
    started = cirrus_table.sfn.start_execution(
        stateMachineArn=machine, name="p-1", input=json.dumps({"dependencies": [payload("a")]})
    )
    cirrus_table.wait_for_execution(str(started["executionArn"]))
    at = datetime.now(UTC).isoformat()
    cirrus_writes(cirrus_table, payload_id("a"), PayloadState.SUCCEEDED, "run-1", at=at)
    # WHEN it is followed in cirrus mode
    result = CliRunner().invoke(app, ["follow", "p-1", "--cirrus-prefix", "cirrus", "--json"])
    # THEN its dependency's state is cirrus's, not "no state item"
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["dependencies"] == [
        {"payload_id": payload_id("a"), "state": "SUCCEEDED"}
    ]
