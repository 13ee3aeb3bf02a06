"""cirrus-geo's side of cirrus mode, played as data beside a ``Deployment``."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from dependency_tracker.cirrus.models import cirrus_key
from dependency_tracker.payloads.model import ProcessPayload
from tests.conftest import payload, wait_until

if TYPE_CHECKING:
    from collections.abc import Callable

    from dependency_tracker_local.cirrus import CirrusDeployment
    from tests.unit.template_contract.deployment import Deployment

CIRRUS_WORKFLOW = "cog"
# cirrus names an event's execution by its console URL (the ARN after the last "/").
CONSOLE_EXECUTIONS = "https://console.aws.amazon.com/states/home#/v2/executions/details/"


def for_cirrus(item_id: str, **extra: Any) -> dict[str, Any]:
    """A payload cirrus runs as its workflow ``cirrus-cog``."""
    return payload(item_id, workflow=CIRRUS_WORKFLOW, **extra)


def cirrus_id(item_id: str) -> str:
    """The payload id of ``for_cirrus(item_id)``."""
    return ProcessPayload.model_validate(for_cirrus(item_id)).id


@dataclass
class CirrusAtWork:
    """cirrus-geo's part, as data: what its process and update-state Lambdas write and announce.

    No cirrus code runs here (the main suite cannot import it; tests/cirrus runs the real
    Lambdas). For each payload on cirrus's process queue this writes cirrus's state item as
    ``StateDB`` does (claim appending the run's ARN, then PROCESSING, then the end), and after
    each write publishes the event ``WorkflowEventManager`` would, with its ``event_type``
    attribute. ``plan`` gives each run's end by item id: a state, ``"lost"`` (SUCCEEDED, its
    event never sent) or ``"refused"`` (no item, NOT_A_PROCESS_PAYLOAD).
    """

    deployment: Deployment
    plan: dict[str, list[str]]
    announced: list[str] = field(default_factory=list)

    @property
    def cirrus(self) -> CirrusDeployment:
        assert self.deployment.cirrus is not None
        return self.deployment.cirrus

    def step(self) -> int:
        """Take what is on cirrus's process queue; how many messages."""
        outputs = self.cirrus.outputs
        sqs = self.deployment.sqs
        messages = sqs.receive_message(
            QueueUrl=outputs["CirrusProcessQueueUrl"], MaxNumberOfMessages=10
        ).get("Messages", [])
        seen: set[str] = set()
        for message in messages:
            body = json.loads(message["Body"])
            if set(body) == {"url"}:
                bucket, _, key = body["url"].removeprefix("s3://").partition("/")
                stored = self.deployment.s3.get_object(Bucket=bucket, Key=key)["Body"].read()
                body = json.loads(stored)
            if body["id"] in seen:
                self.announce("DUPLICATE_ID_ENCOUNTERED", body["id"])
            else:
                seen.add(body["id"])
                self.run(body)
            sqs.delete_message(
                QueueUrl=outputs["CirrusProcessQueueUrl"], ReceiptHandle=message["ReceiptHandle"]
            )
        return len(messages)

    def run(self, body: dict[str, Any]) -> None:
        payload_id = body["id"]
        item_id = payload_id.rpartition("/")[2]
        item = self.item(payload_id)
        state = item["state_updated"]["S"].partition("_")[0] if item else None
        replace = bool(body["process"][0].get("replace"))
        if state in {"SUCCEEDED", "INVALID"} and not replace:
            self.announce(f"ALREADY_{state}", payload_id)
            return
        if state in {"CLAIMED", "PROCESSING"}:
            self.announce(f"ALREADY_{state}", payload_id)
            return
        runs = [entry["S"] for entry in item["executions"]["L"]] if item else []
        outcomes = self.plan[item_id]
        outcome = outcomes[min(len(runs), len(outcomes) - 1)]
        if outcome == "refused":
            self.announce("NOT_A_PROCESS_PAYLOAD", payload_id, error="no features")
            return
        machine = self.cirrus.state_machine_arn(CIRRUS_WORKFLOW)
        execution = f"{machine.replace(':stateMachine:', ':execution:')}:{item_id}-{len(runs) + 1}"
        runs.append(execution)
        self.write(payload_id, "CLAIMED", runs)
        self.announce("CLAIMED_PROCESSING", payload_id)
        self.write(payload_id, "PROCESSING", runs)
        self.announce("STARTED_PROCESSING", payload_id, execution=execution)
        end = "SUCCEEDED" if outcome == "lost" else outcome
        error = {"FAILED": "TaskFailed: it broke", "INVALID": "InvalidInput: bad"}.get(end)
        self.write(payload_id, end, runs, last_error=error)
        if outcome != "lost":
            self.announce(end, payload_id, execution=execution, error=error)

    def item(self, payload_id: str) -> dict[str, Any] | None:
        found: dict[str, Any] | None = self.deployment.dynamodb.get_item(
            TableName=self.cirrus.outputs["CirrusStateTableName"],
            Key={name: {"S": value} for name, value in cirrus_key(payload_id).items()},
            ConsistentRead=True,
        ).get("Item")
        return found

    def write(
        self, payload_id: str, state: str, runs: list[str], last_error: str | None = None
    ) -> None:
        now = datetime.now(UTC).isoformat()
        item: dict[str, Any] = {
            **{name: {"S": value} for name, value in cirrus_key(payload_id).items()},
            "state_updated": {"S": f"{state}_{now}"},
            "created": {"S": now},
            "updated": {"S": now},
            "executions": {"L": [{"S": run} for run in runs]},
        }
        if last_error is not None:
            item["last_error"] = {"S": last_error}
        self.deployment.dynamodb.put_item(
            TableName=self.cirrus.outputs["CirrusStateTableName"], Item=item
        )

    def announce(self, event_type: str, payload_id: str, **extra: str | None) -> None:
        """Publish as cirrus does: the event as the message, its type as an attribute."""
        event = {"event_type": event_type, "payload_id": payload_id, **extra}
        if event.get("execution"):
            event["execution"] = f"{CONSOLE_EXECUTIONS}{event['execution']}"
        self.deployment.session.client("sns").publish(
            TopicArn=self.cirrus.outputs["CirrusWorkflowEventTopicArn"],
            Message=json.dumps({k: v for k, v in event.items() if v}),
            MessageAttributes={"event_type": {"DataType": "String", "StringValue": event_type}},
        )
        self.announced.append(event_type)


def run_until(deployment: Deployment, cirrus: CirrusAtWork, done: Callable[[], bool]) -> None:
    """Pump the tracker and let cirrus work until ``done`` and nothing moves any more."""

    def quiet() -> bool:
        moved = deployment.pump() + cirrus.step()
        return moved == 0 and done()

    wait_until(quiet, timeout=30)
