"""The SAM and CDK fragments in ``examples/``, checked as far as possible without deploying.

SAM: cfn-lint finds nothing, SAM transforms it offline, each parent's definition is an
example file, and its role allows exactly what the parent needs on the tracker's
resources. CDK: the fragment runs against stand-ins for the CDK classes and hands CDK
the helper's Task state, every catcher, and the queue grant.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from cfnlint.api import lint_file

from dependency_tracker import asl
from dependency_tracker_local.definitions import placeholders
from tests.unit.template_contract.cfn import ACCOUNT, PARTITION, REGION, Stack, load_template
from tests.unit.template_contract.transformed import transform

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SAM = EXAMPLES / "sam" / "template.yaml"
QUEUE_ARN = f"arn:aws:sqs:{REGION}:{ACCOUNT}:deptrack-process"
QUEUE_URL = f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/deptrack-process"
MACHINE = f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:deptrack-wait-for-dependencies"
EXECUTION = f"arn:aws:states:{REGION}:{ACCOUNT}:execution:deptrack-wait-for-dependencies:abc"
SYNC_RULE = (
    f"arn:{PARTITION}:events:{REGION}:{ACCOUNT}:rule/"
    "StepFunctionsGetEventsForStepFunctionsExecutionRule"
)
PARAMETERS = {
    "ProcessQueueArn": QUEUE_ARN,
    "ProcessQueueUrl": QUEUE_URL,
    "WaitForDependenciesStateMachineArn": MACHINE,
}


@pytest.fixture(scope="module")
def sam() -> Stack:
    return Stack(load_template(SAM), parameters=PARAMETERS)


def test_sam_fragment_deploys_each_example_with_its_placeholders_filled(sam: Stack) -> None:
    # GIVEN the SAM fragment's parents
    parents = sam.of_type("AWS::Serverless::StateMachine")
    assert parents == ["SingleWaitParent", "QuorumParent", "NestedParent"]
    for name in parents:
        properties = sam.resolved_properties(name)
        # THEN each definition is an example file, and every placeholder in it gets a value
        definition = (SAM.parent / properties["DefinitionUri"]).resolve()
        assert definition.parent.parent == EXAMPLES
        text = definition.read_text(encoding="utf-8")
        assert set(properties["DefinitionSubstitutions"]) == placeholders(text), name
    # AND cfn-lint finds nothing, and SAM transforms it offline into state machines with roles
    assert [str(match) for match in lint_file(SAM)] == []
    transformed = transform(load_template(SAM), parameters=PARAMETERS)
    kinds = [resource["Type"] for resource in transformed["Resources"].values()]
    assert kinds.count("AWS::StepFunctions::StateMachine") == 3
    assert kinds.count("AWS::IAM::Role") == 3


@pytest.mark.parametrize("parent", ["SingleWaitParent", "QuorumParent"])
def test_a_waiting_parent_may_send_to_the_process_queue_and_nothing_else(
    sam: Stack, parent: str
) -> None:
    # GIVEN the parent's statements
    statements = sam.statements(parent)
    # THEN sqs:SendMessage on the process queue is allowed, and on no other queue
    assert sam.allowed(parent, "sqs:SendMessage", QUEUE_ARN)
    assert not sam.allowed(parent, "sqs:SendMessage", QUEUE_ARN + "-dlq")
    assert [s.actions for s in statements] == [("sqs:SendMessage",)]


def test_a_nesting_parent_may_run_wait_for_dependencies_and_follow_it(sam: Stack) -> None:
    # GIVEN the nesting parent's statements
    # THEN it may start the tracker's parent, follow and stop its executions, and use the
    # managed rule .sync needs; it sends nothing to the queue itself
    assert sam.allowed("NestedParent", "states:StartExecution", MACHINE)
    assert not sam.allowed("NestedParent", "states:StartExecution", MACHINE + "-other")
    for action in ("states:DescribeExecution", "states:StopExecution"):
        assert sam.allowed("NestedParent", action, EXECUTION)
    assert not sam.allowed(
        "NestedParent", "states:DescribeExecution", EXECUTION.replace("dependencies", "join")
    )
    for action in ("events:PutTargets", "events:PutRule", "events:DescribeRule"):
        assert sam.allowed("NestedParent", action, SYNC_RULE)
    assert not sam.allowed("NestedParent", "sqs:SendMessage", QUEUE_ARN)


# What CDK's Aws.PARTITION is: a token the synthesised template resolves with AWS::Partition.
PARTITION_TOKEN = "${Token[AWS.Partition.8]}"


def stand_ins() -> dict[str, Any]:
    """Modules named like CDK's, with just what the fragment touches."""
    core = types.ModuleType("aws_cdk")

    class Construct:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            pass

    core.Stack = Construct  # type: ignore[attr-defined]
    core.Duration = mock.MagicMock(name="Duration")  # type: ignore[attr-defined]
    core.Aws = types.SimpleNamespace(PARTITION=PARTITION_TOKEN)  # type: ignore[attr-defined]
    constructs = types.ModuleType("constructs")
    constructs.Construct = Construct  # type: ignore[attr-defined]
    sfn = mock.MagicMock(name="aws_stepfunctions")
    sqs = mock.MagicMock(name="aws_sqs")
    sqs.Queue.from_queue_attributes.return_value.queue_url = QUEUE_URL
    core.aws_stepfunctions = sfn  # type: ignore[attr-defined]
    core.aws_sqs = sqs  # type: ignore[attr-defined]
    return {
        "aws_cdk": core,
        "aws_cdk.aws_stepfunctions": sfn,
        "aws_cdk.aws_sqs": sqs,
        "constructs": constructs,
    }


def test_cdk_fragment_hands_cdk_the_helpers_task_every_catcher_and_the_queue_grant() -> None:
    # GIVEN the fragment, importing stand-ins for aws_cdk
    modules = stand_ins()
    with mock.patch.dict(sys.modules, modules):
        spec = importlib.util.spec_from_file_location(
            "cdk_parent_stack", EXAMPLES / "cdk" / "parent_stack.py"
        )
        assert spec is not None
        assert spec.loader is not None
        fragment = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(fragment)
        # WHEN the stack is built
        fragment.ParentStack(
            None, "Parents", process_queue_arn=QUEUE_ARN, process_queue_url=QUEUE_URL
        )
    sfn, sqs = modules["aws_cdk.aws_stepfunctions"], modules["aws_cdk.aws_sqs"]
    # THEN the custom state is the helper's wait state, less what CDK sets itself
    ((_, name), kwargs) = sfn.CustomState.call_args
    expected = asl.wait_state(
        QUEUE_URL, payload_path="$.tile", result_path="$.waited", timeout_seconds=600,
        on_error="unused", partition=PARTITION_TOKEN,
    )  # fmt: skip
    for key in ("Catch", "End"):
        expected.pop(key)
    assert (name, kwargs["state_json"]) == ("WaitForTile", expected)
    # AND every error the tracker sends, and the timeout, is caught into a Fail state
    wait = sfn.CustomState.return_value
    caught = [name for call in wait.add_catch.call_args_list for name in call.kwargs["errors"]]
    assert caught == [*asl.WAIT_ERRORS, asl.CALLBACK_TIMEOUT]
    failed = {call.kwargs["error"] for call in sfn.Fail.call_args_list}
    assert failed == {*asl.WAIT_ERRORS, "DependencyTimedOut"}
    # AND the state machine may send to the process queue
    queue = sqs.Queue.from_queue_attributes.return_value
    queue.grant_send_messages.assert_called_once_with(sfn.StateMachine.return_value)
