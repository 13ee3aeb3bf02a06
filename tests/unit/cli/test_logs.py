"""``logs``: the handlers' CloudWatch log lines naming a payload (on moto's logs backend)."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

import boto3
from typer.testing import CliRunner

from dependency_tracker_cli.__main__ import app
from dependency_tracker_cli.commands.logs import filter_pattern, names_payload
from dependency_tracker_cli.target import ResourceNames

if TYPE_CHECKING:
    from tests.conftest import Aws

PID = "s2/workflow-cog/tile-1"


def record(message: str, **fields: Any) -> str:
    """A Powertools-like JSON record."""
    return json.dumps({"level": "INFO", "message": message, **fields})


def put(group: str, *events: tuple[int, str]) -> None:
    logs = boto3.client("logs")
    logs.create_log_group(logGroupName=group)
    logs.create_log_stream(logGroupName=group, logStreamName="2026/01/01/[$LATEST]abc")
    logs.put_log_events(
        logGroupName=group,
        logStreamName="2026/01/01/[$LATEST]abc",
        logEvents=[{"timestamp": stamp, "message": text} for stamp, text in events],
    )


def test_lines_naming_the_payload_come_from_every_handler_group_in_time_order(aws: Aws) -> None:
    # GIVEN the process and update-state groups, with lines about the payload, about a
    # payload whose id starts with it, and one older than --since
    now = int(time.time() * 1000)
    put(
        "/aws/lambda/deptrack-process",
        (now - 3 * 3_600_000, record("long ago", correlation_id=PID)),
        (now - 5_000, record("claimed", correlation_id=PID)),
        (now - 4_000, record("claimed", correlation_id=f"{PID}0")),
    )
    put("/aws/lambda/deptrack-update-state", (now - 2_000, record(f"recorded FAILED for {PID}")))
    # WHEN the payload's logs of the last hour are asked for, as JSON
    result = CliRunner().invoke(app, ["logs", PID, "--json"])
    # THEN one object a line, oldest first, from both groups, and nothing else
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(line["function"], line["record"]["message"]) for line in lines] == [
        ("deptrack-process", "claimed"),
        ("deptrack-update-state", f"recorded FAILED for {PID}"),
    ]
    # AND --since reaches the older line; the table form names level and message
    older = CliRunner().invoke(app, ["logs", PID, "--since", "4h"])
    assert older.exit_code == 0, older.output
    assert len(older.stdout.splitlines()) == 3
    assert "deptrack-process INFO long ago" in older.stdout


def test_no_line_is_a_note_not_an_error(aws: Aws) -> None:
    put("/aws/lambda/deptrack-callback", (int(time.time() * 1000), record("other")))
    result = CliRunner().invoke(app, ["logs", PID])
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    assert "no log line names" in result.stderr


def test_no_log_group_at_all_is_an_error_with_a_hint(aws: Aws) -> None:
    result = CliRunner().invoke(app, ["logs", PID])
    assert result.exit_code == 1
    assert "/aws/lambda/deptrack-process" in result.stderr
    assert "hint:" in result.stderr


def test_an_id_matches_whole_and_in_its_json_spelling() -> None:
    assert names_payload(f'{{"correlation_id": "{PID}"}}', PID)
    assert not names_payload(f'{{"correlation_id": "{PID}0"}}', PID)
    assert not names_payload(f"x{PID}", PID)
    odd = 'a"b/workflow-w/é'
    assert names_payload(json.dumps({"id": odd}), odd)
    assert filter_pattern(PID) == f'"{PID}"'
    assert filter_pattern(odd).startswith("?")


def test_log_groups_follow_the_outputs_function_names_else_the_prefix() -> None:
    names = ResourceNames.from_outputs({"ProcessFunctionName": "stk-proc"}, prefix="abc")
    assert names.log_groups[:2] == ("/aws/lambda/stk-proc", "/aws/lambda/abc-update-state")
