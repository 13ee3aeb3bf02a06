"""``list``: payloads and waiter rows by state, workflow, collection, age and error, paged."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest
from typer.testing import CliRunner

from dependency_tracker.cirrus.models import cirrus_key
from dependency_tracker.core.enums import PayloadState
from dependency_tracker.table.items import PayloadStateItem
from dependency_tracker_cli.__main__ import app
from dependency_tracker_cli.readmodel.paging import decode_token, encode_token
from dependency_tracker_local.cirrus import _state_table_spec
from tests.conftest import STATE_TABLE, moto_query_page
from tests.unit.cli.rows import waiter

if TYPE_CHECKING:
    from tests.conftest import Aws

NOW = datetime.now(UTC)
CIRRUS_TABLE = "cirrus-state"


def cirrus_writes(aws: Aws, pid: str, state: PayloadState, *, error: str | None = None) -> None:
    """cirrus's item as its StateDB writes it."""
    now = NOW.isoformat()
    item: dict[str, Any] = {
        **{name: {"S": value} for name, value in cirrus_key(pid).items()},
        "created": {"S": now},
        "updated": {"S": now},
        "state_updated": {"S": f"{state.value}_{now}"},
    }
    if error is not None:
        item["last_error"] = {"S": error}
    aws.dynamodb.put_item(TableName=CIRRUS_TABLE, Item=item)


def state_item(
    aws: Aws,
    pid: str,
    state: PayloadState,
    *,
    workflow: str = "cog",
    age: timedelta = timedelta(minutes=1),
    error: str | None = None,
    cause: str | None = None,
) -> None:
    """A tracker state item last changed ``age`` ago."""
    when = NOW - age
    item = PayloadStateItem(
        payload_id=pid,
        state=state,
        workflow=workflow,
        attempt=1,
        created_at=when,
        updated_at=when,
        last_error=error,
        last_cause=cause,
    )
    aws.dynamodb.put_item(TableName=STATE_TABLE, Item=item.to_item())


def listed(*args: str) -> dict[str, Any]:
    result = CliRunner().invoke(app, ["list", *args, "--json"])
    assert result.exit_code == 0, result.output
    shown: dict[str, Any] = json.loads(result.stdout)
    return shown


def ids(shown: dict[str, Any], key: str = "payloads") -> list[str]:
    return sorted(row["payload_id"] for row in shown[key])


@pytest.fixture
def mixed(aws: Aws) -> Aws:
    """Five payloads: failed recently and long ago, another workflow, a success, a timeout."""
    state_item(aws, "s2/workflow-cog/a", PayloadState.FAILED, error="TaskFailed", cause="boom")
    state_item(aws, "s2/workflow-cog/b", PayloadState.FAILED, age=timedelta(hours=3))
    state_item(aws, "l8/workflow-ndvi/c", PayloadState.FAILED, workflow="ndvi")
    state_item(aws, "s2/workflow-cog/d", PayloadState.SUCCEEDED)
    state_item(aws, "s2/workflow-cog/e", PayloadState.ABORTED, error="States.Timeout")
    return aws


def test_every_filter_selects_what_it_names(mixed: Aws) -> None:
    # GIVEN payloads in several states, workflows, collections, ages and errors
    # WHEN they are listed with each filter
    # THEN each filter keeps exactly the payloads it names
    assert ids(listed("--state", "FAILED", "--workflow", "cog")) == [
        "s2/workflow-cog/a",
        "s2/workflow-cog/b",
    ]
    assert ids(listed("--state", "failed", "--state", "ABORTED", "--collection", "s2")) == [
        "s2/workflow-cog/a",
        "s2/workflow-cog/b",
        "s2/workflow-cog/e",
    ]
    assert ids(listed("--older-than", "1h")) == ["s2/workflow-cog/b"]
    assert len(ids(listed("--newer-than", "1h"))) == 4
    assert ids(listed("--error", "boom")) == ["s2/workflow-cog/a"]
    assert ids(listed("--error", "Timeout")) == ["s2/workflow-cog/e"]
    assert ids(listed("--collection", "l8")) == ["l8/workflow-ndvi/c"]


def test_a_payload_row_carries_the_read_model_view(mixed: Aws) -> None:
    # GIVEN a failed payload
    # WHEN it is listed as JSON
    shown = listed("--error", "boom")
    # THEN its row is status's view of it, and nothing remains
    (row,) = shown["payloads"]
    assert (row["state"], row["workflow"], row["last_error"], row["last_cause"]) == (
        "FAILED",
        "cog",
        "TaskFailed",
        "boom",
    )
    assert shown["next_token"] is None
    assert shown["max_pages_reached"] is False


def test_pages_follow_each_other_with_the_printed_next_token(aws: Aws) -> None:
    # GIVEN seven failed payloads
    for index in range(7):
        state_item(aws, f"s2/workflow-cog/{index}", PayloadState.FAILED)
    # WHEN they are listed three at a time, following the next token
    seen: list[str] = []
    token: str | None = None
    pages = 0
    while True:
        shown = listed("--limit", "3", *(["--next-token", token] if token else []))
        seen += ids(shown)
        pages += 1
        token = shown["next_token"]
        if token is None:
            break
    # THEN every payload comes once, in three pages
    assert sorted(seen) == [f"s2/workflow-cog/{index}" for index in range(7)]
    assert pages == 3


def test_the_table_prints_the_next_token_when_more_remain(mixed: Aws) -> None:
    # GIVEN five payloads
    # WHEN two are listed as a table
    result = CliRunner().invoke(app, ["list", "--limit", "2"])
    # THEN the table shows two and the last line says how to go on
    assert result.exit_code == 0, result.output
    last = result.stdout.strip().splitlines()[-1]
    assert last.startswith("more remain: --next-token ")
    assert "2 payload(s)" in result.stdout


def test_max_pages_stops_a_long_scan_with_a_note_and_a_token(aws: Aws) -> None:
    # GIVEN many payloads that do not match, and one that does, read one small page at a time
    for index in range(12):
        state_item(aws, f"s2/workflow-cog/{index:02d}", PayloadState.SUCCEEDED)
    state_item(aws, "s2/workflow-cog/failed", PayloadState.FAILED)
    with moto_query_page(400):
        # WHEN a filtered listing may read only two pages
        result = CliRunner().invoke(
            app, ["list", "--state", "FAILED", "--max-pages", "2", "--json"]
        )
        # THEN it stops there, says so on stderr, and hands a token to go on with
        assert result.exit_code == 0, result.output
        shown = json.loads(result.stdout)
        assert shown["max_pages_reached"] is True
        assert shown["pages_scanned"] == 2
        assert "--max-pages" in result.stderr
        found = ids(shown)
        token = shown["next_token"]
        while token is not None:
            more = listed("--state", "FAILED", "--next-token", token, "--max-pages", "2")
            found += ids(more)
            token = more["next_token"]
    # AND following the tokens finds the failed payload
    assert found == ["s2/workflow-cog/failed"]


def test_a_token_the_command_did_not_print_is_a_usage_error(aws: Aws) -> None:
    # GIVEN an empty table
    # WHEN a listing goes on from garbage, or from another table's key
    garbage = CliRunner().invoke(app, ["list", "--next-token", "not-a-token!"])
    other = encode_token({"collections_workflow": {"S": "a"}, "itemids": {"S": "b"}})
    wrong = CliRunner().invoke(app, ["list", "--next-token", other])
    # THEN both exit 2 naming the option
    assert garbage.exit_code == 2
    assert wrong.exit_code == 2
    assert "--next-token" in garbage.output
    assert "--next-token" in wrong.output


def test_a_token_round_trips_a_key() -> None:
    key = {"payload_id": {"S": "s2/workflow-cog/é?&="}}
    token = encode_token(key)
    assert "=" not in token
    assert decode_token(token, ("payload_id",)) == key


def test_waiters_are_listed_by_state_age_and_workflow(aws: Aws) -> None:
    # GIVEN waiters: one waiting for long on a cog payload, one notified, one on ndvi
    for row in (
        waiter("s2/workflow-cog/a", "old", parent="p1", age=timedelta(hours=5)),
        waiter("s2/workflow-cog/a", "done", state=PayloadState.SUCCEEDED, notified=True),
        waiter("l8/workflow-ndvi/c", "new", parent="p2", age=timedelta(minutes=1)),
    ):
        assert aws.dependencies.register(row)
    # WHEN waiter rows are listed with filters
    processing = listed("--waiters", "--state", "PROCESSING")
    cog = listed("--waiters", "--workflow", "cog", "--state", "PROCESSING")
    # THEN each filter keeps what it names, and no token leaks
    assert ids(processing, "waiters") == ["l8/workflow-ndvi/c", "s2/workflow-cog/a"]
    assert [row["waiter_payload_id"] for row in cog["waiters"]] == ["p1"]
    assert "very-secret" not in json.dumps(processing)
    assert all(row["waiter"].startswith("sha256:") for row in processing["waiters"])


def test_cirrus_mode_lists_cirrus_s_items(aws: Aws) -> None:
    # GIVEN cirrus's table with a failed and a running payload of different workflows
    aws.dynamodb.create_table(**_state_table_spec(CIRRUS_TABLE))
    cirrus_writes(aws, "s2/workflow-cog/x", PayloadState.FAILED, error="Boom: bad")
    cirrus_writes(aws, "s2/workflow-ndvi/y", PayloadState.PROCESSING)
    # WHEN the failed cog payloads are listed in cirrus mode
    shown = listed(
        "--cirrus-prefix", "cirrus", "--state", "FAILED", "--workflow", "cog", "--error", "Boom"
    )
    # THEN cirrus's item is there, as cirrus's view
    (row,) = shown["payloads"]
    assert (row["payload_id"], row["source"], row["collections"]) == (
        "s2/workflow-cog/x",
        "cirrus",
        "s2",
    )
    assert ids(listed("--cirrus-prefix", "cirrus", "--state", "PROCESSING")) == [
        "s2/workflow-ndvi/y"
    ]
