"""One read model for both modes: the tracker's state table, or cirrus's (on moto).

cirrus's items are written the way cirrus-geo 2.0.0's ``StateDB`` writes them
(``state_updated = "{STATE}_{iso}"``, ``executions`` appended at each claim,
``last_error`` on failure); tests/cirrus/test_cli_cirrus.py shows the same
commands on items cirrus's own Lambdas wrote.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest
from typer.testing import CliRunner

from dependency_tracker.cirrus.models import cirrus_key
from dependency_tracker.core import settings
from dependency_tracker.core.enums import PayloadState
from dependency_tracker.core.errors import PayloadNotFoundError
from dependency_tracker.table.items import InvalidMessageItem, WaiterItem, waiter_id_for
from dependency_tracker_cli.__main__ import app
from dependency_tracker_cli.readmodel import (
    CirrusReader,
    PayloadSource,
    TrackerReader,
)
from dependency_tracker_cli.target import ConnectionOptions, Target
from dependency_tracker_local.cirrus import _state_table_spec
from tests.conftest import payload, payload_id
from tests.unit.cli.parents import running_parent
from tests.unit.cli.rows import token

if TYPE_CHECKING:
    from tests.conftest import Aws

CIRRUS_TABLE = "cirrus-state"
EXECUTIONS = "arn:aws:states:us-east-1:123456789012:execution:cirrus-pass:"
RUNNING = payload_id("running")
FAILED = payload_id("failed")
ERROR = "WorkflowFailed: the cirrus test workflow failed"


def cirrus_writes(
    dynamodb: Any, pid: str, state: PayloadState, runs: int, *, error: str | None = None
) -> None:
    """cirrus's item as StateDB leaves it: the state, every run claimed, the last error."""
    now = datetime.now(UTC).isoformat()
    item: dict[str, Any] = {
        **{name: {"S": value} for name, value in cirrus_key(pid).items()},
        "created": {"S": "2026-11-23T00:00:00+00:00"},
        "updated": {"S": now},
        "state_updated": {"S": f"{state.value}_{now}"},
        "executions": {"L": [{"S": f"{EXECUTIONS}run-{n}"} for n in range(1, runs + 1)]},
    }
    if error is not None:
        item["last_error"] = {"S": error}
    dynamodb.put_item(TableName=CIRRUS_TABLE, Item=item)


@pytest.fixture
def cirrus_table(aws: Aws) -> Aws:
    """A cirrus state table beside the tracker's: one payload running, one failed."""
    aws.dynamodb.create_table(**_state_table_spec(CIRRUS_TABLE))
    cirrus_writes(aws.dynamodb, RUNNING, PayloadState.PROCESSING, 1)
    cirrus_writes(aws.dynamodb, FAILED, PayloadState.FAILED, 2, error=ERROR)
    return aws


def waits_on(aws: Aws, pid: str, parent: str, execution: str | None = None) -> None:
    """``parent`` (``execution``) has waited on ``pid`` for an hour."""
    since = datetime.now(UTC) - timedelta(hours=1)
    assert aws.dependencies.register(
        WaiterItem(
            payload_id=pid,
            waiter_id=waiter_id_for(token(parent)),
            task_token=token(parent),
            workflow_state=PayloadState.PROCESSING,
            created_at=since,
            updated_at=since,
            waiter_payload_id=parent,
            parent_execution=execution,
        )
    )


# ---------------------------------------------------------------- the readers


def test_the_tracker_reader_views_its_own_state_items(aws: Aws) -> None:
    # GIVEN a payload the tracker ran and failed
    aws.finished_payload(payload("a"), PayloadState.FAILED, error="TaskFailed", cause="boom")
    # WHEN it and an unknown id are read in one batch
    found = TrackerReader(aws.states).get_many([payload_id("a"), "no/such/id"])
    # THEN the known one is there, as the tracker recorded it, and the unknown one is not
    assert list(found) == [payload_id("a")]
    view = found[payload_id("a")]
    assert view.source is PayloadSource.TRACKER
    assert (view.state, view.attempt, view.last_error, view.last_cause) == (
        PayloadState.FAILED,
        1,
        "TaskFailed",
        "boom",
    )
    assert (view.workflow, view.collections) == ("pass", "sentinel-2-l2a")


def test_the_cirrus_reader_shows_cirrus_running_and_failed_payloads(cirrus_table: Aws) -> None:
    # GIVEN cirrus's table with one payload running and one failed on its second run
    reader = CirrusReader(cirrus_table.dynamodb, CIRRUS_TABLE, TrackerReader(cirrus_table.states))
    # WHEN both are read in one batch
    found = reader.get_many([RUNNING, FAILED])
    # THEN each is cirrus's view: its state, its runs, its error text, and no attempt count
    running, failed = found[RUNNING], found[FAILED]
    assert running.source is PayloadSource.CIRRUS
    assert running.table == CIRRUS_TABLE
    assert (running.state, running.running, running.attempt) == (
        PayloadState.PROCESSING,
        True,
        None,
    )
    assert running.last_execution == f"{EXECUTIONS}run-1"
    assert running.created_at == datetime(2026, 11, 23, tzinfo=UTC)
    assert running.finished_at is None
    assert (failed.state, failed.last_error, failed.last_cause) == (
        PayloadState.FAILED,
        ERROR,
        None,
    )
    assert failed.executions == [f"{EXECUTIONS}run-1", f"{EXECUTIONS}run-2"]
    assert failed.finished_at == failed.updated_at
    assert (failed.workflow, failed.collections) == ("pass", "sentinel-2-l2a")


def test_the_cirrus_reader_falls_back_to_the_tracker_for_what_cirrus_never_saw(
    cirrus_table: Aws,
) -> None:
    # GIVEN a message the tracker refused (its record is in the tracker's table only), and an
    # id cirrus could not key at all
    now = datetime.now(UTC)
    refused = payload_id("refused")
    assert cirrus_table.states.record_invalid(
        InvalidMessageItem(
            payload_id=refused,
            created_at=now,
            updated_at=now,
            finished_at=now,
            last_error="not a payload",
            body_excerpt="{}",
            expiration_time=int(now.timestamp()) + 3600,
        )
    )
    reader = CirrusReader(cirrus_table.dynamodb, CIRRUS_TABLE, TrackerReader(cirrus_table.states))
    # WHEN they are read with a cirrus payload
    found = reader.get_many([RUNNING, refused, "workflow-pass/key-abc"])
    # THEN cirrus's payload comes from cirrus, the refused one from the tracker
    assert {pid: view.source for pid, view in found.items()} == {
        RUNNING: PayloadSource.CIRRUS,
        refused: PayloadSource.TRACKER,
    }
    assert found[refused].state is PayloadState.INVALID


def test_the_mode_comes_from_the_option_the_outputs_or_the_variable() -> None:
    target = Target(ConnectionOptions())
    target.__dict__["outputs"] = {}
    assert target.cirrus_state_table is None
    target.use_cirrus(prefix=None, state_table="from-variable")
    assert target.cirrus_state_table == "from-variable"
    target.__dict__["outputs"] = {"CirrusStateTableName": "from-outputs"}
    target.__dict__.pop("names", None)
    assert target.cirrus_state_table == "from-outputs"
    target.use_cirrus(prefix="mine", state_table="from-variable")
    assert target.cirrus_state_table == "mine-state"


# ---------------------------------------------------------------- the commands


def test_status_shows_what_cirrus_runs_instead_of_not_found(cirrus_table: Aws) -> None:
    # GIVEN a payload cirrus is running: the tracker's own table has no item for it
    plain = CliRunner().invoke(app, ["status", RUNNING])
    assert plain.exit_code == PayloadNotFoundError.exit_code
    # WHEN status reads in cirrus mode
    shown = CliRunner().invoke(app, ["status", RUNNING, FAILED, "--cirrus-prefix", "cirrus"])
    # THEN both are found, running and failed, with cirrus's error
    assert shown.exit_code == 0, shown.output
    assert "PROCESSING" in shown.stdout
    assert "cirrus (cirrus-state)" in shown.stdout
    assert ERROR in shown.stdout
    as_json = CliRunner().invoke(
        app, ["status", RUNNING, FAILED, "--cirrus-prefix", "cirrus", "--json"]
    )
    views = {view["payload_id"]: view for view in json.loads(as_json.stdout)}
    assert views[RUNNING]["state"] == "PROCESSING"
    assert views[RUNNING]["source"] == "cirrus"
    assert views[RUNNING]["attempt"] is None
    assert views[RUNNING]["execution_arn"] == f"{EXECUTIONS}run-1"
    assert views[FAILED]["last_error"] == ERROR


def test_the_variable_turns_cirrus_mode_on(
    cirrus_table: Aws, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(settings.ENV_CIRRUS_STATE_TABLE, CIRRUS_TABLE)
    shown = CliRunner().invoke(app, ["status", RUNNING, "--json"])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout)[0]["source"] == "cirrus"


def test_stuck_says_a_payload_is_running_in_cirrus_not_that_it_never_started(
    cirrus_table: Aws,
) -> None:
    # GIVEN a parent that has waited an hour on a payload cirrus is running, one it failed,
    # and one cirrus has not taken yet
    execution = running_parent(cirrus_table, "parent")
    waits_on(cirrus_table, RUNNING, "parent", execution)
    waits_on(cirrus_table, FAILED, "parent", execution)
    waits_on(cirrus_table, payload_id("queued"), "parent", execution)
    # WHEN stuck reads in cirrus mode
    result = CliRunner().invoke(
        app, ["stuck", "--older-than", "30m", "--cirrus-prefix", "cirrus", "--json"]
    )
    # THEN each reason is cirrus's, and none says "not started ... redrive"
    assert result.exit_code == 0, result.output
    (parent,) = json.loads(result.stdout)["parents"]
    holds = {hold["payload_id"]: hold for hold in parent["dependencies"]}
    assert holds[RUNNING]["reason"] == "running in cirrus (PROCESSING, cirrus-pass:run-1)"
    assert holds[RUNNING]["state"] == "PROCESSING"
    assert holds[FAILED]["reason"] == "FAILED in cirrus, waiter not resolved"
    assert holds[FAILED]["last_error"] == ERROR
    assert holds[payload_id("queued")]["reason"].startswith("no item in cirrus's state table")
    assert "not started" not in result.stdout
    table = CliRunner().invoke(app, ["stuck", "--older-than", "30m", "--cirrus-prefix", "cirrus"])
    assert "running in cirrus" in table.stdout


def test_graph_and_waiters_read_cirrus_state(cirrus_table: Aws) -> None:
    waits_on(cirrus_table, RUNNING, "parent")
    waits_on(cirrus_table, FAILED, "parent")
    result = CliRunner().invoke(app, ["graph", "--format", "json", "--cirrus-prefix", "cirrus"])
    assert result.exit_code == 0, result.output
    nodes = {node["label"]: node for node in json.loads(result.stdout)["nodes"]}
    assert (nodes[RUNNING]["state"], nodes[RUNNING]["source"]) == ("PROCESSING", "cirrus")
    assert (nodes[FAILED]["state"], nodes[FAILED]["last_error"]) == ("FAILED", ERROR)
    # A payload only cirrus knows, with nobody waiting, is known (not a typo)
    cirrus_writes(cirrus_table.dynamodb, payload_id("alone"), PayloadState.SUCCEEDED, 1)
    alone = CliRunner().invoke(app, ["waiters", payload_id("alone"), "--cirrus-prefix", "cirrus"])
    assert alone.exit_code == 0, alone.output
    assert alone.stdout.startswith("nobody waits on")
