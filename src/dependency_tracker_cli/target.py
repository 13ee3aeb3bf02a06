"""Where a command acts: an AWS session and the tracker's resources.

The same commands work against ``dependency-tracker serve`` (``--endpoint-url``)
and against a deployed stack (``--stack-name``: names come from the stack's
CloudFormation outputs; ``--prefix``: names follow the template's naming rule).
"""

from __future__ import annotations

import difflib
import ipaddress
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, Self
from urllib.parse import urlparse

import boto3
from botocore.config import Config

from dependency_tracker.app import App
from dependency_tracker.core import settings
from dependency_tracker.core.errors import UnknownWorkflowError
from dependency_tracker.payloads.bucket import PayloadBucket
from dependency_tracker_cli.readmodel import CirrusReader, PayloadReader, TrackerReader

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from dependency_tracker.joins.store import JoinStore
    from dependency_tracker.payloads.state_table import StateTable
    from dependency_tracker.table.dependency_table import DependencyTable

_CONFIG = Config(retries={"mode": "standard"})
# Known workflows an unknown-workflow error lists (the rest are counted).
_LISTED_WORKFLOWS = 8
# Cirrus names its state table {prefix}-state (as --cirrus-prefix reads it).
_CIRRUS_STATE_SUFFIX = "-state"
# Each handler's output naming its function, and its name under the template's rule.
_FUNCTIONS = (
    ("ProcessFunctionName", "process"),
    ("UpdateStateFunctionName", "update-state"),
    ("CallbackFunctionName", "callback"),
    ("SweeperFunctionName", "sweeper"),
    ("CirrusEventsFunctionName", "cirrus-events"),
)
# A local endpoint without configured credentials or region gets these.
LOCAL_REGION = "us-east-1"
LOCAL_CREDENTIALS = ("testing", "testing")


@dataclass(frozen=True)
class ConnectionOptions:
    """The options every AWS-facing command takes."""

    endpoint_url: str | None = None
    region: str | None = None
    profile: str | None = None
    stack_name: str | None = None
    prefix: str = settings.DEFAULT_PREFIX


@dataclass(frozen=True)
class CirrusOptions:
    """Cirrus-mode options of the commands that read payload state (``--cirrus-prefix``)."""

    prefix: str | None = None
    state_table: str | None = None


@dataclass(frozen=True)
class ResourceNames:
    """The tracker's resources, as far as names and outputs tell them.

    Queue URLs are ``None`` when they must be looked up by queue name.
    """

    prefix: str
    state_table: str
    dependency_table: str
    process_queue_name: str
    process_dlq_name: str
    process_queue_url: str | None = None
    process_dlq_url: str | None = None
    payload_bucket: str | None = None
    cirrus_state_table: str | None = None
    # (handler, function name) the outputs give; the others follow {prefix}-{handler}.
    functions: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_outputs(cls, outputs: Mapping[str, Any], *, prefix: str) -> Self:
        """Names from stack outputs (``template.yaml``, or ``serve``'s outputs file).

        Outputs win; what they lack follows the template's ``{Prefix}-...`` rule,
        with the stack's own ``Prefix`` output when there is one.
        """
        prefix = str(outputs.get("Prefix") or prefix)

        def output(key: str) -> str | None:
            value = outputs.get(key)
            return str(value) if value else None

        return cls(
            prefix=prefix,
            state_table=output("StateTableName") or f"{prefix}-state",
            dependency_table=output("DependencyTableName") or f"{prefix}-dependencies",
            process_queue_name=f"{prefix}-process",
            process_dlq_name=f"{prefix}-process-dlq",
            process_queue_url=output("ProcessQueueUrl"),
            process_dlq_url=output("ProcessDlqUrl"),
            payload_bucket=output("PayloadBucketName"),
            cirrus_state_table=output("CirrusStateTableName"),
            functions=tuple(
                (handler, name) for key, handler in _FUNCTIONS if (name := output(key))
            ),
        )

    @property
    def log_groups(self) -> tuple[str, ...]:
        """The handlers' CloudWatch log groups: ``/aws/lambda/{function name}``."""
        named = dict(self.functions)
        return tuple(
            f"/aws/lambda/{named.get(handler, f'{self.prefix}-{handler}')}"
            for _, handler in _FUNCTIONS
        )


def stack_outputs(cloudformation: Any, stack_name: str) -> dict[str, str]:
    """``{OutputKey: OutputValue}`` of a CloudFormation stack (``DescribeStacks``)."""
    stacks = cloudformation.describe_stacks(StackName=stack_name)["Stacks"]
    return {
        str(output["OutputKey"]): str(output["OutputValue"])
        for stack in stacks[:1]
        for output in stack.get("Outputs", [])
    }


def is_loopback(endpoint_url: str | None) -> bool:
    """True for ``http://localhost:...``, ``http://127.0.0.1:...`` and ``http://[::1]:...``."""
    if not endpoint_url:
        return False
    host = urlparse(endpoint_url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class WorkflowNotDeployedError(UnknownWorkflowError):
    """An unknown workflow, with what the stack has instead (``hint``: the nearest, the known)."""

    def __init__(self, workflow: str, state_machine: str, known: Iterable[str]) -> None:
        super().__init__(workflow, state_machine)
        self.known = sorted(known)
        self.hint = workflow_hint(workflow, self.known, prefix=state_machine[: -len(workflow)])


def workflow_hint(workflow: str, known: list[str], *, prefix: str) -> str:
    """``did you mean 'x'? known workflows: a, b, ...`` (the nearest only when one is close)."""
    if not known:
        return (
            f"no state machine is named {prefix}...: check --prefix or --stack-name "
            "(in cirrus mode --cirrus-prefix), --region and --endpoint-url"
        )
    listed = ", ".join(known[:_LISTED_WORKFLOWS])
    if len(known) > _LISTED_WORKFLOWS:
        listed += f", ... ({len(known)} in all)"
    close = difflib.get_close_matches(workflow, known, n=1)
    nearest = f"did you mean {close[0]!r}? " if close else ""
    return f"{nearest}known workflows: {listed}"


class Target:
    """A session bound to the options, and the stores and queues it reaches."""

    def __init__(self, options: ConnectionOptions) -> None:
        self.options = options
        self.cirrus_options = CirrusOptions()
        self._clients: dict[str, Any] = {}

    @cached_property
    def session(self) -> boto3.session.Session:
        """The boto3 session: profile and region from the options or the environment.

        A loopback endpoint (``serve``) works without any AWS configuration.
        """
        options = self.options
        session = boto3.session.Session(profile_name=options.profile, region_name=options.region)
        local = is_loopback(options.endpoint_url)
        region = session.region_name or (LOCAL_REGION if local else None)
        if local and options.profile is None and session.get_credentials() is None:
            return boto3.session.Session(
                aws_access_key_id=LOCAL_CREDENTIALS[0],
                aws_secret_access_key=LOCAL_CREDENTIALS[1],
                region_name=region,
            )
        if region != session.region_name:
            return boto3.session.Session(profile_name=options.profile, region_name=region)
        return session

    def client(self, service: str) -> Any:
        """A low-level client of ``service`` at the endpoint (one per service)."""
        if service not in self._clients:
            self._clients[service] = self.session.client(
                service,  # type: ignore[call-overload]
                endpoint_url=self.options.endpoint_url,
                config=_CONFIG,
            )
        return self._clients[service]

    @cached_property
    def outputs(self) -> dict[str, str]:
        """The stack's outputs with ``--stack-name``, else nothing."""
        if self.options.stack_name is None:
            return {}
        return stack_outputs(self.client("cloudformation"), self.options.stack_name)

    @cached_property
    def names(self) -> ResourceNames:
        """Resource names from the outputs, or the naming rule."""
        return ResourceNames.from_outputs(self.outputs, prefix=self.options.prefix)

    @property
    def prefix(self) -> str:
        """Name prefix of the managed state machines."""
        return self.names.prefix

    @cached_property
    def process_queue_url(self) -> str:
        """URL of the process queue."""
        return self.names.process_queue_url or self._queue_url(self.names.process_queue_name)

    @cached_property
    def process_dlq_url(self) -> str:
        """URL of the process queue's dead-letter queue."""
        return self.names.process_dlq_url or self._queue_url(self.names.process_dlq_name)

    @cached_property
    def app(self) -> App:
        """The runtime's composition root bound to this target: its stores, built once.

        Operator commands read rows and mark them through the same store methods
        the handlers use; they never start a workflow, so no ARN prefix is needed.
        """
        bound = settings.Settings(
            state_table=self.names.state_table,
            dependency_table=self.names.dependency_table,
            workflow_arn_prefix="",
            prefix=self.prefix,
        )
        return App(bound, self.client)

    @property
    def states(self) -> StateTable:
        """The payload state table."""
        return self.app.states

    def use_cirrus(self, *, prefix: str | None, state_table: str | None) -> None:
        """Take the command line's cirrus-mode options (before the first read)."""
        self.cirrus_options = CirrusOptions(prefix=prefix, state_table=state_table)
        self.__dict__.pop("payloads", None)

    @property
    def cirrus_state_table(self) -> str | None:
        """Cirrus's state table in cirrus mode, else None.

        ``--cirrus-prefix`` first (cirrus's naming, ``{prefix}-state``), then the
        stack's ``CirrusStateTableName`` output, then ``$DEPTRACK_CIRRUS_STATE_TABLE``.
        """
        cirrus = self.cirrus_options
        if cirrus.prefix:
            return f"{cirrus.prefix}{_CIRRUS_STATE_SUFFIX}"
        return self.names.cirrus_state_table or cirrus.state_table

    @cached_property
    def payloads(self) -> PayloadReader:
        """Where payload state is read: cirrus's table in cirrus mode, else the tracker's."""
        tracker = TrackerReader(self.states, self.client("dynamodb"))
        table = self.cirrus_state_table
        if table is None:
            return tracker
        return CirrusReader(self.client("dynamodb"), table, tracker)

    @property
    def dependencies(self) -> DependencyTable:
        """The dependency (waiter) table."""
        return self.app.dependencies

    @property
    def joins(self) -> JoinStore:
        """The join rows of the dependency table."""
        return self.app.joins

    @property
    def bucket(self) -> PayloadBucket:
        """Reads ``s3://`` payload pointers."""
        return self.app.bucket

    @cached_property
    def payload_bucket_name(self) -> str:
        """The stack's payload bucket: its output, else the template's naming rule.

        ``{prefix}-payloads-{account}-{region}``, as the template and ``serve`` name it.
        """
        if self.names.payload_bucket:
            return self.names.payload_bucket
        account = str(self.client("sts").get_caller_identity()["Account"])
        return f"{self.prefix}-payloads-{account}-{self.session.region_name}"

    @cached_property
    def payload_bucket(self) -> PayloadBucket:
        """The stack's payload bucket, to write to (a rerun's large document)."""
        return PayloadBucket(self.client("s3"), self.payload_bucket_name)

    def state_machine_names(self) -> set[str]:
        """Names of every state machine in the account and region."""
        names: set[str] = set()
        for page in self.client("stepfunctions").get_paginator("list_state_machines").paginate():
            names.update(str(machine["name"]) for machine in page["stateMachines"])
        return names

    @property
    def workflow_prefix(self) -> str | None:
        """How a workflow's state machine is named: ``{prefix}-{workflow}``.

        The tracker's prefix; in cirrus mode cirrus's (cirrus runs the payloads), from
        ``--cirrus-prefix`` or a state table named as cirrus names it (``{prefix}-state``).
        None in cirrus mode when neither tells it.
        """
        table = self.cirrus_state_table
        if table is None:
            return f"{self.prefix}-"
        if self.cirrus_options.prefix:
            return f"{self.cirrus_options.prefix}-"
        if table.endswith(_CIRRUS_STATE_SUFFIX) and len(table) > len(_CIRRUS_STATE_SUFFIX):
            return table.removesuffix(_CIRRUS_STATE_SUFFIX) + "-"
        return None

    def require_workflows(self, workflows: Iterable[str]) -> None:
        """Check every workflow has its state machine (:attr:`workflow_prefix`).

        Nothing is checked in cirrus mode when cirrus's naming is unknown.

        Raises:
            WorkflowNotDeployedError: The first (in the given order) that has none.
        """
        head = self.workflow_prefix
        if head is None:
            return
        machines = self.state_machine_names()
        for workflow in workflows:
            if f"{head}{workflow}" not in machines:
                known = (name.removeprefix(head) for name in machines if name.startswith(head))
                raise WorkflowNotDeployedError(workflow, f"{head}{workflow}", known)

    def _queue_url(self, name: str) -> str:
        return str(self.client("sqs").get_queue_url(QueueName=name)["QueueUrl"])
