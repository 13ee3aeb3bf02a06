"""Write the example state machines of ``examples/`` from :mod:`dependency_tracker.asl`.

Run ``.venv/bin/python examples/build.py`` after changing the helper or an example
here; ``tests/e2e/test_examples.py`` fails while a file differs from what this
builds, and runs every example on the embedded stack.

Placeholders (``${ProcessQueueUrl}``, ``${WaitForDependenciesStateMachineArn}``,
``${Partition}``, the partition of every service-integration ARN) are left for your
deployment to fill in: SAM's ``DefinitionSubstitutions``
(``examples/sam/template.yaml``), CDK's ``definition_substitutions``, or
``dependency_tracker_local.definitions.render``.
"""
# ruff: noqa: INP001  (a script beside the examples, not a package)

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from dependency_tracker.asl import (
    CALLBACK_TIMEOUT,
    JOIN_ERRORS,
    WAIT_ERRORS,
    join_state,
    wait_state,
)

HERE = Path(__file__).resolve().parent
QUEUE_URL = "${ProcessQueueUrl}"
PARTITION = "${Partition}"
TIMED_OUT = "DependencyTimedOut"


# Why a join example takes an optional payload_id (its DependencyCycle Catch needs it).
WAITS_AS = (
    "payload_id (optional) is the id this parent waits as, so a member that waits on it is "
    "refused with DependencyCycle."
)


def _with_defaults(defaults: str) -> str:
    """The input merged over ``defaults`` (JSON text), so optional fields resolve later."""
    return f"States.JsonMerge(States.StringToJson('{defaults}'), $, false)"


def _fail_states(names: tuple[str, ...]) -> dict[str, Any]:
    """One Fail state per error, raising it again under its own name, plus the timeout's."""
    states: dict[str, Any] = {
        name: {"Type": "Fail", "Error": name, "CausePath": "$.error.Cause"} for name in names
    }
    states[TIMED_OUT] = {
        "Type": "Fail",
        "Error": TIMED_OUT,
        "Cause": "the dependencies did not finish within the callback timeout",
    }
    return states


def _same_names(names: tuple[str, ...]) -> dict[str, str]:
    """``on_error`` sending each error to the Fail state of its name (timeout: its own)."""
    return {**{name: name for name in names}, CALLBACK_TIMEOUT: TIMED_OUT}


def single_wait() -> dict[str, Any]:
    """Wait on one payload (``$.tile``), then use the items it produced."""
    return {
        "Comment": "Waits on one payload through the dependency tracker, then uses the STAC "
        'items it produced. Input: {"tile": <cirrus payload or {"url": "s3://..."}>, "payload_id": '
        '"optional id of this waiting payload"}.',
        "StartAt": "ApplyDefaults",
        "States": {
            "ApplyDefaults": {
                "Type": "Pass",
                "Comment": "payload_id is optional in the input; the wait reads it.",
                "Parameters": {"args.$": _with_defaults('{"payload_id": null}')},
                "OutputPath": "$.args",
                "Next": "WaitForTile",
            },
            "WaitForTile": wait_state(
                QUEUE_URL,
                comment="Sends the tile to the tracker with this task's token; waits for its end.",
                payload_path="$.tile",
                waiter_payload_id_path="$.payload_id",
                result_path="$.waited",
                timeout_seconds=600,
                next_state="HasItems",
                partition=PARTITION,
                on_error=_same_names(WAIT_ERRORS),
            ),
            "HasItems": {
                "Type": "Choice",
                "Comment": 'A result too large to keep inline arrives as {"url": "s3://..."}.',
                "Choices": [
                    {"Variable": "$.waited.result.items", "IsPresent": True, "Next": "UseItems"}
                ],
                "Default": "ResultByReference",
            },
            "UseItems": {
                "Type": "Pass",
                "Comment": "Your next step: here it keeps what it needs of the tracker's output.",
                "Parameters": {
                    "tile_id.$": "$.waited.payload_id",
                    "replayed.$": "$.waited.replayed",
                    "item_count.$": "States.ArrayLength($.waited.result.items)",
                    "items.$": "$.waited.result.items",
                },
                "End": True,
            },
            "ResultByReference": {
                "Type": "Pass",
                "Parameters": {
                    "tile_id.$": "$.waited.payload_id",
                    "replayed.$": "$.waited.replayed",
                    "result.$": "$.waited.result",
                },
                "End": True,
            },
            **_fail_states(WAIT_ERRORS),
        },
    }


def join_quorum() -> dict[str, Any]:
    """Quorum: k of n (``$.quorum`` of ``$.tiles``), one token; resumes once k succeeded."""
    return {
        "Comment": "Waits until `quorum` of the tiles succeeded (null or absent: all of them) with "
        'one task token, and fails as soon as that became impossible. Input: {"tiles": [payload '
        'or {"url": ...}, ...], "quorum": 2, "payload_id": "s2/mosaic-1"}; ' + WAITS_AS,
        "StartAt": "ApplyDefaults",
        "States": {
            "ApplyDefaults": {
                "Type": "Pass",
                "Parameters": {"args.$": _with_defaults('{"quorum": null, "payload_id": null}')},
                "OutputPath": "$.args",
                "Next": "WaitForQuorum",
            },
            "WaitForQuorum": join_state(
                QUEUE_URL,
                payloads_path="$.tiles",
                quorum_path="$.quorum",
                waiter_payload_id_path="$.payload_id",
                result_path="$.joined",
                timeout_seconds=600,
                next_state="UseSummary",
                partition=PARTITION,
                on_error=_same_names(JOIN_ERRORS),
            ),
            "UseSummary": {
                "Type": "Pass",
                "Comment": "Who succeeded (ids), failed ({payload_id, state, error}), is running.",
                "Parameters": {
                    "counts.$": "$.joined.counts",
                    "succeeded.$": "$.joined.succeeded",
                    "failed.$": "$.joined.failed",
                    "pending.$": "$.joined.pending",
                },
                "End": True,
            },
            **_fail_states(JOIN_ERRORS),
        },
    }


def join_either_or() -> dict[str, Any]:
    """Either-or: the first of ``$.candidates`` to succeed wins."""
    return {
        "Comment": "Either-or: resumes when the first candidate succeeded and names it (winner); "
        'fails with QuorumUnreachable only when every candidate failed. Input: {"candidates": '
        '[payload or {"url": ...}, ...], "payload_id": "s2/mosaic-1"}; ' + WAITS_AS,
        "StartAt": "ApplyDefaults",
        "States": {
            "ApplyDefaults": {
                "Type": "Pass",
                "Parameters": {"args.$": _with_defaults('{"payload_id": null}')},
                "OutputPath": "$.args",
                "Next": "FirstToSucceed",
            },
            "FirstToSucceed": join_state(
                QUEUE_URL,
                payloads_path="$.candidates",
                quorum=1,
                waiter_payload_id_path="$.payload_id",
                result_path="$.race",
                timeout_seconds=600,
                next_state="UseWinner",
                partition=PARTITION,
                on_error=_same_names(JOIN_ERRORS),
            ),
            "UseWinner": {
                "Type": "Pass",
                "Parameters": {"winner.$": "$.race.winner", "also_failed.$": "$.race.failed"},
                "End": True,
            },
            **_fail_states(JOIN_ERRORS),
        },
    }


def join_manifest() -> dict[str, Any]:
    """All of the members a manifest names (``$.manifest_url``), with a join id of its own."""
    return {
        "Comment": "Waits on every member of a manifest (an s3:// JSON Lines or JSON array of "
        'payloads or {"url": ...}; `dependency-tracker publish --manifest DIR` uploads one and '
        "prints its url). The join gets an id first, so its row (payload_id join#<join_id>, "
        "waiter_id join) can be read after a timeout. Input: "
        '{"manifest_url": "s3://bucket/manifests/....jsonl", "payload_id": "s2/mosaic-1"}; '
        + WAITS_AS,
        "StartAt": "ApplyDefaults",
        "States": {
            "ApplyDefaults": {
                "Type": "Pass",
                "Parameters": {"args.$": _with_defaults('{"payload_id": null}')},
                "OutputPath": "$.args",
                "Next": "NameTheJoin",
            },
            "NameTheJoin": {
                "Type": "Pass",
                "Parameters": {"join_id.$": "States.UUID()"},
                "ResultPath": "$.join",
                "Next": "WaitForAll",
            },
            "WaitForAll": join_state(
                QUEUE_URL,
                payloads_path=None,
                payloads_url_path="$.manifest_url",
                join_id_path="$.join.join_id",
                waiter_payload_id_path="$.payload_id",
                result_path="$.joined",
                timeout_seconds=3600,
                next_state="UseSummary",
                partition=PARTITION,
                on_error=_same_names(JOIN_ERRORS),
            ),
            "UseSummary": {
                "Type": "Pass",
                "Parameters": {
                    "join_id.$": "$.joined.join_id",
                    "total.$": "$.joined.total",
                    "counts.$": "$.joined.counts",
                },
                "End": True,
            },
            **_fail_states(JOIN_ERRORS),
        },
    }


def nested() -> dict[str, Any]:
    """Run the stack's ``wait-for-dependencies`` as a step, and fail with its error name."""
    return {
        "Comment": "Nests the tracker's wait-for-dependencies state machine "
        "(startExecution.sync:2) and re-raises the child's error name (DependencyFailed, "
        "DependencyTimedOut, ...), which Step Functions reports as States.TaskFailed with the "
        "child's DescribeExecution as the cause. "
        'Input: {"dependencies": [payload or {"url": ...}, ...], "payload_id": "optional"}.',
        "StartAt": "ApplyDefaults",
        "States": {
            "ApplyDefaults": {
                "Type": "Pass",
                "Parameters": {"args.$": _with_defaults('{"payload_id": null}')},
                "OutputPath": "$.args",
                "Next": "WaitForDependencies",
            },
            "WaitForDependencies": {
                "Type": "Task",
                "Resource": f"arn:{PARTITION}:states:::states:startExecution.sync:2",
                "Parameters": {
                    "StateMachineArn": "${WaitForDependenciesStateMachineArn}",
                    # What AWS names an unnamed child; moto names them all "None".
                    "Name.$": "States.UUID()",
                    "Input": {
                        "dependencies.$": "$.dependencies",
                        "payload_id.$": "$.payload_id",
                        "timeout_seconds": 600,
                        "AWS_STEP_FUNCTIONS_STARTED_BY_EXECUTION_ID.$": "$$.Execution.Id",
                    },
                },
                "Comment": "The child's output: {payload_id, status, dependencies: [...]}.",
                "ResultSelector": {"dependencies.$": "$.Output.dependencies"},
                "ResultPath": "$.waited",
                "Catch": [
                    {
                        "ErrorEquals": ["States.TaskFailed"],
                        "ResultPath": "$.error",
                        "Next": "ReadChildError",
                    }
                ],
                "Next": "UseDependencies",
            },
            "UseDependencies": {
                "Type": "Pass",
                "Parameters": {
                    "payload_id.$": "$.payload_id",
                    "dependencies.$": "$.waited.dependencies",
                },
                "End": True,
            },
            "ReadChildError": {
                "Type": "Pass",
                "Comment": "The cause is the child's DescribeExecution; its Error: the tracker's.",
                "Parameters": {"child.$": "States.StringToJson($.error.Cause)"},
                "ResultPath": "$.failure",
                "Next": "ChildFailed",
            },
            "ChildFailed": {
                "Type": "Fail",
                "ErrorPath": "$.failure.child.Error",
                "CausePath": "$.error.Cause",
            },
        },
    }


EXAMPLES = {
    "single-wait/parent.asl.json": single_wait,
    "join/quorum.asl.json": join_quorum,
    "join/either-or.asl.json": join_either_or,
    "join/manifest.asl.json": join_manifest,
    "nested/parent.asl.json": nested,
}


def rendered(build: Any) -> str:
    """The text of one example file."""
    return json.dumps(build(), indent=2) + "\n"


def main() -> int:
    """Write every example; with ``--check``, only say which differ (exit 1)."""
    check = "--check" in sys.argv[1:]
    stale = []
    for name, build in EXAMPLES.items():
        path = HERE / name
        text = rendered(build)
        if path.exists() and path.read_text(encoding="utf-8") == text:
            continue
        stale.append(name)
        if not check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    for name in stale:
        print(f"{'differs' if check else 'wrote'}: examples/{name}")  # noqa: T201
    return 1 if check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
