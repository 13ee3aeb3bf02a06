"""The cirrus tier: cirrus-geo 2.0.0's own Lambda code in moto, on cirrus's own layout.

cirrus-geo 2.0.0 needs Python >= 3.12 and the project's venv is 3.11, so the
main suite does not collect this directory at all. ``make test-cirrus`` (and
``make test``, after the main suite) runs it from ``.venv-cirrus`` with
``DEPTRACK_CIRRUS_TIER=1``; then a cirrus that does not import is an error,
never a skip: this tier exists to prove the tracker against the real code.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from boto3.dynamodb.types import TypeDeserializer
from moto import mock_aws

from dependency_tracker_local.cirrus import CirrusDeployment
from dependency_tracker_local.moto_costs import aws_like_costs
from dependency_tracker_local.runner import Invoker, PumpRunner
from dependency_tracker_local.strict import strict_limits
from dependency_tracker_local.strict import wanted as strict_wanted
from tests.conftest import ACCOUNT, REGION, wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator

    from dependency_tracker_local.pumps import ExecutionPump, SqsPump

TIER_ENV = "DEPTRACK_CIRRUS_TIER"
IN_TIER = os.environ.get(TIER_ENV) == "1"

if not IN_TIER:
    # The main suite: nothing here is collected (cirrus cannot be installed on 3.11).
    collect_ignore_glob = ["test_*.py"]
else:
    # The tier: a missing or wrong cirrus fails the run at collection.
    if sys.version_info < (3, 12):
        msg = (
            f"{TIER_ENV}=1 but this is Python {sys.version.split()[0]}: cirrus-geo 2.0.0 needs "
            ">= 3.12. Run the tier from .venv-cirrus (make venv-cirrus; make test-cirrus)."
        )
        raise pytest.UsageError(msg)
    try:
        _CIRRUS_VERSION = importlib.metadata.version("cirrus-geo")
    except importlib.metadata.PackageNotFoundError as exc:
        msg = (
            f"{TIER_ENV}=1 but cirrus-geo is not installed in {sys.executable}: "
            "make venv-cirrus builds the tier's environment (.venv-cirrus)."
        )
        raise pytest.UsageError(msg) from exc
    if _CIRRUS_VERSION != "2.0.0":
        msg = f"the cirrus tier is written for cirrus-geo 2.0.0; {_CIRRUS_VERSION} is installed"
        raise pytest.UsageError(msg)

CIRRUS_PREFIX = "cirrus"
COLLECTION = "cirrus-tier"


def pytest_configure(config: pytest.Config) -> None:
    """stactask 0.7.0 warns on every payload cirrus validates: noise, not a finding.

    (Its default for ``upload_options.collections`` is ``{}``, which it then warns is the
    deprecated form.)
    """
    config.addinivalue_line(
        "filterwarnings", "ignore:'upload_options.collections' is deprecated:DeprecationWarning"
    )


@dataclass
class CirrusMoto:
    """One moto account (in-process), set up as ``EmbeddedStack`` sets up its own."""

    region: str = REGION
    account: str = ACCOUNT

    def client(self, service: str) -> Any:
        return boto3.session.Session().client(service, region_name=self.region)  # type: ignore[call-overload]


@pytest.fixture(scope="module")
def cirrus_moto() -> Iterator[CirrusMoto]:
    """moto executing state machines, with the stack's environment, cost model and strict layer.

    As ``EmbeddedStack.start``: account-based DynamoDB endpoints off (moto knows no
    account endpoint), X-Ray off, ``aws_like_costs()`` always and ``strict_limits()``
    unless ``DEPTRACK_STRICT=0``, so cirrus's code meets the limits AWS would enforce.
    """
    strict = strict_limits() if strict_wanted() else contextlib.nullcontext()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AWS_DEFAULT_REGION", REGION)
        patch.setenv("AWS_ACCOUNT_ID_ENDPOINT_MODE", "disabled")
        patch.setenv("POWERTOOLS_TRACE_DISABLED", "true")
        with (
            aws_like_costs(),
            strict,
            mock_aws(config={"stepfunctions": {"execute_state_machine": True}}),
        ):
            yield CirrusMoto()


@dataclass
class EventQueue:
    """An SQS queue subscribed to cirrus's workflow-event topic, and what it received."""

    sqs: Any
    url: str
    raw: bool
    messages: list[dict[str, Any]] = field(default_factory=list)

    def drain(self) -> list[dict[str, Any]]:
        """Receive (and delete) everything available now; every message so far."""
        while True:
            received = self.sqs.receive_message(
                QueueUrl=self.url,
                MaxNumberOfMessages=10,
                MessageAttributeNames=["All"],
                AttributeNames=["All"],
                WaitTimeSeconds=0,
            ).get("Messages", [])
            if not received:
                return self.messages
            self.messages.extend(received)
            self.sqs.delete_message_batch(
                QueueUrl=self.url,
                Entries=[
                    {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                    for i, m in enumerate(received)
                ],
            )

    def event(self, message: dict[str, Any]) -> dict[str, Any]:
        """cirrus's event in a message: the body itself (raw), or the envelope's Message."""
        body: dict[str, Any] = json.loads(message["Body"])
        if self.raw:
            return body
        event: dict[str, Any] = json.loads(body["Message"])
        return event

    def events(self, payload_id: str | None = None) -> list[dict[str, Any]]:
        """cirrus's events so far, in arrival order; only ``payload_id``'s if given."""
        found = [self.event(m) for m in self.drain()]
        return [e for e in found if payload_id is None or e["payload_id"] == payload_id]

    def messages_for(self, payload_id: str) -> list[dict[str, Any]]:
        """The SQS messages (body, attributes) that carried ``payload_id``'s events."""
        return [m for m in self.drain() if self.event(m)["payload_id"] == payload_id]


@dataclass
class Cirrus:
    """A running cirrus deployment: its layout, workflows, pumps and event queues."""

    moto: CirrusMoto
    deployment: CirrusDeployment
    workflows: dict[str, str]
    pumps: dict[str, SqsPump | ExecutionPump]
    runner: PumpRunner
    # Subscribed to the workflow-event topic with raw message delivery (body = cirrus's
    # event, as the tracker's template subscribes) and without (body = SNS's envelope).
    events: EventQueue
    enveloped: EventQueue

    @property
    def outputs(self) -> dict[str, str]:
        return self.deployment.outputs

    def client(self, service: str) -> Any:
        return self.moto.client(service)

    def send(self, *payloads: dict[str, Any] | str) -> None:
        """Put payloads on cirrus's process queue (one batch), as a feeder would."""
        entries = [
            {"Id": str(i), "MessageBody": p if isinstance(p, str) else json.dumps(p)}
            for i, p in enumerate(payloads)
        ]
        response = self.client("sqs").send_message_batch(
            QueueUrl=self.outputs["CirrusProcessQueueUrl"], Entries=entries
        )
        assert not response.get("Failed"), response

    def wait_for(
        self, payload_id: str, event_type: str, *, count: int = 1, timeout: float = 30.0
    ) -> list[dict[str, Any]]:
        """Wait for ``count`` events of ``event_type`` for ``payload_id``; all its events."""

        def arrived() -> list[dict[str, Any]] | None:
            events = self.events.events(payload_id)
            seen = sum(1 for e in events if e["event_type"] == event_type)
            return events if seen >= count else None

        found: list[dict[str, Any]] = wait_until(arrived, timeout=timeout)
        return found

    def state_item(self, payload_id: str) -> dict[str, Any] | None:
        """cirrus's state table item of ``payload_id`` (strongly consistent), plain values."""
        collections, _, rest = payload_id.partition("/workflow-")
        workflow, _, itemids = rest.partition("/")
        response = self.client("dynamodb").get_item(
            TableName=self.outputs["CirrusStateTableName"],
            Key={
                "collections_workflow": {"S": f"{collections}_{workflow}"},
                "itemids": {"S": itemids},
            },
            ConsistentRead=True,
        )
        if "Item" not in response:
            return None
        deserializer = TypeDeserializer()
        return {k: deserializer.deserialize(v) for k, v in response["Item"].items()}

    def executions(self, workflow: str) -> list[dict[str, Any]]:
        """Every execution of ``workflow``'s state machine."""
        sfn = self.client("stepfunctions")
        found: list[dict[str, Any]] = []
        for page in sfn.get_paginator("list_executions").paginate(
            stateMachineArn=self.workflows[workflow]
        ):
            found.extend(page["executions"])
        return found

    def read_s3_json(self, url: str) -> Any:
        """The JSON document at ``s3://bucket/key``."""
        bucket, _, key = url.removeprefix("s3://").partition("/")
        body = self.client("s3").get_object(Bucket=bucket, Key=key)["Body"].read()
        return json.loads(body)


def _event_queue(moto: CirrusMoto, topic_arn: str, name: str, *, raw: bool) -> EventQueue:
    sqs, sns = moto.client("sqs"), moto.client("sns")
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    sns.subscribe(
        TopicArn=topic_arn,
        Protocol="sqs",
        Endpoint=arn,
        Attributes={"RawMessageDelivery": "true" if raw else "false"},
    )
    return EventQueue(sqs=sqs, url=url, raw=raw)


@pytest.fixture(scope="module")
def cirrus(cirrus_moto: CirrusMoto) -> Iterator[Cirrus]:
    """cirrus-geo's process and update_state Lambdas running on a fresh deployment.

    The pumps run under the stack's ``PumpRunner`` and ``Invoker`` (one invocation
    at a time). After the module, no pump round
    may have failed and no status change may have been given up on.
    """
    deployment = CirrusDeployment(prefix=CIRRUS_PREFIX, region=REGION, account=ACCOUNT)
    deployment.create(cirrus_moto.client)
    workflows = deployment.create_test_workflows(cirrus_moto.client)
    topic = deployment.outputs["CirrusWorkflowEventTopicArn"]
    events = _event_queue(cirrus_moto, topic, "tier-cirrus-events", raw=True)
    enveloped = _event_queue(cirrus_moto, topic, "tier-cirrus-events-enveloped", raw=False)
    with pytest.MonkeyPatch.context() as patch:
        for name, value in deployment.environment().items():
            patch.setenv(name, value)
        invoker = Invoker()
        pumps = deployment.pumps(client=cirrus_moto.client, wrap=invoker.wrap)
        runner = PumpRunner(list(pumps.values()), poll_interval=0.05)
        runner.start()
        running = Cirrus(
            moto=cirrus_moto,
            deployment=deployment,
            workflows=workflows,
            pumps=pumps,
            runner=runner,
            events=events,
            enveloped=enveloped,
        )
        try:
            yield running
        finally:
            invoker.close()
            runner.stop(timeout=60)
    assert runner.errors == 0
    executions = pumps["cirrus-executions"]
    assert getattr(executions, "dead_letters", []) == []


def cirrus_payload(
    item_id: str,
    workflow: str,
    *,
    collection: str = COLLECTION,
    **process: Any,
) -> dict[str, Any]:
    """A cirrus process payload for one STAC item; ``process`` adds to its process definition."""
    return {
        "type": "FeatureCollection",
        "features": [{"type": "Feature", "id": item_id, "collection": collection}],
        "process": [{"workflow": workflow, "upload_options": {}, "tasks": {}, **process}],
    }


def cirrus_payload_id(item_id: str, workflow: str, *, collection: str = COLLECTION) -> str:
    """cirrus's id of :func:`cirrus_payload` (``{collections}/workflow-{workflow}/{items}``)."""
    return f"{collection}/workflow-{workflow}/{item_id}"
