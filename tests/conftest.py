"""Shared fixtures: fake credentials, settings from env, moto, real AWS event shapes."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from botocore.exceptions import ClientError
from moto import mock_aws
from moto.dynamodb.models import table as moto_table

from dependency_tracker import app
from dependency_tracker.app import App
from dependency_tracker.core import clients, limits, settings
from dependency_tracker.core.observability import logger
from dependency_tracker.joins.registration_rows import ChunkRows
from dependency_tracker.joins.row_access import RowAccess
from dependency_tracker.joins.store import JoinStore
from dependency_tracker.payloads.bucket import PayloadBucket
from dependency_tracker.payloads.model import ProcessPayload
from dependency_tracker.payloads.state_table import StateTable
from dependency_tracker.table.dependency_table import DependencyTable
from dependency_tracker.table.schema import create_tables
from dependency_tracker_local.context import LocalContext
from dependency_tracker_local.moto_costs import aws_like_costs
from dependency_tracker_local.strict import strict_limits
from dependency_tracker_local.strict import wanted as strict_wanted

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from dependency_tracker.core.enums import PayloadState
    from dependency_tracker.core.settings import Settings
    from dependency_tracker.table.items import PayloadStateItem

REGION = "us-east-1"
ACCOUNT = "123456789012"
PREFIX = "deptrack"
STATE_TABLE = "deptrack-state"
DEPENDENCY_TABLE = "deptrack-dependencies"
WORKFLOW_ARN_PREFIX = f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:{PREFIX}-"
ROLE_ARN = f"arn:aws:iam::{ACCOUNT}:role/deptrack-test"
EVENTS = Path(__file__).parent / "events"
FIXTURES = Path(__file__).parent / "fixtures"


def load_event(name: str) -> dict[str, Any]:
    """A real AWS event shape from tests/events."""
    data: dict[str, Any] = json.loads((EVENTS / name).read_text())
    return data


def load_fixture(name: str) -> dict[str, Any]:
    """A cirrus payload from tests/fixtures."""
    data: dict[str, Any] = json.loads((FIXTURES / name).read_text())
    return data


def code_of(call: Callable[[], object]) -> str | None:
    """The error code a call is refused with (None: accepted)."""
    try:
        call()
    except ClientError as exc:
        return str(exc.response["Error"]["Code"])
    return None


def age_claim(aws: Aws, pid: str, seconds: int) -> None:
    """Pretend the current attempt was claimed ``seconds`` ago."""
    old = (datetime.now(UTC) - timedelta(seconds=seconds)).isoformat()
    aws.dynamodb.update_item(
        TableName=aws.states.table_name,
        Key={"payload_id": {"S": pid}},
        UpdateExpression="SET claimed_at = :old",
        ExpressionAttributeValues={":old": {"S": old}},
    )


def wait_until(predicate: Callable[[], Any], *, timeout: float = 20.0, every: float = 0.05) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"condition not met within {timeout}s")
        time.sleep(every)


@pytest.fixture(scope="session", autouse=True)
def no_real_aws() -> Iterator[None]:
    """Fake credentials everywhere; no test can reach a real endpoint or profile."""
    with pytest.MonkeyPatch.context() as patch:
        for name in ("AWS_ENDPOINT_URL", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
            patch.delenv(name, raising=False)
        patch.setenv("AWS_ACCESS_KEY_ID", "testing")
        patch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        patch.setenv("AWS_DEFAULT_REGION", REGION)
        patch.setenv("AWS_ACCOUNT_ID_ENDPOINT_MODE", "disabled")
        patch.setenv("POWERTOOLS_TRACE_DISABLED", "true")
        yield


def tracker_env(patch: pytest.MonkeyPatch) -> None:
    """Point the tracker's settings at the test tables and prefix."""
    patch.setenv("POWERTOOLS_LOG_LEVEL", "INFO")
    patch.setenv(settings.ENV_STATE_TABLE, STATE_TABLE)
    patch.setenv(settings.ENV_DEPENDENCY_TABLE, DEPENDENCY_TABLE)
    patch.setenv(settings.ENV_WORKFLOW_ARN_PREFIX, WORKFLOW_ARN_PREFIX)
    patch.setenv(settings.ENV_PREFIX, PREFIX)


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The tracker's settings for unit tests (tests/unit makes this autouse)."""
    tracker_env(monkeypatch)
    _clear_caches()
    yield
    _clear_caches()


def _clear_caches() -> None:
    settings.get_settings.cache_clear()
    clients.client.cache_clear()
    fresh_app()


def fresh_app() -> None:
    """Forget the handlers' app: the next invocation builds one from the environment."""
    app.use(None)


@pytest.fixture
def lambda_context() -> LocalContext:
    """A Lambda context for handler calls."""
    return LocalContext(function_name="deptrack-test")


@dataclass
class Aws:
    """Clients and resources of one moto account, shared by a test's fixtures."""

    dynamodb: Any
    sfn: Any
    sqs: Any
    s3: Any
    streams: Any
    settings: Settings
    stream_arn: str
    queue_url: str
    queue_arn: str

    def app(self, settings: Settings | None = None, **parts: Any) -> App:
        """A composition root on this account's clients (``parts`` replace built ones)."""
        clients = {
            "dynamodb": self.dynamodb,
            "stepfunctions": self.sfn,
            "sqs": self.sqs,
            "s3": self.s3,
        }
        return App(settings or self.settings, clients, **parts)

    @property
    def states(self) -> StateTable:
        return StateTable(self.dynamodb, STATE_TABLE)

    @property
    def dependencies(self) -> DependencyTable:
        return DependencyTable(self.dynamodb, DEPENDENCY_TABLE)

    @property
    def joins(self) -> JoinStore:
        return JoinStore(self.dynamodb, DEPENDENCY_TABLE)

    @property
    def chunk_rows(self) -> ChunkRows:
        return ChunkRows(RowAccess(self.dynamodb, DEPENDENCY_TABLE))

    @property
    def bucket(self) -> PayloadBucket:
        return PayloadBucket(self.s3)

    def finished_payload(
        self,
        body: dict[str, Any],
        state: PayloadState,
        *,
        execution_arn: str = "arn:done",
        error: str | None = None,
        cause: str | None = None,
    ) -> PayloadStateItem:
        """Record ``body`` as claimed and ended in ``state`` (attempt 1), as if it ran."""
        model = ProcessPayload.model_validate(body)
        self.states.claim(model, None)
        return self.states.set_final(
            payload_id=model.id,
            workflow=model.workflow,
            state=state,
            execution_arn=execution_arn,
            attempt=1,
            error=error,
            cause=cause,
        )

    def create_workflow(self, workflow: str, definition: dict[str, Any]) -> str:
        """Register ``{prefix}-{workflow}``; returns its ARN."""
        created = self.sfn.create_state_machine(
            name=f"{PREFIX}-{workflow}", roleArn=ROLE_ARN, definition=json.dumps(definition)
        )
        return str(created["stateMachineArn"])

    def wait_for_execution(self, execution_arn: str, timeout: float = 20.0) -> dict[str, Any]:
        """Describe ``execution_arn`` once it has stopped."""

        def stopped() -> dict[str, Any] | None:
            described: dict[str, Any] = self.sfn.describe_execution(executionArn=execution_arn)
            return None if described["status"] == "RUNNING" else described

        result: dict[str, Any] = wait_until(stopped, timeout=timeout)
        return result

    def queued(self) -> list[dict[str, Any]]:
        """Receive (and delete) every message on the process queue: their bodies."""
        bodies: list[dict[str, Any]] = []
        while True:
            response = self.sqs.receive_message(QueueUrl=self.queue_url, MaxNumberOfMessages=10)
            messages = response.get("Messages", [])
            if not messages:
                return bodies
            for message in messages:
                bodies.append(json.loads(message["Body"]))
                self.sqs.delete_message(
                    QueueUrl=self.queue_url, ReceiptHandle=message["ReceiptHandle"]
                )

    def stream_records(self) -> list[dict[str, Any]]:
        """Every record on the dependency table's stream so far."""
        records: list[dict[str, Any]] = []
        description = self.streams.describe_stream(StreamArn=self.stream_arn)["StreamDescription"]
        for shard in description["Shards"]:
            iterator = self.streams.get_shard_iterator(
                StreamArn=self.stream_arn,
                ShardId=shard["ShardId"],
                ShardIteratorType="TRIM_HORIZON",
            )["ShardIterator"]
            records.extend(self.streams.get_records(ShardIterator=iterator)["Records"])
        return records


PASS_WORKFLOW = {"StartAt": "Done", "States": {"Done": {"Type": "Pass", "End": True}}}
FAIL_WORKFLOW = {
    "StartAt": "Boom",
    "States": {"Boom": {"Type": "Fail", "Error": "TaskFailed", "Cause": "simulated failure"}},
}
INVALID_WORKFLOW = {
    "StartAt": "Reject",
    "States": {"Reject": {"Type": "Fail", "Error": "InvalidInput", "Cause": "bad input"}},
}


@contextlib.contextmanager
def aws_account() -> Iterator[Aws]:
    """A moto account executing state machines, with both tables and the process queue.

    moto refuses here what AWS would refuse (the strict layer, as in ``LocalStack``). For a
    scenario a whole module shares; tests take the :func:`aws` fixture.
    """
    strict = strict_limits() if strict_wanted() else contextlib.nullcontext()
    with (
        aws_like_costs(),
        strict,
        mock_aws(config={"stepfunctions": {"execute_state_machine": True}}),
    ):
        session = clients.session()
        dynamodb = session.client("dynamodb")
        stream_arn = create_tables(
            dynamodb, state_table=STATE_TABLE, dependency_table=DEPENDENCY_TABLE
        )
        sqs = session.client("sqs")
        queue_url = sqs.create_queue(
            QueueName="deptrack-process",
            Attributes={"MaximumMessageSize": str(limits.SQS_DEFAULT_MAX_MESSAGE_BYTES)},
        )["QueueUrl"]
        queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])[
            "Attributes"
        ]["QueueArn"]
        yield Aws(
            dynamodb=dynamodb,
            sfn=session.client("stepfunctions"),
            sqs=sqs,
            s3=session.client("s3"),
            streams=session.client("dynamodbstreams"),
            settings=settings.Settings.from_env(),
            stream_arn=stream_arn,
            queue_url=queue_url,
            queue_arn=queue_arn,
        )


@pytest.fixture
def aws(aws_env: None) -> Iterator[Aws]:
    """A moto account of its own for each test (:func:`aws_account`)."""
    with aws_account() as account:
        yield account


def create_workflows(aws: Aws) -> dict[str, str]:
    """Child workflows that succeed, fail, and reject their input."""
    return {
        "pass": aws.create_workflow("pass", PASS_WORKFLOW),
        "fail": aws.create_workflow("fail", FAIL_WORKFLOW),
        "invalid": aws.create_workflow("invalid", INVALID_WORKFLOW),
    }


@pytest.fixture
def workflows(aws: Aws) -> dict[str, str]:
    """Child workflows that succeed, fail, and reject their input."""
    return create_workflows(aws)


def payload(item_id: str = "item-1", workflow: str = "pass", **extra: Any) -> dict[str, Any]:
    """A minimal cirrus payload for one STAC item."""
    body: dict[str, Any] = {
        "type": "FeatureCollection",
        "features": [{"type": "Feature", "id": item_id, "collection": "sentinel-2-l2a"}],
        "process": [{"workflow": workflow}],
    }
    body.update(extra)
    return body


def payload_id(item_id: str = "item-1", workflow: str = "pass") -> str:
    """The cirrus id of :func:`payload`."""
    return f"sentinel-2-l2a/workflow-{workflow}/{item_id}"


@contextlib.contextmanager
def moto_query_page(page_bytes: int) -> Iterator[None]:
    """Make moto end a ``Query``/``Scan`` page after ``page_bytes`` (DynamoDB: 1 MB)."""
    previous = moto_table.RESULT_SIZE_LIMIT
    moto_table.RESULT_SIZE_LIMIT = page_bytes
    try:
        yield
    finally:
        moto_table.RESULT_SIZE_LIMIT = previous


@pytest.fixture
def log_lines() -> Iterator[io.StringIO]:
    """Every record of the tracker's logger, formatted by its own Powertools formatter."""
    with captured_logs() as stream:
        yield stream


@contextlib.contextmanager
def captured_logs() -> Iterator[io.StringIO]:
    """Every record of the tracker's logger while open (the :func:`log_lines` fixture)."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logger.registered_formatter)
    target = logging.getLogger(logger.name)
    previous = target.level
    target.addHandler(handler)
    target.setLevel(logging.DEBUG)
    try:
        yield stream
    finally:
        target.removeHandler(handler)
        target.setLevel(previous)
