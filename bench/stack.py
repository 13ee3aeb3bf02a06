"""The embedded stack as the benchmark uses it: the baseline parent, payloads, waiting."""

from __future__ import annotations

import functools
import io
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from moto.stepfunctions.parser.asl.parse.asl_parser import AmazonStateLanguageParser
from moto.stepfunctions.parser.asl.utils.boto_client import boto_client_for

from dependency_tracker.payloads.model import ProcessPayload
from dependency_tracker.table.items import PayloadStateItem
from dependency_tracker_local import EmbeddedStack, definitions
from dependency_tracker_local.stack import ROLE_ARN

if TYPE_CHECKING:
    from dependency_tracker.core.enums import PayloadState

CHILD = "simulate"
MAP_MACHINE = "wait-for-dependencies"
JOIN_MACHINE = "wait-for-join"
POLL_MACHINE = "poll-for-dependencies"
BASELINE_DEFINITION = Path(__file__).resolve().parent / "stepfunctions" / f"{POLL_MACHINE}.asl.json"
COLLECTION = "bench"


_PARSE_LOCK = threading.Lock()


def serialize_asl_parsing() -> None:
    """Make moto parse one state machine definition at a time (idempotent, process-wide).

    moto's interpreter parses an execution's definition in the execution's own
    thread, and its ``Preprocessor`` keeps the query-language scopes in a list
    shared by every instance (a class attribute): two parses at once corrupt it.
    One of hundreds of executions started together then dies in its thread with
    an ``IndexError`` and stays RUNNING for ever, or a Map iteration fails with
    ``States.Runtime``. Parsing is CPU work under the GIL anyway, so the lock
    costs nothing measurable; the benchmark's stacks take it, the product's
    local stack does not (docs/performance.md, Caveats).
    """
    parse = AmazonStateLanguageParser.parse
    if getattr(parse, "bench_serialized", False):
        return

    @functools.wraps(parse)
    def serialized(definition: str) -> Any:
        with _PARSE_LOCK:
            return parse(definition)

    serialized.bench_serialized = True  # type: ignore[attr-defined]
    AmazonStateLanguageParser.parse = staticmethod(serialized)  # type: ignore[method-assign]


def local_stack(*, idle_pumps: bool = False) -> EmbeddedStack:
    """A quiet embedded stack; ``idle_pumps`` parks the pumps (for isolated timings).

    With idle pumps every pump runs one (empty) round at start and then sleeps
    for an hour, so nothing but the caller touches moto. moto's definition
    parsing is serialized first (:func:`serialize_asl_parsing`). The platform
    model is always on, whatever ``DEPTRACK_PLATFORM`` says: what is measured is
    what Lambda would let run (recursive-loop detection, the triggers' maximum
    concurrency).
    """
    serialize_asl_parsing()
    return EmbeddedStack(
        sink=io.StringIO(),
        log_level="WARNING",
        poll_interval=3600.0 if idle_pumps else 0.05,
        default_max_concurrency=0,
        default_timeout_seconds=3600,
        platform=True,
        # The deadlines schedule is a fixed cost a minute on AWS, not a cost of any
        # waiter (docs/deploy.md); its queries every second here would be counted as each
        # scenario's. No scenario here has a deadline: bench.deadline_latency measures them.
        deadlines_interval=None,
    )


def warm_interpreter(stack: EmbeddedStack) -> None:
    """Create, once, the clients moto's interpreter creates for every service task.

    moto makes a new boto3 client (from boto3's default session) for every
    ``sqs:sendMessage`` or ``dynamodb:getItem`` task. The first one scans
    botocore's data directory, and the scan is cached only once it finished:
    when hundreds of Map iterations start together on a cold cache, every one
    of them scans (a cache stampede that costs minutes of CPU and made the
    throughput run bimodal, 2.8 or 8.1 edges/s). Steady state is what we
    measure, so the cache is warmed first.
    """
    for service in ("sqs", "dynamodb"):
        boto_client_for(stack.region, service)


def register_baseline(stack: EmbeddedStack) -> str:
    """Create the polling parent (``bench/stepfunctions``) on the stack; its ARN.

    It is named ``{prefix}-poll-for-dependencies`` like our parents, so the
    tracker sees its status changes exactly as it sees theirs.
    """
    outputs = stack.outputs
    substitutions = {
        "ProcessQueueUrl": str(outputs["ProcessQueueUrl"]),
        "StateTableName": str(outputs["StateTableName"]),
        "DependencyTableName": str(outputs["DependencyTableName"]),
        "Prefix": str(outputs["Prefix"]),
    }
    created = stack.client("stepfunctions").create_state_machine(
        name=f"{stack.prefix}-{POLL_MACHINE}",
        roleArn=ROLE_ARN,
        definition=definitions.render(BASELINE_DEFINITION, substitutions),
    )
    return str(created["stateMachineArn"])


def payload(item: str, *, seconds: int | None) -> dict[str, Any]:
    """A payload for the ``simulate`` child: waits ``seconds`` then succeeds.

    ``seconds=None`` gives the shortest child (no Wait state at all).
    """
    process: dict[str, Any] = {"workflow": CHILD}
    if seconds is not None:
        process["tasks"] = {"simulate": {"seconds": seconds}}
    return {
        "type": "FeatureCollection",
        "features": [{"type": "Feature", "id": item, "collection": COLLECTION}],
        "process": [process],
    }


def attempt_one_item(payload_id: str, state: PayloadState, execution_arn: str) -> dict[str, Any]:
    """The state item of a ``simulate`` payload whose attempt 1 is in ``state``, as stored."""
    now = datetime.now(UTC)
    return PayloadStateItem(
        payload_id=payload_id,
        state=state,
        workflow=CHILD,
        attempt=1,
        execution_arn=execution_arn,
        executions=[execution_arn],
        created_at=now,
        updated_at=now,
        claimed_at=now,
        finished_at=now if state.is_terminal else None,
    ).to_item()


def payload_id(document: dict[str, Any]) -> str:
    """The tracker's id of a payload (the cirrus rule)."""
    return ProcessPayload.model_validate(document).id


def wait_stopped(
    sfn: Any, execution_arn: str, *, timeout: float, every: float = 0.05
) -> dict[str, Any]:
    """``DescribeExecution`` once the execution is no longer running.

    Raises:
        TimeoutError: Still running after ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while True:
        described: dict[str, Any] = sfn.describe_execution(executionArn=execution_arn)
        if described["status"] != "RUNNING":
            return described
        if time.monotonic() > deadline:
            msg = f"{execution_arn} still running after {timeout} s"
            raise TimeoutError(msg)
        time.sleep(every)
