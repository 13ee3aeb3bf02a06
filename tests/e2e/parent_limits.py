"""Helpers to size and measure the Map parent (``wait-for-dependencies``) at its limits.

Shared by ``tests/e2e/test_parent_limits.py`` (boundaries reached with a few
long ids, in ``make test``) and ``tests/chaos/test_map_scale.py`` (1,000
dependencies by ``{"url"}``, in ``make chaos``).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dependency_tracker.core.limits import SFN_MAX_PAYLOAD_BYTES
from tests.e2e.conftest import CHILD, PARENT, dependency, finished

if TYPE_CHECKING:
    from dependency_tracker_local import LocalStack

COLLECTION = "e2e"
# ``{collection}/workflow-{workflow}/{item id}``: the part of a payload id that is not the item id.
ID_PREFIX_LENGTH = len(f"{COLLECTION}/workflow-{CHILD}/")
# The parent's largest limit on one dependency count (``WithinLimits`` in the definition).
MAX_DEPENDENCIES = 1500


def item_for_id_length(tag: str, index: int, id_length: int) -> str:
    """An item id that makes the dependency's payload id exactly ``id_length`` characters."""
    head = f"{tag}-{index:05d}-"
    pad = id_length - ID_PREFIX_LENGTH - len(head)
    if pad < 0:
        msg = f"id_length {id_length} is too short for {head!r}"
        raise ValueError(msg)
    return head + "x" * pad


def upload(stack: LocalStack, tag: str, items: list[str]) -> list[dict[str, str]]:
    """Store one ``simulate`` payload per item in the payload bucket; ``{"url"}`` references."""
    s3 = stack.client("s3")
    bucket = stack.outputs["PayloadBucketName"]
    references = []
    for index, item in enumerate(items):
        key = f"tests/{tag}/{index:05d}.json"
        s3.put_object(Bucket=bucket, Key=key, Body=json.dumps(dependency(item)).encode())
        references.append({"url": f"s3://{bucket}/{key}"})
    return references


def moto_size(value: Any) -> int:
    """Bytes of a state as moto counts them (``json.dumps`` with its default ``", "``/``": "``)."""
    return len(json.dumps(value).encode("utf-8"))


def compact_size(value: Any) -> int:
    """Bytes of a state as compact JSON (no spaces), the smallest AWS can count."""
    return len(json.dumps(value, separators=(",", ":")).encode("utf-8"))


def state_after_map(
    payload_ids: list[str], *, timeout_seconds: int, max_concurrency: int = 40
) -> dict[str, Any]:
    """The parent's largest state: ``WaitForEach``'s output when every dependency succeeded."""
    return {
        "payload_id": None,
        "timeout_seconds": timeout_seconds,
        "max_concurrency": max_concurrency,
        "count": len(payload_ids),
        "dependencies": [{"payload_id": pid, "replayed": False} for pid in payload_ids],
    }


def fits(state: dict[str, Any]) -> bool:
    """Whether ``state`` is within Step Functions' state data limit, both ways of counting."""
    return moto_size(state) < SFN_MAX_PAYLOAD_BYTES and compact_size(state) < SFN_MAX_PAYLOAD_BYTES


@dataclass(frozen=True)
class MapRun:
    """One finished Map parent and what its history shows."""

    described: dict[str, Any]
    events: list[dict[str, Any]]
    seconds: float

    @property
    def output(self) -> dict[str, Any]:
        result: dict[str, Any] = json.loads(self.described["output"])
        return result

    @property
    def peak_state_bytes(self) -> int:
        """Largest state input or output (UTF-8 bytes) in the execution history."""
        sizes = [0]
        for event in self.events:
            for key, details in event.items():
                if key.endswith("EventDetails") and isinstance(details, dict):
                    for field in ("input", "output"):
                        if isinstance(details.get(field), str):
                            sizes.append(len(details[field].encode("utf-8")))
        return max(sizes)

    def count(self, event_type: str) -> int:
        """How many history events of ``event_type``."""
        return sum(1 for event in self.events if event["type"] == event_type)


def run_parent(
    stack: LocalStack,
    name: str,
    dependencies: list[dict[str, Any]],
    *,
    timeout_seconds: int = 300,
    deadline: float = 120.0,
) -> MapRun:
    """Start ``wait-for-dependencies`` (compact input), wait until it stops, read its history."""
    sfn = stack.client("stepfunctions")
    started = time.monotonic()
    arn = sfn.start_execution(
        stateMachineArn=stack.outputs["StateMachines"][PARENT],
        name=name,
        input=json.dumps(
            {"dependencies": dependencies, "timeout_seconds": timeout_seconds},
            separators=(",", ":"),
        ),
    )["executionArn"]
    described = finished(stack, arn, timeout=deadline)
    seconds = time.monotonic() - started
    events: list[dict[str, Any]] = []
    for page in sfn.get_paginator("get_execution_history").paginate(executionArn=arn):
        events.extend(page["events"])
    return MapRun(described=described, events=events, seconds=seconds)


def state_before_map(
    dependencies: list[dict[str, Any]], *, timeout_seconds: int, max_concurrency: int = 40
) -> dict[str, Any]:
    """The parent's state as the Map starts: its input, defaults filled in, and the count."""
    return {
        "payload_id": None,
        "timeout_seconds": timeout_seconds,
        "max_concurrency": max_concurrency,
        "count": len(dependencies),
        "dependencies": dependencies,
    }


def callback_outputs(stack: LocalStack, execution_arn: str) -> list[dict[str, Any]]:
    """What the tracker sent a parent with ``SendTaskSuccess`` (its ``TaskSucceeded`` events).

    The parent's own output keeps only the payload id and ``replayed`` of each; the
    full callback output (the public contract: state, execution ARN, result) is here.
    """
    sfn = stack.client("stepfunctions")
    outputs: list[dict[str, Any]] = []
    for page in sfn.get_paginator("get_execution_history").paginate(executionArn=execution_arn):
        outputs.extend(
            json.loads(event["taskSucceededEventDetails"]["output"])
            for event in page["events"]
            if event["type"] == "TaskSucceeded"
        )
    return outputs
