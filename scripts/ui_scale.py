"""How long ``dependency-tracker ui`` takes to build its page over thousands of rows.

Fills a moto account (in process, the local stack's cost model on) with N finished payloads
(a tenth failed) and N/5 parents each waiting on 5 running payloads, then times the page
(``/``, which reads the tables anew: a Scan of each) and its refresh (``/fragment``, served
from the shared read while it is fresh) through Flask's test client, as a browser asks.
Usage: ``.venv/bin/python scripts/ui_scale.py [N ...]`` (default 1000 5000).
"""

from __future__ import annotations

import os
import statistics
import sys
import time

from moto import mock_aws

from dependency_tracker.core import clients
from dependency_tracker.core.enums import PayloadState, utcnow
from dependency_tracker.payloads.model import ProcessPayload
from dependency_tracker.payloads.state_table import StateTable
from dependency_tracker.table.dependency_table import DependencyTable
from dependency_tracker.table.items import WaiterItem, waiter_id_for
from dependency_tracker.table.schema import create_tables
from dependency_tracker_cli.target import ConnectionOptions, Target
from dependency_tracker_cli.ui.app import create_app
from dependency_tracker_local.moto_costs import aws_like_costs

WAITS_PER_PARENT = 5
TIMES = 5
EXECUTIONS = "arn:aws:states:us-east-1:123456789012:execution:deptrack-wait-for-dependencies:"


def payload(index: int, collection: str) -> ProcessPayload:
    """A ``simulate`` payload of one item."""
    return ProcessPayload.model_validate(
        {
            "features": [{"id": f"tile-{index:06d}", "collection": collection}],
            "process": [{"workflow": "simulate"}],
        }
    )


def fill(n: int) -> None:
    """``n`` finished payloads, and ``n / 5`` parents each waiting on 5 running ones."""
    dynamodb = clients.session().client("dynamodb")
    create_tables(dynamodb, state_table="deptrack-state", dependency_table="deptrack-dependencies")
    states = StateTable(dynamodb, "deptrack-state")
    dependencies = DependencyTable(dynamodb, "deptrack-dependencies")
    for index in range(n):
        done = payload(index, "s2")
        states.claim(done, None)
        failed = index % 10 == 0
        states.set_final(
            payload_id=done.id,
            workflow=done.workflow,
            state=PayloadState.FAILED if failed else PayloadState.SUCCEEDED,
            execution_arn=f"arn:done-{index}",
            attempt=1,
            error="TaskFailed" if failed else None,
            cause="simulated" if failed else None,
        )
    now = utcnow()
    for parent in range(n // WAITS_PER_PARENT):
        for wait in range(WAITS_PER_PARENT):
            running = payload(parent * WAITS_PER_PARENT + wait, "l8")
            states.claim(running, None)
            token = f"token-{parent}-{wait}-" + "x" * 200
            dependencies.register(
                WaiterItem(
                    payload_id=running.id,
                    waiter_id=waiter_id_for(token),
                    task_token=token,
                    workflow_state=PayloadState.PROCESSING,
                    waiter_payload_id=f"mosaic/workflow-merge/m-{parent:05d}",
                    parent_execution=f"{EXECUTIONS}parent-{parent:05d}",
                    created_at=now,
                    updated_at=now,
                )
            )


def main(sizes: list[int]) -> None:
    """Fill, then time the page and its refresh, for each size."""
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    for n in sizes:
        with aws_like_costs(), mock_aws():
            started = time.perf_counter()
            fill(n)
            filled = time.perf_counter() - started
            client = create_app(Target(ConnectionOptions(prefix="deptrack"))).test_client()
            for path in ("/", "/fragment"):
                seconds = []
                for _ in range(TIMES):
                    started = time.perf_counter()
                    response = client.get(path)
                    seconds.append(time.perf_counter() - started)
                    if response.status_code != 200:
                        raise SystemExit(f"{path}: HTTP {response.status_code}")
                print(
                    f"n={n}: {path:10} median {statistics.median(seconds):.2f} s, "
                    f"max {max(seconds):.2f} s over {TIMES} ({len(response.data) // 1024} KiB; "
                    f"tables filled in {filled:.0f} s)"
                )


if __name__ == "__main__":
    main([int(arg) for arg in sys.argv[1:]] or [1000, 5000])
