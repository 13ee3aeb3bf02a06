"""Registration against Step Functions' StartExecution bucket, as a ratio to its floor.

``python -m bench.registration`` (``make bench-registration``): one all-of join of
``--members`` members on the embedded stack with the platform model's rates divided by
``--scale`` (100: a bucket of 13 refilled at 3 a second, so a few hundred members reach
the throttled regime), at the template's defaults, twice:

* **paced** (the product): a throttled start waits for the bucket inside its invocation,
  within the deadline (dependency_tracker/core/pacing.py);
* **unpaced** (the behaviour before it, ``pace_starts=False``): botocore's retries, then the
  chunk fails and comes back after the join queue's visibility timeout (the template's
  360 s, kept in seconds: the scaled bucket makes a join of n members here last about as
  long as one of 100 n members on AWS). It is stopped at ``--unpaced-cap`` times the floor.

Registration is timed from the parent's start until every member's execution exists;
the floor is ``(n + 1 - burst) / refill`` (the parent's own start takes a token too). The
figures are this run's, not a target checked by a test: the ratio is what carries over.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

from bench.stack import CHILD, JOIN_MACHINE, payload, serialize_asl_parsing, warm_interpreter
from dependency_tracker.joins.manifest import manifest_text
from dependency_tracker_local import EmbeddedStack
from dependency_tracker_local.rates import START_EXECUTION

DEFAULT_MEMBERS = 300
DEFAULT_SCALE = 100.0
# The template's JoinQueue VisibilityTimeout and ProcessMaxReceiveCount.
VISIBILITY_TIMEOUT_SECONDS = 360
MAX_RECEIVE_COUNT = 10
# The unpaced run is stopped past this many floors: a chunk that failed comes back only
# after the visibility timeout (360 s), several floors at a few hundred members.
DEFAULT_UNPACED_CAP = 6.0
TARGET_RATIO = 1.15
POLL_SECONDS = 0.25


def run_once(members: int, scale: float, *, pace: bool, cap: float | None) -> dict[str, Any]:
    """One join on a fresh stack; its registration time and ratio to the floor."""
    serialize_asl_parsing()
    stack = EmbeddedStack(
        sink=io.StringIO(),
        log_level="WARNING",
        default_max_concurrency=0,
        default_timeout_seconds=3600,
        visibility_timeout=VISIBILITY_TIMEOUT_SECONDS,
        max_receive_count=MAX_RECEIVE_COUNT,
        platform=True,
        rate_scale=scale,
        deadlines_interval=None,  # as bench/stack.py's local_stack: no deadline here
    )
    with stack:
        warm_interpreter(stack)
        stack.configure(pace_starts=pace)
        rates = stack.rates
        if rates is None:
            msg = "the platform model's rates are off"
            raise RuntimeError(msg)
        quota = rates.quota(START_EXECUTION, stack.region)
        floor = rates.floor_seconds(members + 1, START_EXECUTION, stack.region)
        sfn = stack.client("stepfunctions")
        tag = "paced" if pace else "unpaced"
        documents = [payload(f"reg-{tag}-{i:05d}", seconds=None) for i in range(members)]
        bucket = str(stack.outputs["PayloadBucketName"])
        key = f"manifests/registration-{tag}.jsonl"
        stack.client("s3").put_object(Bucket=bucket, Key=key, Body=manifest_text(documents))
        body = {"dependencies_url": f"s3://{bucket}/{key}", "timeout_seconds": 3600}
        child = stack.outputs["StateMachines"][CHILD]
        started = time.monotonic()
        sfn.start_execution(
            stateMachineArn=stack.outputs["StateMachines"][JOIN_MACHINE],
            name=f"registration-{tag}",
            input=json.dumps(body),
        )
        limit = None if cap is None else started + cap * floor
        count = 0
        while count < members and (limit is None or time.monotonic() < limit):
            time.sleep(POLL_SECONDS)
            count = _started(sfn, child)
        seconds = time.monotonic() - started
        finished = count >= members
        # Stopping with members still running makes the pumps log undelivered events:
        # expected here, and nothing to do with what was measured.
        logging.getLogger("dependency_tracker_local").setLevel(logging.CRITICAL)
        return {
            "paced": pace,
            "members": members,
            "scale": scale,
            "burst": quota.burst,
            "refill_per_s": quota.refill,
            "floor_s": round(floor, 1),
            "finished": finished,
            "members_started": count,
            "registration_s": round(seconds, 1),
            # Unfinished: the ratio is a lower bound (stopped at the cap).
            "ratio_to_floor": round(seconds / floor, 3),
            "throttled_starts": rates.throttled[START_EXECUTION],
            "admitted_starts": rates.admitted[START_EXECUTION],
            "pump_errors": stack.pump_errors,
        }


def _started(sfn: Any, machine: str) -> int:
    """Executions of ``machine`` so far (every member runs once)."""
    total = 0
    kwargs: dict[str, Any] = {"stateMachineArn": machine, "maxResults": 1000}
    while True:
        page = sfn.list_executions(**kwargs)
        total += len(page["executions"])
        token = page.get("nextToken")
        if not token:
            return total
        kwargs["nextToken"] = token


def report(results: list[dict[str, Any]]) -> str:
    """The runs as a table."""
    lines = [
        "| run | members | scale | floor (s) | registration (s) | ratio | started | throttled |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for result in results:
        ratio = f"{result['ratio_to_floor']:.2f}"
        if not result["finished"]:
            ratio = f"> {ratio} (stopped)"
        lines.append(
            f"| {'paced' if result['paced'] else 'unpaced'} | {result['members']} "
            f"| {result['scale']:g} | {result['floor_s']} | {result['registration_s']} "
            f"| {ratio} | {result['members_started']} | {result['throttled_starts']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the paced join (and the unpaced one), print the table, write the results."""
    parser = argparse.ArgumentParser(prog="python -m bench.registration", description=__doc__)
    parser.add_argument("--members", type=int, default=DEFAULT_MEMBERS)
    parser.add_argument("--scale", type=float, default=DEFAULT_SCALE)
    parser.add_argument("--unpaced-cap", type=float, default=DEFAULT_UNPACED_CAP)
    parser.add_argument("--no-unpaced", action="store_true", help="run the paced join only")
    parser.add_argument("--output", type=Path, default=Path("build/bench/registration.json"))
    args = parser.parse_args(argv)
    results = [run_once(args.members, args.scale, pace=True, cap=None)]
    if not args.no_unpaced:
        results.append(run_once(args.members, args.scale, pace=False, cap=args.unpaced_cap))
    table = report(results)
    sys.stdout.write(table + "\n")
    paced = results[0]
    verdict = "within" if paced["ratio_to_floor"] <= TARGET_RATIO else "NOT within"
    sys.stdout.write(f"paced: {verdict} {TARGET_RATIO} x the floor\n")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps({"runs": results, "target_ratio": TARGET_RATIO}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
