"""``dependency_tracker.asl``: the wait Task states to paste, and the examples built from them."""

from __future__ import annotations

import doctest
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from dependency_tracker import asl
from dependency_tracker.core.enums import DependencyError
from dependency_tracker.intake.parse import read_message
from dependency_tracker_local import definitions

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
QUEUE = "https://sqs.us-east-1.amazonaws.com/123456789012/deptrack-process"


def build_module() -> Any:
    """``examples/build.py``, imported from its path (examples/ is not a package)."""
    spec = importlib.util.spec_from_file_location("examples_build", EXAMPLES / "build.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("examples_build", module)
    spec.loader.exec_module(module)
    return module


def caught(state: dict[str, Any]) -> list[str]:
    return [name for catcher in state["Catch"] for name in catcher["ErrorEquals"]]


def body_of(state: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """The message body as Step Functions would send it, paths replaced by ``values``."""

    def fill(node: Any) -> Any:
        if isinstance(node, dict):
            return {
                key.removesuffix(".$"): values[item] if key.endswith(".$") else fill(item)
                for key, item in node.items()
            }
        return node

    filled: dict[str, Any] = fill(state["Parameters"]["MessageBody"])
    return filled


PAYLOAD = {
    "type": "FeatureCollection",
    "features": [{"type": "Feature", "id": "t-1", "collection": "c"}],
    "process": [{"workflow": "simulate"}],
}
CONTEXT = {"$$.Task.Token": "token-1", "$$.Execution.Id": "arn:aws:states:::execution:p:1"}


def test_every_error_name_the_tracker_sends_is_caught_by_one_of_the_two_states() -> None:
    # GIVEN the public error names, less the one the parent itself raises on a timeout and
    # the one only an operator sends (`release`; a last Catch on States.ALL takes it)
    sent = {error.value for error in DependencyError} - {
        DependencyError.TIMED_OUT.value,
        DependencyError.RELEASED.value,
    }
    # WHEN both states are built with one target for everything
    wait = asl.wait_state(QUEUE, on_error="Failed")
    join = asl.join_state(QUEUE, on_error="Failed", deadline=3600)
    # THEN together they catch every name, each its own plus the callback timeout
    assert set(caught(wait)) | set(caught(join)) == sent | {"States.Timeout"}
    assert caught(wait) == [*asl.WAIT_ERRORS, "States.Timeout"]
    assert caught(join) == [*asl.JOIN_ERRORS, asl.DEADLINE_ERROR, "States.Timeout"]
    # AND a join without a deadline catches no deadline error (a mapping need not name it)
    assert caught(asl.join_state(QUEUE, on_error="Failed")) == [*asl.JOIN_ERRORS, "States.Timeout"]
    assert not any(name.startswith("States.") for name in (*asl.WAIT_ERRORS, *asl.JOIN_ERRORS))


def test_wait_state_sends_the_message_the_tracker_reads() -> None:
    # GIVEN a wait state with the waiting payload's id
    state = asl.wait_state(
        QUEUE, on_error="Failed", payload_path="$.tile", waiter_payload_id_path="$.me"
    )
    # WHEN Step Functions fills in its paths
    body = body_of(state, {"$.tile": PAYLOAD, "$.me": "p/1", **CONTEXT})
    # THEN the tracker reads a process message with the callback
    message = read_message(json.dumps(body))
    assert message.payload.id == "c/workflow-simulate/t-1"  # type: ignore[union-attr]
    assert body["callback"] == {
        "task_token": "token-1",
        "parent_execution": CONTEXT["$$.Execution.Id"],
        "waiter_payload_id": "p/1",
    }
    assert state["Resource"] == "arn:aws:states:::sqs:sendMessage.waitForTaskToken"
    assert (state["TimeoutSeconds"], state["ResultPath"], state["End"]) == (
        300,
        "$.dependency",
        True,
    )


def test_join_state_sends_a_join_with_a_list_or_a_manifest() -> None:
    # GIVEN an either-or over a list, and an all-of over a manifest with its own join id
    listed = asl.join_state(QUEUE, on_error="F", quorum=1, next_state="Next")
    manifest = asl.join_state(
        QUEUE,
        on_error="F",
        payloads_path=None,
        payloads_url_path="$.url",
        join_id_path="$.id",
        timeout_seconds=None,
        timeout_seconds_path="$.timeout",
    )
    # WHEN their paths are filled
    one = body_of(listed, {"$.payloads": [PAYLOAD], **CONTEXT})
    url = body_of(manifest, {"$.url": "s3://b/m.jsonl", "$.id": "j-1", **CONTEXT})
    # THEN each is a join message as the contract has it
    assert one["join"]["quorum"] == 1
    assert one["payloads"] == [PAYLOAD]
    assert url["payloads_url"] == "s3://b/m.jsonl"
    assert url["join"]["join_id"] == "j-1"
    assert "quorum" not in url["join"]  # all of them
    assert listed["Next"] == "Next"
    assert manifest["TimeoutSecondsPath"] == "$.timeout"
    assert "TimeoutSeconds" not in manifest


def test_join_state_with_a_deadline_sends_what_the_tracker_reads() -> None:
    # GIVEN a quorum join whose deadline comes from the input, needing 2 by then
    state = asl.join_state(QUEUE, on_error="F", quorum=3, deadline_path="$.by", min_succeeded=2)
    # WHEN its paths are filled with an RFC 3339 time
    body = body_of(state, {"$.payloads": [PAYLOAD] * 3, "$.by": "2026-12-01T06:00:00Z", **CONTEXT})
    # THEN the join carries both fields as the contract has them
    assert (body["join"]["deadline"], body["join"]["min_succeeded"]) == (
        "2026-12-01T06:00:00Z",
        2,
    )
    # AND the options that cannot go together are refused
    with pytest.raises(ValueError, match="min_succeeded needs a deadline"):
        asl.join_state(QUEUE, on_error="F", min_succeeded=2)
    with pytest.raises(ValueError, match="at most one of deadline and deadline_path"):
        asl.join_state(QUEUE, on_error="F", deadline=60, deadline_path="$.by")


def test_a_mapping_of_error_targets_groups_them_and_puts_the_catch_all_last() -> None:
    # GIVEN two targets for the four names, the timeout elsewhere, and a catch-all
    on_error = {
        "DependencyFailed": "Retry",
        "DependencyInvalid": "Reject",
        "DependencyAborted": "Retry",
        "DependencyCycle": "Reject",
        "States.Timeout": "TooSlow",
        "States.ALL": "Unexpected",
    }
    # WHEN the Catch list is built
    catch = asl.catchers(asl.WAIT_ERRORS, on_error, "$.oops")
    # THEN one catcher per target in first-seen order, States.ALL alone and last
    assert [(c["ErrorEquals"], c["Next"]) for c in catch] == [
        (["DependencyFailed", "DependencyAborted"], "Retry"),
        (["DependencyInvalid", "DependencyCycle"], "Reject"),
        (["States.Timeout"], "TooSlow"),
        (["States.ALL"], "Unexpected"),
    ]
    assert {c["ResultPath"] for c in catch} == {"$.oops"}


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"on_error": {"DependencyFailed": "F"}}, "missing"),
        ({"on_error": {**dict.fromkeys(asl.WAIT_ERRORS, "F"), "States.Timeout": "T",
                       "DependencyFaild": "F"}}, "unknown"),
        ({"on_error": "F", "timeout_seconds": 0}, "at least 1"),
        ({"on_error": "F", "timeout_seconds_path": "$.t"}, "exactly one"),
        ({"on_error": "F", "payload_path": "payload"}, "JSONPath"),
    ],
)  # fmt: skip
def test_wait_state_refuses_what_would_be_a_broken_state(kwargs: Any, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        asl.wait_state(QUEUE, **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"payloads_url_path": "$.u"}, "exactly one of payloads_path"),
        ({"payloads_path": None}, "exactly one of payloads_path"),
        ({"quorum": 1, "quorum_path": "$.k"}, "at most one"),
        ({"quorum": 0}, "at least 1"),
    ],
)
def test_join_state_refuses_what_would_be_a_broken_state(kwargs: Any, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        asl.join_state(QUEUE, on_error="F", **kwargs)


def test_the_docstring_examples_hold() -> None:
    results = doctest.testmod(asl, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert results.attempted >= 3
    assert results.failed == 0


def test_every_example_file_is_what_the_helper_builds() -> None:
    # GIVEN the examples as shipped and as examples/build.py builds them now
    build = build_module()
    for name, builder in build.EXAMPLES.items():
        # THEN they are the same text: the examples cannot drift from the helper
        shipped = (EXAMPLES / name).read_text(encoding="utf-8")
        assert shipped == build.rendered(builder), f"run examples/build.py: {name} differs"
        # AND each names only the placeholders a deployment fills in
        assert definitions.placeholders(shipped) <= {
            "ProcessQueueUrl",
            "WaitForDependenciesStateMachineArn",
            "Partition",
        }
