"""Every state machine in ``examples/`` runs on the embedded stack and ends as its README says.

The examples are registered as they are shipped (placeholders filled the way
SAM's ``DefinitionSubstitutions`` fill them) under names outside the tracker's
``{prefix}-`` namespace, so they are parents, not managed workflows. All
dependencies take no time: the module costs a few seconds. The nested example also runs under
``dependency-tracker serve`` (``startExecution.sync:2`` in another process).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from dependency_tracker.joins.manifest import manifest_text
from dependency_tracker_local import definitions
from tests.conftest import wait_until
from tests.e2e.conftest import dependency, dependency_id, finished
from tests.e2e.serving import serving

if TYPE_CHECKING:
    from dependency_tracker_local import LocalStack

pytestmark = pytest.mark.e2e

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
FILES = {
    "single-wait": "single-wait/parent.asl.json",
    "quorum": "join/quorum.asl.json",
    "either-or": "join/either-or.asl.json",
    "manifest": "join/manifest.asl.json",
    "nested": "nested/parent.asl.json",
}
COLLECTION = "examples"
ROLE_ARN = "arn:aws:iam::123456789012:role/example-parent"


def tile(item: str, outcome: str = "succeed") -> dict[str, Any]:
    return dependency(item, outcome=outcome, collection=COLLECTION)


def tile_id(item: str) -> str:
    return dependency_id(item, collection=COLLECTION)


@pytest.fixture(scope="module")
def machines(stack: LocalStack) -> dict[str, str]:
    """Each example as a state machine of its own: name → ARN."""
    sfn = stack.client("stepfunctions")
    substitutions = {
        "ProcessQueueUrl": stack.outputs["ProcessQueueUrl"],
        "WaitForDependenciesStateMachineArn": stack.outputs["StateMachines"][
            "wait-for-dependencies"
        ],
    }
    return {
        name: sfn.create_state_machine(
            name=f"example-{name}",
            roleArn=ROLE_ARN,
            definition=definitions.render(EXAMPLES / path, substitutions),
        )["stateMachineArn"]
        for name, path in FILES.items()
    }


def run(stack: LocalStack, machine: str, name: str, document: dict[str, Any]) -> str:
    response = stack.client("stepfunctions").start_execution(
        stateMachineArn=machine, name=name, input=json.dumps(document)
    )
    return str(response["executionArn"])


@pytest.fixture(scope="module")
def runs(stack: LocalStack, machines: dict[str, str]) -> dict[str, str]:
    """Every example's executions, started together (they run side by side): name → ARN."""
    bucket = stack.outputs["PayloadBucketName"]
    text = manifest_text([tile("m-1"), tile("m-2"), tile("m-3")])
    stack.client("s3").put_object(Bucket=bucket, Key="manifests/example.jsonl", Body=text)
    inputs: dict[str, tuple[str, dict[str, Any]]] = {
        "single-ok": ("single-wait", {"tile": tile("ex-ok")}),
        "single-bad": ("single-wait", {"tile": tile("ex-bad", "fail")}),
        # 2 of 3 tiles (one fails), and 2 of 2 tiles (one fails)
        "quorum-ok": (
            "quorum",
            {"tiles": [tile("q-1"), tile("q-2"), tile("q-3", "fail")], "quorum": 2},
        ),
        "quorum-bad": ("quorum", {"tiles": [tile("q-4"), tile("q-5", "fail")], "quorum": 2}),
        "either-or": ("either-or", {"candidates": [tile("race-bad", "fail"), tile("race-ok")]}),
        "manifest": ("manifest", {"manifest_url": f"s3://{bucket}/manifests/example.jsonl"}),
        "nested-ok": ("nested", {"dependencies": [tile("n-ok")]}),
        "nested-bad": ("nested", {"dependencies": [tile("n-bad", "fail")]}),
    }
    return {
        name: run(stack, machines[example], name, document)
        for name, (example, document) in inputs.items()
    }


def output_of(described: dict[str, Any]) -> dict[str, Any]:
    assert described["status"] == "SUCCEEDED", described
    output: dict[str, Any] = json.loads(described["output"])
    return output


def test_single_wait_uses_the_items_its_dependency_produced(
    stack: LocalStack, runs: dict[str, str]
) -> None:
    # GIVEN the pasted single-wait Task, once on a tile that succeeds and once on one that fails
    # WHEN both end
    # THEN the next state read result.items from the tracker's output
    assert output_of(finished(stack, runs["single-ok"])) == {
        "tile_id": tile_id("ex-ok"),
        "replayed": False,
        "item_count": 1,
        "items": [{"id": "ex-ok", "collection": COLLECTION}],
    }
    # AND the failure went through the Catch list to the Fail state of its name
    failed = finished(stack, runs["single-bad"])
    assert (failed["status"], failed["error"]) == ("FAILED", "DependencyFailed")


def test_quorum_join_resumes_at_k_and_fails_when_k_is_impossible(
    stack: LocalStack, runs: dict[str, str]
) -> None:
    # GIVEN 2 of 3 tiles (one fails), and 2 of 2 tiles (one fails)
    # WHEN both end THEN the first has its summary, the second failed with QuorumUnreachable
    summary = output_of(finished(stack, runs["quorum-ok"]))
    assert summary["counts"]["succeeded"] == 2
    assert set(summary["succeeded"]) == {tile_id("q-1"), tile_id("q-2")}
    failed = finished(stack, runs["quorum-bad"])
    assert (failed["status"], failed["error"]) == ("FAILED", "QuorumUnreachable")


def test_either_or_join_names_its_winner(stack: LocalStack, runs: dict[str, str]) -> None:
    # GIVEN two candidates, one of which fails
    # WHEN the join fires THEN the one that succeeded is the winner
    assert output_of(finished(stack, runs["either-or"]))["winner"] == tile_id("race-ok")


def test_manifest_join_waits_on_every_member_the_manifest_names(
    stack: LocalStack, runs: dict[str, str]
) -> None:
    # GIVEN a manifest of three members in the payload bucket
    # WHEN the example waits on it
    # THEN it resumes once all three succeeded, under the join id it chose
    summary = output_of(finished(stack, runs["manifest"]))
    assert summary["total"] == 3
    assert summary["counts"]["succeeded"] == 3
    assert summary["join_id"]


def test_nested_parent_returns_the_childs_summaries_and_reraises_its_error(
    stack: LocalStack, runs: dict[str, str]
) -> None:
    # GIVEN the stack's wait-for-dependencies nested as a step, once ok and once failing
    # WHEN both end THEN the first has the child's per-dependency summaries
    assert output_of(finished(stack, runs["nested-ok"])) == {
        "payload_id": None,
        "dependencies": [{"payload_id": tile_id("n-ok"), "replayed": False}],
    }
    # AND the second fails with the child's own error name, not States.TaskFailed
    failed = finished(stack, runs["nested-bad"])
    assert (failed["status"], failed["error"]) == ("FAILED", "DependencyFailed")
    assert json.loads(failed["cause"])["Status"] == "FAILED"


def test_nested_parent_runs_under_serve(tmp_path: Path) -> None:
    # GIVEN `dependency-tracker serve` (its own process, nothing patched from this one)
    with serving(tmp_path) as server:
        sfn = server.client("stepfunctions")
        nested = definitions.render(
            EXAMPLES / FILES["nested"],
            {
                "WaitForDependenciesStateMachineArn": server.outputs["StateMachines"][
                    "wait-for-dependencies"
                ]
            },
        )
        machine = sfn.create_state_machine(
            name="example-nested", roleArn=ROLE_ARN, definition=nested
        )["stateMachineArn"]
        # WHEN the nested example waits on a tile through the stack's own parent
        arn = sfn.start_execution(
            stateMachineArn=machine,
            name="nested-serve",
            input=json.dumps({"dependencies": [tile("n-serve")]}),
        )["executionArn"]

        def ended() -> dict[str, Any] | None:
            described: dict[str, Any] = sfn.describe_execution(executionArn=arn)
            return None if described["status"] == "RUNNING" else described

        # THEN startExecution.sync:2 ran the child to its end and handed on its output
        assert output_of(wait_until(ended, timeout=60)) == {
            "payload_id": None,
            "dependencies": [{"payload_id": tile_id("n-serve"), "replayed": False}],
        }
