"""The subscription's filter, with cirrus-geo 2.0.0's own Lambdas publishing every event.

The tracker's queue is subscribed to cirrus's workflow-event topic with a filter policy on
the ``event_type`` message attribute (template.yaml, ``CirrusWorkflowEventSubscription``; the
embedded stack subscribes with the same one). Here cirrus's real ``process`` and
``update_state`` handlers run the payloads and publish their events; a second queue, subscribed
without a filter, hears everything cirrus announced, and the cirrus-events handler's
invocations show what reached the tracker's queue. moto 5.2.5 applies a subscription's
``FilterPolicy`` (scope ``MessageAttributes``) before it delivers to SQS, raw or not, so the
difference between the two is the filter's work.
"""

from __future__ import annotations

import importlib
import io
import json
from typing import TYPE_CHECKING, Any

import pytest

from dependency_tracker.cirrus.models import WorkflowEventType
from dependency_tracker.handlers import cirrus_events
from dependency_tracker_local import EmbeddedStack
from dependency_tracker_local.queues import queue_arn
from tests.cirrus.conftest import EventQueue
from tests.conftest import wait_until
from tests.e2e.conftest import finished
from tests.unit.template_contract.cfn import Stack, load_template

if TYPE_CHECKING:
    from collections.abc import Iterator

COLLECTION = "filtered"
PARENT_TIMEOUT = 60
# What the filter keeps away: the events that only report progress (docs/cirrus.md).
PROGRESS = {
    "CLAIMED_PROCESSING",
    "STARTED_PROCESSING",
    "ALREADY_PROCESSING",
    "ALREADY_CLAIMED",
    "DUPLICATE_ID_ENCOUNTERED",
}


class Running:
    """The stack, an unfiltered queue on cirrus's topic, and what reached the tracker."""

    def __init__(self, stack: EmbeddedStack, everything: EventQueue) -> None:
        self.stack = stack
        self.everything = everything
        self.delivered: list[dict[str, Any]] = []  # the SQS records the tracker's handler got

    def tracker_heard(self, payload_id: str) -> list[str]:
        """Event types of ``payload_id`` that reached the tracker's cirrus-events queue."""
        events = [json.loads(record["body"]) for record in self.delivered]
        return [e["event_type"] for e in events if e.get("payload_id") == payload_id]

    def cirrus_said(self, payload_id: str) -> list[str]:
        """Event types cirrus published for ``payload_id`` (the unfiltered subscription)."""
        return [e["event_type"] for e in self.everything.events(payload_id)]

    def tracker_queue_empty(self) -> bool:
        attributes = self.stack.client("sqs").get_queue_attributes(
            QueueUrl=self.stack.outputs["CirrusEventQueueUrl"],
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return set(attributes.values()) == {"0"}

    def send_to_cirrus(self, *bodies: dict[str, Any]) -> None:
        """Payloads for cirrus from someone else than the tracker, in one batch."""
        response = self.stack.client("sqs").send_message_batch(
            QueueUrl=self.stack.outputs["CirrusProcessQueueUrl"],
            Entries=[{"Id": str(i), "MessageBody": json.dumps(b)} for i, b in enumerate(bodies)],
        )
        assert not response.get("Failed"), response


@pytest.fixture(scope="module")
def running() -> Iterator[Running]:
    delivered: list[dict[str, Any]] = []
    original = cirrus_events.lambda_handler

    def recording(event: dict[str, Any], context: Any) -> Any:
        delivered.extend(event["Records"])
        return original(event, context)

    with pytest.MonkeyPatch.context() as patch:
        # The stack wraps the handler when its pumps start: record what its queue delivers.
        patch.setattr(cirrus_events, "lambda_handler", recording)
        with EmbeddedStack(
            prefix="deptrack", sink=io.StringIO(), cirrus=True, sweeper_interval=None
        ) as stack:
            assert stack.cirrus is not None
            stack.cirrus.create_test_workflows(stack.client)
            sqs, sns = stack.client("sqs"), stack.client("sns")
            url = sqs.create_queue(QueueName="everything-cirrus-says")["QueueUrl"]
            arn = queue_arn(sqs, url)
            sns.subscribe(
                TopicArn=stack.outputs["CirrusWorkflowEventTopicArn"],
                Protocol="sqs",
                Endpoint=arn,
                Attributes={"RawMessageDelivery": "true"},
            )
            result = Running(stack, EventQueue(sqs=sqs, url=url, raw=True))
            result.delivered = delivered
            yield result
            assert stack.pump_errors == 0


def member(item: str, workflow: str = "succeed", **process: Any) -> dict[str, Any]:
    return {
        "type": "FeatureCollection",
        "features": [{"type": "Feature", "id": item, "collection": COLLECTION}],
        "process": [{"workflow": workflow, "upload_options": {}, "tasks": {}, **process}],
    }


def pid(item: str, workflow: str = "succeed") -> str:
    return f"{COLLECTION}/workflow-{workflow}/{item}"


def wait(stack: EmbeddedStack, name: str, *payloads: dict[str, Any]) -> dict[str, Any]:
    """A wait-for-dependencies parent on ``payloads``, once it stopped."""
    execution = stack.client("stepfunctions").start_execution(
        stateMachineArn=stack.outputs["StateMachines"]["wait-for-dependencies"],
        name=name,
        input=json.dumps({"timeout_seconds": PARENT_TIMEOUT, "dependencies": list(payloads)}),
    )["executionArn"]
    return finished(stack, execution)


def test_the_stack_subscribes_with_the_template_s_filter(running: Running) -> None:
    stack = running.stack
    sns = stack.client("sns")
    (subscription,) = [
        s
        for s in sns.list_subscriptions_by_topic(
            TopicArn=stack.outputs["CirrusWorkflowEventTopicArn"]
        )["Subscriptions"]
        if s["Endpoint"] == stack.outputs["CirrusEventQueueArn"]
    ]
    attributes = sns.get_subscription_attributes(SubscriptionArn=subscription["SubscriptionArn"])[
        "Attributes"
    ]
    template = Stack(load_template(), {"CirrusPrefix": "cirrus"}).resolved_properties(
        "CirrusWorkflowEventSubscription"
    )
    assert attributes["RawMessageDelivery"] == "true"
    assert attributes["FilterPolicyScope"] == template["FilterPolicyScope"] == "MessageAttributes"
    admitted = set(json.loads(attributes["FilterPolicy"])["event_type"])
    assert json.loads(attributes["FilterPolicy"]) == template["FilterPolicy"]
    # every event type cirrus-geo 2.0.0 can publish is either admitted or a progress report,
    # and the filter admits each one the tracker acts on (plus v1's two names)
    cirrus_types = {str(t) for t in importlib.import_module("cirrus.lib.enums").WFEventType}
    assert cirrus_types <= admitted | PROGRESS
    acted_on = {t.value for t in WorkflowEventType if t.may_end or t.refused}
    assert admitted == acted_on
    assert admitted - cirrus_types == {"COMPLETED", "ALREADY_COMPLETED"}


def test_only_the_events_that_end_a_payload_reach_the_tracker(running: Running) -> None:
    stack = running.stack
    # GIVEN parents on a payload that succeeds and one that fails, both run by cirrus
    ok = wait(stack, "filter-ok", member("ok"))
    broken = wait(stack, "filter-broken", member("broken", "fail"))
    # THEN the parents resumed as their payloads ended (the events that matter arrived)
    assert ok["status"] == "SUCCEEDED"
    assert (broken["status"], broken.get("error")) == ("FAILED", "DependencyFailed")
    # AND cirrus announced its claim and start of each as well
    assert wait_until(lambda: running.cirrus_said(pid("ok")) or None) == [
        "CLAIMED_PROCESSING",
        "STARTED_PROCESSING",
        "SUCCEEDED",
    ]
    assert running.cirrus_said(pid("broken", "fail")) == [
        "CLAIMED_PROCESSING",
        "STARTED_PROCESSING",
        "FAILED",
    ]
    # BUT only the end reached the tracker: nothing else on its queue, nothing else handled
    wait_until(running.tracker_queue_empty)
    assert set(running.tracker_heard(pid("ok"))) == {"SUCCEEDED"}
    assert set(running.tracker_heard(pid("broken", "fail"))) == {"FAILED"}


# Tries at sending a payload twice so that cirrus receives both copies in one batch.
ONE_BATCH_TRIES = 4


def sent_twice_in_one_batch(running: Running) -> str:
    """A slow payload sent twice at once, once cirrus said DUPLICATE_ID_ENCOUNTERED: its item.

    ``SendMessageBatch`` adds the two copies one after the other, and the pump may receive
    between them (then cirrus sees two deliveries, not a duplicate in one batch): such a
    try is left to run, and a new payload is sent twice again.
    """
    for attempt in range(ONE_BATCH_TRIES):
        item = f"slow-{attempt}"
        slow = member(item, workflow_options={"wait_seconds": 4})
        running.send_to_cirrus(slow, slow)

        def started(payload_id: str = pid(item)) -> list[str] | None:
            said = running.cirrus_said(payload_id)
            return said if "STARTED_PROCESSING" in said else None

        if "DUPLICATE_ID_ENCOUNTERED" in wait_until(started):
            return item
    raise AssertionError(f"no try of {ONE_BATCH_TRIES} put both copies in one batch")


def test_skips_and_duplicates_stay_away_while_already_succeeded_arrives(
    running: Running,
) -> None:
    # GIVEN a payload cirrus keeps running for four seconds, sent twice in one batch (cirrus
    # drops the copy: DUPLICATE_ID_ENCOUNTERED), then once more while it runs
    # (ALREADY_PROCESSING), and once more after it ended (ALREADY_SUCCEEDED)
    item = sent_twice_in_one_batch(running)
    slow = member(item, workflow_options={"wait_seconds": 4})
    running.send_to_cirrus(slow)
    wait_until(lambda: "SUCCEEDED" in running.cirrus_said(pid(item)) or None)
    running.send_to_cirrus(slow)
    said = wait_until(
        lambda: (s := running.cirrus_said(pid(item))) and "ALREADY_SUCCEEDED" in s and s
    )
    assert set(said) == {
        "CLAIMED_PROCESSING",
        "DUPLICATE_ID_ENCOUNTERED",
        "STARTED_PROCESSING",
        "ALREADY_PROCESSING",
        "SUCCEEDED",
        "ALREADY_SUCCEEDED",
    }
    # THEN the tracker's queue carried only the two events that may end the payload
    wait_until(lambda: "ALREADY_SUCCEEDED" in running.tracker_heard(pid(item)) or None)
    wait_until(running.tracker_queue_empty)
    assert set(running.tracker_heard(pid(item))) == {"SUCCEEDED", "ALREADY_SUCCEEDED"}
    # AND over the whole module, no progress event ever reached it
    heard = {json.loads(record["body"])["event_type"] for record in running.delivered}
    assert heard.isdisjoint(PROGRESS)
    assert heard
