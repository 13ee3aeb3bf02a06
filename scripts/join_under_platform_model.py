"""A join by manifest on the embedded stack with the platform model on; exit 0 if it held.

Run from the tree whose registration you want to judge (its src/ first on the path):

    PYTHONPATH=<tree>/src:<tree> .venv/bin/python scripts/join_under_platform_model.py \
        [--members 3000] [--chunk-size 100] [--account-concurrency 10]

It starts wait-for-join over a JSON Lines manifest of ``--members`` simulate payloads
(0 s each) and follows it, printing every 10 s: the parent's status, the records
Lambda's recursive-loop detection stopped (``stack.platform.stopped``) and the
process DLQ's depth. It stops early, as a failure, once a record was stopped and
reached the DLQ (the join cannot finish: the parent would wait to its timeout).
On success it checks every member ran exactly once.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import time

from dependency_tracker.joins.manifest import manifest_text
from dependency_tracker_local import EmbeddedStack


def member(index: int) -> dict[str, object]:
    """A simulate payload that succeeds at once."""
    return {
        "type": "FeatureCollection",
        "features": [{"type": "Feature", "id": f"m-{index}", "collection": "platform"}],
        "process": [{"workflow": "simulate", "tasks": {"simulate": {"seconds": 0}}}],
    }


def main() -> int:
    """Run the join; 0 if it succeeded with nothing stopped, 1 otherwise."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--members", type=int, default=3000)
    parser.add_argument("--chunk-size", type=int, default=100)
    # 37d3fdd's template reserves 1 for the sweeper, which a new account (10) refuses:
    # give that tree --account-concurrency 1000 to judge its registration alone.
    parser.add_argument("--account-concurrency", type=int, default=10)
    parser.add_argument("--timeout", type=int, default=3600)
    args = parser.parse_args()
    os.environ["DEPTRACK_JOIN_CHUNK_SIZE"] = str(args.chunk_size)
    started = time.monotonic()
    with EmbeddedStack(
        sink=io.StringIO(), sweeper_interval=None, account_concurrency=args.account_concurrency
    ) as stack:
        if stack.platform is None:
            sys.exit("the platform model is off (DEPTRACK_PLATFORM=0?)")
        s3, sqs, sfn = stack.client("s3"), stack.client("sqs"), stack.client("stepfunctions")
        bucket = stack.outputs["PayloadBucketName"]
        body = manifest_text(member(i) for i in range(args.members)).encode()
        s3.put_object(Bucket=bucket, Key="manifests/big.jsonl", Body=body)
        execution = sfn.start_execution(
            stateMachineArn=stack.outputs["StateMachines"]["wait-for-join"],
            name="platform-join",
            input=json.dumps(
                {
                    "dependencies_url": f"s3://{bucket}/manifests/big.jsonl",
                    "timeout_seconds": args.timeout,
                }
            ),
        )["executionArn"]
        while True:
            status = sfn.describe_execution(executionArn=execution)["status"]
            dlq = int(
                sqs.get_queue_attributes(
                    QueueUrl=stack.outputs["ProcessDlqUrl"],
                    AttributeNames=["ApproximateNumberOfMessages"],
                )["Attributes"]["ApproximateNumberOfMessages"]
            )
            stopped = list(stack.platform.stopped)
            elapsed = time.monotonic() - started
            print(f"{elapsed:7.1f}s parent={status} stopped={len(stopped)} dlq={dlq}", flush=True)
            if status != "RUNNING" or (stopped and dlq):
                break
            time.sleep(10)
        for record in stopped[:3]:
            print(f"stopped: {record}")
        if stopped:
            messages = sqs.receive_message(QueueUrl=stack.outputs["ProcessDlqUrl"]).get(
                "Messages", []
            )
            for message in messages:
                chunk = json.loads(message["Body"]).get("join_chunk", {})
                print(f"in the DLQ: join_chunk index {chunk.get('index')}")
            print("FAILED: recursive-loop detection stopped the registration")
            return 1
        runs = 0
        machine = stack.state_machine_arn("simulate")
        for page in sfn.get_paginator("list_executions").paginate(stateMachineArn=machine):
            runs += len(page["executions"])
        print(f"parent {status}; {runs} simulate executions for {args.members} members")
        return 0 if status == "SUCCEEDED" and runs == args.members else 1


if __name__ == "__main__":
    sys.exit(main())
