"""Step Functions history events of one parent waiting on n dependencies: Map vs join.

Runs on the embedded stack (real ASL, moto's interpreter) and prints a Markdown
table. Usage: ``.venv/bin/python scripts/history_events.py 10 100 200``.
"""

from __future__ import annotations

import io
import json
import sys
import time
from typing import Any

from dependency_tracker_local import LocalStack


def dependency(tag: str, index: int) -> dict[str, Any]:
    """A payload for the ``simulate`` child that succeeds at once."""
    return {
        "type": "FeatureCollection",
        "features": [{"type": "Feature", "id": f"{tag}-{index:04d}", "collection": "history"}],
        "process": [{"workflow": "simulate"}],
    }


def run(stack: LocalStack, machine: str, name: str, body: dict[str, Any]) -> tuple[int, float]:
    """Run one parent to the end; its history event count and wall time."""
    sfn = stack.client("stepfunctions")
    started = time.monotonic()
    arn = sfn.start_execution(
        stateMachineArn=stack.outputs["StateMachines"][machine], name=name, input=json.dumps(body)
    )["executionArn"]
    while sfn.describe_execution(executionArn=arn)["status"] == "RUNNING":
        if time.monotonic() - started > 600:
            raise TimeoutError(name)
        time.sleep(0.2)
    elapsed = time.monotonic() - started
    status = sfn.describe_execution(executionArn=arn)["status"]
    if status != "SUCCEEDED":
        raise RuntimeError(f"{name} ended {status}")
    events = 0
    for page in sfn.get_paginator("get_execution_history").paginate(executionArn=arn):
        events += len(page["events"])
    return events, elapsed


def main(sizes: list[int]) -> None:
    """Measure each size with both patterns and print a Markdown table."""
    rows = []
    with LocalStack(sink=io.StringIO(), default_max_concurrency=1000) as stack:
        for n in sizes:
            map_events, map_s = run(
                stack,
                "wait-for-dependencies",
                f"map-{n}",
                {"dependencies": [dependency(f"map{n}", i) for i in range(n)]},
            )
            join_events, join_s = run(
                stack,
                "wait-for-join",
                f"join-{n}",
                {"dependencies": [dependency(f"join{n}", i) for i in range(n)]},
            )
            rows.append((n, map_events, join_events, map_s, join_s))
            print(
                f"n={n}: map {map_events} events ({map_s:.1f} s), "
                f"join {join_events} events ({join_s:.1f} s)",
                file=sys.stderr,
            )
    print(
        "| n | Map pattern: history events | join: history events "
        "| Map wall time | join wall time |"
    )
    print("|---:|---:|---:|---:|---:|")
    for n, map_events, join_events, map_s, join_s in rows:
        print(f"| {n} | {map_events} | {join_events} | {map_s:.1f} s | {join_s:.1f} s |")


if __name__ == "__main__":
    main([int(arg) for arg in sys.argv[1:]] or [10, 100, 200])
