"""Narrow terminals: tables never cut an id in the middle; they turn into blocks instead."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import pytest
from rich.console import Console
from rich.table import Table
from typer.testing import CliRunner

from dependency_tracker.core.enums import PayloadState
from dependency_tracker.table.items import PayloadStateItem
from dependency_tracker_cli import render
from dependency_tracker_cli.__main__ import app
from dependency_tracker_cli.views import PAYLOAD_TABLE_KEYS, payload_table
from tests.conftest import payload, payload_id

if TYPE_CHECKING:
    from tests.conftest import Aws

LONG_ID = "sentinel-2-l2a/workflow-simulate/S2B_MSIL2A_20240101T101010_N0510_R022_T32TQM"
ARN = f"arn:aws:states:us-east-1:123456789012:execution:deptrack-simulate:{'x' * 80}"


def printed(table: Table, width: int, keys: tuple[int, ...] = (0,)) -> str:
    out = io.StringIO()
    render.print_table(Console(width=width, file=out, color_system=None), table, keys=keys)
    return out.getvalue()


def results_table() -> Table:
    table = Table(title="results")
    for column in ("payload", "state", "last error"):
        table.add_column(column)
    table.add_row(LONG_ID, "FAILED", "TaskFailed: the simulated task failed on purpose")
    table.add_row("short/id", "SUCCEEDED", "—")
    return table


def test_a_table_that_fits_is_a_table_with_its_ids_whole() -> None:
    # GIVEN a results table, on a wide terminal
    # WHEN it is printed
    text = printed(results_table(), 160)
    # THEN it is a table, and the id sits whole on one line
    assert text.lstrip().startswith("results")
    assert "┃ payload" in text
    assert LONG_ID in text


def test_at_width_60_each_row_becomes_a_block_and_no_id_is_broken() -> None:
    # GIVEN the same table, on a 60-column terminal
    # WHEN it is printed
    text = printed(results_table(), 60)
    lines = text.splitlines()
    # THEN no table lines, each id heads its block whole, and the fields follow as lines
    assert "┃" not in text
    assert LONG_ID in lines
    assert "short/id" in lines
    assert "    state: FAILED" in lines
    assert "    last error: TaskFailed: the simulated task failed on purpose" in lines
    assert "    state: SUCCEEDED" in lines


def test_a_row_continuing_a_block_adds_its_fields_under_the_same_heading() -> None:
    # GIVEN a stuck-like table: one parent, two dependencies, the parent named once
    table = Table(title="stuck")
    for column in ("parent", "dependency", "why"):
        table.add_column(column)
    table.add_row("parent/1", LONG_ID, "running")
    table.add_row("", "other/dependency", "not started (no state item)")
    # WHEN it is printed narrow
    lines = printed(table, 60, keys=(0, 1)).splitlines()
    # THEN one heading, then both dependencies with their reasons, in order
    assert lines.count("parent/1") == 1
    assert lines[lines.index("parent/1") + 1 :] == [
        f"    dependency: {LONG_ID}",
        "    why: running",
        "    dependency: other/dependency",
        "    why: not started (no state item)",
    ]


def test_a_card_too_narrow_for_an_arn_becomes_field_lines() -> None:
    # GIVEN a status card holding an execution ARN longer than the terminal
    card = Table(title=LONG_ID, show_header=False)
    card.add_column("field")
    card.add_column("value")
    card.add_row("state", "SUCCEEDED")
    card.add_row("executions (2)", f"{ARN}\n{ARN}-2")
    # WHEN it is printed at width 60
    lines = printed(card, 60, keys=()).splitlines()
    # THEN the title and every ARN are whole lines (the terminal wraps them, Rich does not)
    assert lines == [
        LONG_ID,
        "    state: SUCCEEDED",
        f"    executions (2): {ARN}",
        f"        {ARN}-2",
    ]


@pytest.mark.parametrize("json_output", [False, True])
def test_status_at_width_60_keeps_the_payload_id_and_arns_whole(
    aws: Aws, monkeypatch: pytest.MonkeyPatch, json_output: bool
) -> None:
    # GIVEN a finished payload, and a 60-column terminal (COLUMNS, as a shell sets it)
    aws.finished_payload(payload("a"), PayloadState.SUCCEEDED, execution_arn=ARN)
    monkeypatch.setattr(render, "_MIN_WIDTH_OFF_TERMINAL", 0)
    # WHEN status shows it
    args = ["status", payload_id("a")] + (["--json"] if json_output else [])
    result = CliRunner().invoke(app, args, env={"COLUMNS": "60"})
    # THEN the id and the ARN appear whole; --json is unaffected
    assert result.exit_code == 0, result.output
    if json_output:
        assert json.loads(result.stdout)[0]["execution_arn"] == ARN
    else:
        assert payload_id("a") in result.stdout.splitlines()
        assert f"    executions (1): {ARN}" in result.stdout.splitlines()


ID_120 = ("sentinel-2-l2a/workflow-simulate/" + "S2B_MSIL2A_20240101T101010_T32TQM_" * 3)[:120]
EXECUTION = f"arn:aws:states:us-east-1:123456789012:execution:deptrack-simulate:{'e' * 70}"


@pytest.mark.parametrize("width", [80, 160, 300])
def test_the_payload_table_never_cuts_a_payload_id_or_an_execution_name(width: int) -> None:
    # GIVEN publish --wait's results: a 120-character payload id and a 70-character execution
    assert len(ID_120) == 120
    now = datetime(2026, 1, 1, tzinfo=UTC)
    item = PayloadStateItem(
        payload_id=ID_120,
        state=PayloadState.SUCCEEDED,
        workflow="simulate",
        attempt=1,
        execution_arn=EXECUTION,
        executions=[EXECUTION],
        created_at=now,
        updated_at=now,
    )
    table = payload_table([(ID_120, item), ("short/id", None)], title="results")
    # WHEN printed in an 80-column console, off a terminal (160) and wide
    text = printed(table, width, keys=PAYLOAD_TABLE_KEYS)
    # THEN nothing is cut: the id and the execution's name are whole, on one line each
    assert "…" not in text
    assert any(ID_120 in line for line in text.splitlines())
    assert any(f"deptrack-simulate:{'e' * 70}" in line for line in text.splitlines())


def waiters_like_table() -> Table:
    """A table shaped as ``waiters`` prints it: ids, then words a terminal may wrap."""
    table = Table(title="waiters on s2/workflow-cog/tile-1")
    for column in ("waiter", "parent execution", "since", "state", "notified", "error: cause"):
        table.add_column(column)
    table.add_row(
        "sha256:0123456789abcdef",
        "deptrack-wait-for-dependencies:mosaic-run-2026-11-28",
        "2026-11-28 19:42:56 (3m ago)",
        "PROCESSING",
        "not yet",
        "—",
    )
    table.add_row(
        f"join:{'ab' * 32}",
        "—",
        "2026-11-28 19:40:01 (6m ago)",
        "FAILED",
        "✓ 0s ago, SENT:FAILED",
        "QuorumUnreachable: 2 of 3 failed, 2 needed: members-failed-beyond-the-quorum",
    )
    return table


@pytest.mark.parametrize("width", range(100, 301, 8))
def test_no_width_cuts_a_word_of_any_cell(width: int) -> None:
    # GIVEN a waiters table, whose "since" and "state" Rich used to cut ("2026-11…",
    # "PROCESS…") at widths where every word fits
    words = {
        word
        for column in waiters_like_table().columns
        for cell in column.cells
        for word in str(cell).split()
    }
    # WHEN printed at any width
    text = printed(waiters_like_table(), width, keys=(0, 1))
    # THEN no line is wider than the console, nothing is cut, and every word is whole
    assert max(len(line) for line in text.splitlines()) <= width
    assert "…" not in text
    printed_words = set(text.replace("│", " ").replace("┃", " ").split())
    assert words <= printed_words, sorted(words - printed_words)
