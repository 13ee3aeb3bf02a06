"""One App, many threads: no record sees another record's state.

The composition root builds each flow once, and the embedded stack's pump threads (like any
caller with threads) hand it records concurrently. A flow that kept something of one record
on itself (a cache, a "last seen") could hand it to another.
"""

from __future__ import annotations

import json
import re
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from dependency_tracker.app import App
from dependency_tracker.core import clients
from dependency_tracker.core.enums import PayloadState
from dependency_tracker.handlers.process import lambda_handler as process_handler
from dependency_tracker.payloads.events import StatusChange
from dependency_tracker.table.dependency_table import DependencyTable
from dependency_tracker_local.events import status_change_event
from tests.conftest import ACCOUNT, DEPENDENCY_TABLE, REGION, payload, payload_id
from tests.unit.handlers.conftest import sqs_event

if TYPE_CHECKING:
    import io

    from dependency_tracker.table.items import Resolution
    from dependency_tracker_local.context import LocalContext
    from tests.conftest import Aws

ITEMS = ("item-a", "item-b")
# Long enough for a slow machine; a record that never arrives breaks the barrier instead.
DEADLINE_SECONDS = 30.0


class ParkedWaiters(DependencyTable):
    """Parks every record at its waiters until all of them got there (a barrier).

    Each record has then needed its execution's description once (its payload and its
    result) and will need it again (its next step), with every other record's in between.
    """

    def __init__(self, client: Any, table_name: str, parties: int) -> None:
        super().__init__(client, table_name)
        self.barrier = threading.Barrier(parties, timeout=DEADLINE_SECONDS)

    def resolve_all(
        self, payload_id: str, resolution: Resolution, *, ended_run: str | None = None
    ) -> int:
        self.barrier.wait()
        return super().resolve_all(payload_id, resolution, ended_run=ended_run)


def left_out(execution: dict[str, Any]) -> StatusChange:
    """The status change EventBridge sends for an input and output over 248 KiB: neither."""
    detail = status_change_event(execution, region=REGION, account=ACCOUNT)["detail"]
    detail.update(
        input=None, inputDetails={"included": False}, output=None, outputDetails={"included": False}
    )
    return StatusChange.model_validate(detail)


@pytest.mark.usefixtures("workflows")
def test_concurrent_records_on_one_app_each_get_their_own_execution(
    aws: Aws, lambda_context: LocalContext, log_lines: io.StringIO
) -> None:
    # GIVEN two chained payloads whose first steps ended, each reported without its input
    # and output, so that each record must ask DescribeExecution for both
    changes = []
    for item in ITEMS:
        body = payload(item, process=[{"workflow": "pass"}, {"workflow": "next"}])
        process_handler(sqs_event(body), lambda_context)
        state = aws.states.get(payload_id(item))
        assert state is not None
        assert state.execution_arn is not None
        changes.append(left_out(aws.wait_for_execution(state.execution_arn)))
    # AND one App shared by the threads, whose Step Functions client counts DescribeExecution
    described: Counter[str] = Counter()
    sfn = clients.session().client("stepfunctions")
    sfn.meta.events.register(
        "before-parameter-build.sfn.DescribeExecution",
        lambda params, **_: described.update([params["executionArn"]]),
    )
    waiters = ParkedWaiters(aws.dynamodb, DEPENDENCY_TABLE, parties=len(changes))
    app = App(
        aws.settings.model_copy(update={"process_queue_url": aws.queue_url}),
        {"dynamodb": aws.dynamodb, "stepfunctions": sfn, "sqs": aws.sqs, "s3": aws.s3},
        dependencies=waiters,
    )

    # WHEN both records are handled at once, each parked mid-record until the other got there
    with ThreadPoolExecutor(max_workers=len(changes)) as pool:
        futures = [pool.submit(app.update_state.handle, change) for change in changes]
        actions = [future.result(timeout=DEADLINE_SECONDS) for future in futures]

    # THEN each record asked once for its own execution, and for no other
    assert [action.value for action in actions] == ["recorded", "recorded"]
    assert described == Counter(change.execution_arn for change in changes)
    # AND each payload's result and next step are its own execution's
    for item, change in zip(ITEMS, changes, strict=True):
        state = aws.states.get(payload_id(item))
        assert state is not None
        assert state.state is PayloadState.SUCCEEDED
        assert state.execution_arn == change.execution_arn
        assert state.result_json is not None
        output = json.loads(state.result_json)["output"]
        assert [feature["id"] for feature in output["features"]] == [item]
    sent = aws.sqs.receive_message(QueueUrl=aws.queue_url, MaxNumberOfMessages=10)["Messages"]
    next_items = sorted(json.loads(m["Body"])["features"][0]["id"] for m in sent)
    assert next_items == sorted(ITEMS)
    # AND each record's log line names its own execution and payload, not the other thread's
    handled = [
        (line["execution_arn"], line["correlation_id"])
        for line in map(json.loads, log_lines.getvalue().splitlines())
        if line["message"] == "status change handled"
    ]
    assert sorted(handled) == sorted(
        (change.execution_arn, payload_id(item))
        for item, change in zip(ITEMS, changes, strict=True)
    )


SHARED_KEY_CALLS = re.compile(
    r"logger\.(append_keys|set_correlation_id|remove_keys|append_context_keys)\("
)


def test_log_keys_are_set_per_thread_only() -> None:
    # Powertools' own key methods write to the one formatter every thread shares: a record's
    # keys would tag another thread's lines. core/observability.py keeps them per thread.
    src = Path(__file__).parents[3] / "src"
    shared = [
        f"{path.relative_to(src)}:{number}"
        for path in sorted(src.rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if SHARED_KEY_CALLS.search(line)
    ]
    assert shared == []
