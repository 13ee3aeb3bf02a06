"""CDK (Python) fragment: your own parent state machine with the tracker's wait Task in it.

Copy it into a CDK app (``pip install aws-cdk-lib constructs dependency-tracker``) and
instantiate ``ParentStack(app, "Parents", process_queue_arn=..., process_queue_url=...)``
with the tracker stack's ``ProcessQueueArn`` and ``ProcessQueueUrl`` outputs. The Task
state comes from :func:`dependency_tracker.asl.wait_state`; its Catch list is handed to
CDK with ``add_catch`` (CDK draws the edges to the Fail states and sets ``Next``/``End``
itself when states are chained). ``tests/unit/test_example_fragments.py`` runs this
file against stand-ins for the CDK classes.

Nesting ``wait-for-dependencies`` in CDK is the built-in
``aws_stepfunctions_tasks.StepFunctionsStartExecution`` with
``integration_pattern=sfn.IntegrationPattern.RUN_JOB``: it grants what it needs.
"""
# ruff: noqa: INP001  (a fragment to copy, not a package)

from __future__ import annotations

from typing import Any

from aws_cdk import Aws, Duration, Stack
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct  # noqa: TC002  (as CDK apps import it)

from dependency_tracker.asl import CALLBACK_TIMEOUT, WAIT_ERRORS, wait_state


class ParentStack(Stack):
    """A parent that waits on ``$.tile`` and then keeps the items it produced."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        process_queue_arn: str,
        process_queue_url: str,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        queue = sqs.Queue.from_queue_attributes(
            self, "ProcessQueue", queue_arn=process_queue_arn, queue_url=process_queue_url
        )
        # One Fail state per error the wait can end in, raising it again under its name.
        failures = {
            name: sfn.Fail(self, name, error=name, cause_path="$.error.Cause")
            for name in WAIT_ERRORS
        }
        failures["DependencyTimedOut"] = sfn.Fail(
            self, "DependencyTimedOut", error="DependencyTimedOut", cause="callback timeout"
        )
        state_json = wait_state(
            queue.queue_url,
            payload_path="$.tile",
            result_path="$.waited",
            timeout_seconds=600,
            # The stack's own partition, resolved at deployment (aws, aws-cn, aws-us-gov).
            partition=Aws.PARTITION,
            on_error={
                **{name: name for name in WAIT_ERRORS},
                CALLBACK_TIMEOUT: "DependencyTimedOut",
            },
        )
        catchers = state_json.pop("Catch")
        state_json.pop("End")  # CDK sets Next or End from the chain below
        wait = sfn.CustomState(self, "WaitForTile", state_json=state_json)
        for catcher in catchers:
            wait.add_catch(
                failures[catcher["Next"]],
                errors=catcher["ErrorEquals"],
                result_path=catcher["ResultPath"],
            )
        use_items = sfn.Pass(
            self,
            "UseItems",
            parameters={
                "tile_id.$": "$.waited.payload_id",
                "items.$": "$.waited.result.items",
            },
        )
        parent = sfn.StateMachine(
            self,
            "SingleWaitParent",
            definition_body=sfn.DefinitionBody.from_chainable(wait.next(use_items)),
            timeout=Duration.hours(2),
        )
        # The one permission a parent needs: sending its dependencies to the tracker.
        queue.grant_send_messages(parent)
