"""sweeper handler: a scheduled event in, one bounded sweep, its findings as metrics."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest

from dependency_tracker.core import settings
from dependency_tracker.core.enums import PayloadState, utcnow
from dependency_tracker.core.observability import metrics
from dependency_tracker.handlers import sweeper as sweeper_handler
from dependency_tracker.sweeper.store import CURSOR_KEY
from dependency_tracker.table.items import PayloadStateItem, WaiterItem
from dependency_tracker_local.context import LocalContext
from dependency_tracker_local.pumps import scheduled_event
from tests.conftest import (
    ACCOUNT,
    DEPENDENCY_TABLE,
    REGION,
    STATE_TABLE,
    Aws,
    fresh_app,
    moto_query_page,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

BUCKET = "deptrack-payloads-test"
EVENT = scheduled_event(
    rule_arn=f"arn:aws:events:{REGION}:{ACCOUNT}:rule/deptrack-sweeper",
    region=REGION,
    account=ACCOUNT,
)


@pytest.fixture(autouse=True)
def fresh_flow(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The handler's flow is built per test, after the test's environment and moto.

    Metrics added outside a handler (flows run directly by other tests) are dropped:
    in Lambda each invocation publishes only its own.
    """
    monkeypatch.setenv(settings.ENV_PAYLOAD_BUCKET, BUCKET)
    fresh_app()
    metrics.clear_metrics()
    yield
    fresh_app()


def context(timeout_seconds: int = 120) -> LocalContext:
    return LocalContext("deptrack-sweeper", timeout_seconds=timeout_seconds)


def lost_row(number: int, age: timedelta = timedelta(hours=1)) -> dict[str, Any]:
    """A terminal, un-notified waiter row (its token is unknown to moto: parent gone)."""
    at = utcnow() - age
    return WaiterItem(
        payload_id=f"sweep/workflow-pass/handler-{number}",
        waiter_id=f"token#{number:04d}",
        task_token=f"TOKEN-{number}",
        workflow_state=PayloadState.SUCCEEDED,
        created_at=at,
        updated_at=at,
        resolved_at=at,
    ).to_item()


def emitted_metrics(out: str) -> dict[str, Any]:
    """The EMF blob Powertools printed for the invocation, with each metric summed."""
    (blob,) = [json.loads(line) for line in out.splitlines() if line.startswith('{"_aws"')]
    return {name: sum(value) if isinstance(value, list) else value for name, value in blob.items()}


def test_the_handler_sweeps_and_publishes_what_it_found(
    aws: Aws, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a row the stream left behind and a payload held two days (lease: one day)
    aws.s3.create_bucket(Bucket=BUCKET)
    aws.dynamodb.put_item(TableName=DEPENDENCY_TABLE, Item=lost_row(1))
    held = utcnow() - timedelta(days=2)
    stuck = PayloadStateItem(
        payload_id="sweep/workflow-pass/held",
        state=PayloadState.CLAIMED,
        workflow="pass",
        attempt=1,
        created_at=held,
        updated_at=held,
        claimed_at=held,
    )
    aws.dynamodb.put_item(TableName=STATE_TABLE, Item=stuck.to_item())
    # WHEN the schedule invokes the handler
    response = sweeper_handler.lambda_handler(EVENT, context())
    # THEN it answers with its report
    assert response["parents_gone"] == 1
    assert response["stuck_payloads"] == 1
    assert response["stuck_examples"] == [stuck.payload_id]
    assert response["passes_completed"] == ["dependencies", "states"]
    # and published one metric per finding, zeros included, for alarms to read
    blob = emitted_metrics(capsys.readouterr().out)
    assert blob["SweeperParentsGone"] == 1.0
    assert blob["SweeperStuckPayloads"] == 1.0
    assert blob["SweeperCallbacksSent"] == 0.0
    assert blob["SweeperCallbacksFailed"] == 0.0
    assert blob["SweeperRowsScanned"] == 2.0
    names = {metric["Name"] for metric in blob["_aws"]["CloudWatchMetrics"][0]["Metrics"]}
    assert {"SweeperCallbacksSent", "SweeperStuckPayloads", "SweeperReadUnits"} <= names


def test_a_run_cut_short_by_its_page_budget_leaves_a_cursor_in_the_bucket(
    aws: Aws, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN three lost rows, Scan pages of one row, and one page per run
    aws.s3.create_bucket(Bucket=BUCKET)
    for number in range(3):
        aws.dynamodb.put_item(TableName=DEPENDENCY_TABLE, Item=lost_row(number))
    monkeypatch.setenv(settings.ENV_SWEEPER_MAX_PAGES, "1")
    with moto_query_page(420):
        # WHEN the schedule invokes the handler once
        first = sweeper_handler.lambda_handler(EVENT, context())
        # THEN it stopped after one page and left the next page's key in the bucket
        assert first["pages"]["dependencies"] == 1
        assert first["budget_exhausted"] is True
        cursor = json.loads(aws.s3.get_object(Bucket=BUCKET, Key=CURSOR_KEY)["Body"].read())
        assert cursor["dependencies"]["waiter_id"]["S"].startswith("token#")
        # AND the following invocations finish the pass, each row handled once
        runs = [first]
        while "dependencies" not in runs[-1]["passes_completed"]:
            runs.append(sweeper_handler.lambda_handler(EVENT, context()))
    assert sum(run["parents_gone"] for run in runs) == 3
    assert len(runs) <= 4
    capsys.readouterr()


def test_a_cursor_that_cannot_be_read_starts_a_new_pass(
    aws: Aws, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a cursor object that is not a cursor, and a lost row
    aws.s3.create_bucket(Bucket=BUCKET)
    aws.s3.put_object(Bucket=BUCKET, Key=CURSOR_KEY, Body=b"not json")
    aws.dynamodb.put_item(TableName=DEPENDENCY_TABLE, Item=lost_row(7))
    # WHEN the handler runs THEN it sweeps from the top
    response = sweeper_handler.lambda_handler(EVENT, context())
    assert response["parents_gone"] == 1
    capsys.readouterr()


def test_an_invocation_with_no_time_left_reads_nothing(
    aws: Aws, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a lost row and an invocation with only its reserve left (15 s)
    aws.s3.create_bucket(Bucket=BUCKET)
    aws.dynamodb.put_item(TableName=DEPENDENCY_TABLE, Item=lost_row(9))
    # WHEN the handler runs THEN it stops before its first page, and says so
    response = sweeper_handler.lambda_handler(EVENT, context(timeout_seconds=15))
    assert response["pages"] == {"dependencies": 0, "states": 0}
    assert response["budget_exhausted"] is True
    capsys.readouterr()
