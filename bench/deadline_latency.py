"""``python -m bench.deadline_latency``: how long after its deadline a join is decided.

Opt-in (not a section of ``python -m bench``). On the embedded stack (the platform model
as configured, the deadlines schedule at its default of every second), ``--joins`` joins
are started one after another through the real ``wait-for-join``, each of a member that
succeeds at once and one that runs for minutes, with a ``--deadline`` of a few seconds
and ``min_succeeded`` 1: each is decided by its deadline. The bench reports, per join,
how long after the deadline its row was decided and its parent stopped.

On AWS the sweeper's schedule runs every minute, so add up to a minute to these figures.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from dependency_tracker.joins.store import JoinStore
from dependency_tracker_local import LocalStack


def member(item: str, seconds: int) -> dict[str, Any]:
    """A payload for the stack's ``simulate`` workflow."""
    return {
        "type": "FeatureCollection",
        "features": [{"type": "Feature", "id": item, "collection": "bench-deadline"}],
        "process": [{"workflow": "simulate", "tasks": {"simulate": {"seconds": seconds}}}],
    }


def measure(joins: int, deadline: int) -> dict[str, Any]:
    """Start ``joins`` joins with a deadline, one at a time; their delays past it."""
    decided, stopped = [], []
    with LocalStack() as stack:
        sfn = stack.client("stepfunctions")
        store = JoinStore(stack.client("dynamodb"), stack.outputs["DependencyTableName"])
        machine = stack.outputs["StateMachines"]["wait-for-join"]
        for index in range(joins):
            document = {
                "dependencies": [member(f"fast-{index}", 0), member(f"slow-{index}", 600)],
                "deadline": deadline,
                "timeout_seconds": 900,
            }
            arn = sfn.start_execution(
                stateMachineArn=machine, name=f"deadline-{index}", input=json.dumps(document)
            )["executionArn"]
            while (described := sfn.describe_execution(executionArn=arn))["status"] == "RUNNING":
                time.sleep(0.05)
            join_id = json.loads(described["output"])["join"]["join_id"]
            row = store.get(join_id)
            if row is None or row.deadline_at is None or row.resolved_at is None:
                msg = f"join {join_id} has no deadline decision"
                raise RuntimeError(msg)
            decided.append((row.resolved_at - row.deadline_at).total_seconds())
            stopped.append((described["stopDate"] - row.deadline_at).total_seconds())
    return {
        "joins": joins,
        "deadline_seconds": deadline,
        "decided_after_deadline_s": {"min": min(decided), "max": max(decided)},
        "parent_stopped_after_deadline_s": {"min": min(stopped), "max": max(stopped)},
    }


def main(argv: list[str] | None = None) -> int:
    """Run the measurement and print it as JSON."""
    parser = argparse.ArgumentParser(prog="python -m bench.deadline_latency")
    parser.add_argument("--joins", type=int, default=5)
    parser.add_argument("--deadline", type=int, default=3, help="seconds after registration")
    args = parser.parse_args(argv)
    print(json.dumps(measure(args.joins, args.deadline), indent=2))  # noqa: T201
    return 0


if __name__ == "__main__":
    sys.exit(main())
