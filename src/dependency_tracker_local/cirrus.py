"""A cirrus-geo v2 deployment in moto, run by cirrus-geo's own Lambda code.

cirrus mode (docs/cirrus.md) puts the tracker beside an existing cirrus-geo v2
deployment. To prove it against the real thing, :class:`CirrusDeployment` lays
out in moto what cirrus-geo 2.0.0's CloudFormation creates (names, keys,
indexes, redrive, topics, buckets; see "Where the layout comes from" below) and
runs cirrus's *installed* ``process`` and ``update_state`` Lambda handlers on it
through the embedded stack's existing pumps: an SQS event source mapping on the
process queue, and the EventBridge rule on the workflows' status changes. The
pumps only deliver events; everything cirrus decides, cirrus's code decides.

cirrus-geo 2.0.0 needs Python >= 3.12, and the project runs on 3.11: cirrus is
imported only by :meth:`CirrusDeployment.pumps` (``make venv-cirrus`` builds an
environment where it imports), so this module itself imports anywhere.

Where the layout comes from (cirrus-geo v2.0.0, github.com/cirrus-geo/cirrus-geo):

- ``cloudformation/core/base.yaml``: the state table ``${ResourcePrefix}-state``
  (hash ``collections_workflow``, range ``itemids``, GSIs ``state_updated`` and
  ``updated`` on the same hash key, projection ALL, PAY_PER_REQUEST); the
  process queue ``${ResourcePrefix}-process`` (VisibilityTimeout 180,
  maxReceiveCount 5 into ``${ResourcePrefix}-process-dlq``, 14 days'
  retention); ``${ResourcePrefix}-update-state-dlq``; the SNS topics
  ``${ResourcePrefix}-workflow-event`` and ``${ResourcePrefix}-publish``; the
  buckets ``${ResourcePrefix}-payload-${AWS::AccountId}`` (objects under
  ``${PayloadRootPrefix}/tmp/`` expire after 10 days) and
  ``${ResourcePrefix}-data-${AWS::AccountId}``.
- ``cloudformation/core/functions.yaml``: each Lambda's environment, the
  process queue's event source mapping (BatchSize 10) and the rule
  ``${ResourcePrefix}-update-state-sfn-events`` ("Step Functions Execution
  Status Change" from ``aws.states``, ``stateMachineArn`` prefix
  ``arn:aws:states:${Region}:${Account}:stateMachine:${ResourcePrefix}-``,
  statuses SUCCEEDED, FAILED, ABORTED, TIMED_OUT; dead letters to the
  update-state DLQ).
- ``cloudformation/workflows/minimal/state_machine.yaml``: a workflow is the
  state machine ``${ResourcePrefix}-{workflow}``.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import json
import logging
import os
import sys
from typing import IO, TYPE_CHECKING, Any

from dependency_tracker_local.pumps import ExecutionPump, SqsPump
from dependency_tracker_local.queues import queue_arn

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from dependency_tracker_local.pumps import Handler

DEFAULT_CIRRUS_PREFIX = "cirrus"
# base.yaml's PayloadRootPrefix default: where cirrus keeps payloads in its bucket.
DEFAULT_PAYLOAD_ROOT_PREFIX = "cirrus"
# base.yaml's ProcessQueue: maxReceiveCount 5. Its VisibilityTimeout (180 s) is the one
# value not copied: a payload cirrus failed to take would come back only after 3 minutes.
CIRRUS_MAX_RECEIVE_COUNT = 5
CIRRUS_VISIBILITY_TIMEOUT_SECONDS = 180
LOCAL_VISIBILITY_TIMEOUT_SECONDS = 2
# base.yaml: the DLQ keeps messages 14 days; the payload bucket forgets tmp/ after 10.
_DLQ_RETENTION_SECONDS = 1_209_600
_TMP_EXPIRATION_DAYS = 10
# The process Lambda's event source mapping (functions.yaml).
_PROCESS_BATCH_SIZE = 10
# The two Lambdas this module runs, and the cirrus major version the layout is for.
_PROCESS_MODULE = "cirrus.lambda_functions.process"
_UPDATE_STATE_MODULE = "cirrus.lambda_functions.update_state"
_SUPPORTED_MAJOR = "2"

# Test workflows cirrus can run on moto. A workflow's output must be a valid cirrus
# payload (``id``, ``process``) for update_state to record SUCCEEDED: "succeed" passes its
# input through, as a workflow whose tasks change nothing would. Names hold no "_":
# cirrus keys its state table on "{collections}_{workflow}" and splits on the last "_".
CIRRUS_TEST_WORKFLOWS: dict[str, dict[str, Any]] = {
    # SUCCEEDED. ``process[0].workflow_options.wait_seconds`` (optional) keeps the execution
    # RUNNING that long first, so a test can catch the payload PROCESSING.
    "succeed": {
        "Comment": "Succeeds with its input as output (a valid cirrus output payload).",
        "StartAt": "MaybeWait",
        "States": {
            "MaybeWait": {
                "Type": "Choice",
                "Choices": [
                    {
                        "Variable": "$.process[0].workflow_options.wait_seconds",
                        "IsPresent": True,
                        "Next": "Wait",
                    }
                ],
                "Default": "Done",
            },
            "Wait": {
                "Type": "Wait",
                "SecondsPath": "$.process[0].workflow_options.wait_seconds",
                "Next": "Done",
            },
            "Done": {"Type": "Pass", "End": True},
        },
    },
    # FAILED: update_state records "{Error}: {Cause}" (the cause as is, unless it is JSON
    # with an "errorMessage", as a Lambda task's failure is).
    "fail": {
        "Comment": "Fails: cirrus records FAILED.",
        "StartAt": "Fail",
        "States": {
            "Fail": {
                "Type": "Fail",
                "Error": "WorkflowFailed",
                "Cause": "the cirrus test workflow failed",
            }
        },
    },
    # INVALID: update_state.INVALID_EXCEPTIONS are exactly "cirrus.lib.errors.InvalidInput"
    # and "stactask.exceptions.InvalidInput" (what a stac-task task raises on bad input).
    "invalid": {
        "Comment": "Rejects its input: cirrus records INVALID.",
        "StartAt": "Reject",
        "States": {
            "Reject": {
                "Type": "Fail",
                "Error": "stactask.exceptions.InvalidInput",
                "Cause": "the cirrus test workflow rejected its input",
            }
        },
    },
    # TIMED_OUT: moto 5.2.5 honours a state machine's top-level TimeoutSeconds and stops
    # the execution as TIMED_OUT (with no error or cause); update_state turns the status
    # into "TimedOutError: The step function execution timed out.", state FAILED.
    "timeout": {
        "Comment": "Outlives its TimeoutSeconds: the execution ends TIMED_OUT.",
        "TimeoutSeconds": 1,
        "StartAt": "Wait",
        "States": {"Wait": {"Type": "Wait", "Seconds": 5, "End": True}},
    },
    # cirrus-geo's own example (cloudformation/workflows/minimal/state_machine.yaml):
    # succeeds (output = input) when process[0].succeed is true, else fails with
    # WorkflowMismatch. cirrus's definition tests "$.process[0].succeed" in its Choice, which
    # moto 5.2.5 gets wrong: its JSONPath returns [true], not true, for a field whose parent
    # is an array element (moto's fix for getmoto/moto#7825), so the run always failed. The
    # same logic, with the process definition lifted out first and the payload put back:
    "minimal": {
        "Comment": "Minimal workflow for testing",
        "StartAt": "LiftProcess",
        "States": {
            "LiftProcess": {
                "Type": "Pass",
                "Parameters": {"payload.$": "$", "process.$": "$.process[0]"},
                "Next": "CheckWorkflow",
            },
            "CheckWorkflow": {
                "Type": "Choice",
                "Choices": [
                    {
                        "And": [
                            {"Variable": "$.process.succeed", "IsPresent": True},
                            {"Variable": "$.process.succeed", "BooleanEquals": True},
                        ],
                        "Next": "Success",
                    }
                ],
                "Default": "FailState",
            },
            "Success": {"Type": "Succeed", "OutputPath": "$.payload"},
            "FailState": {
                "Type": "Fail",
                "Error": "WorkflowMismatch",
                "Cause": "The succeed field was not true",
            },
        },
    },
}


class CirrusUnavailableError(RuntimeError):
    """cirrus-geo 2.x cannot be imported in this Python."""


class CirrusDeployment:
    """A cirrus-geo v2 deployment laid out in moto as cirrus's CloudFormation lays it out.

    :meth:`create` makes the resources in the moto account ``client`` reaches,
    :meth:`environment` is what cirrus's Lambdas are configured with (set it in
    the process before :meth:`pumps`), :meth:`create_workflow` registers a
    workflow, and :meth:`pumps` runs cirrus's own handlers on the layout.

    Args:
        prefix: cirrus's ``ResourcePrefix``.
        region: The region of the moto account.
        account: Its account id.
        visibility_timeout: The process queue's visibility timeout, in seconds (cirrus
            deploys 180; shorter here so a message cirrus failed comes back in a test).
        max_receive_count: Receives before SQS moves a message to the DLQ (cirrus: 5).
        payload_root_prefix: cirrus's ``PayloadRootPrefix``.
        log_level: ``CIRRUS_LOG_LEVEL``. cirrus reads it once, when first imported.

    Example:
        >>> deployment = CirrusDeployment(region="us-east-1", account="123456789012")
        >>> deployment.create(stack.client)  # doctest: +SKIP
        >>> os.environ.update(deployment.environment())  # doctest: +SKIP
        >>> pumps = deployment.pumps(client=stack.client, wrap=invoker.wrap)  # doctest: +SKIP
    """

    def __init__(
        self,
        *,
        prefix: str = DEFAULT_CIRRUS_PREFIX,
        region: str,
        account: str,
        visibility_timeout: int = LOCAL_VISIBILITY_TIMEOUT_SECONDS,
        max_receive_count: int = CIRRUS_MAX_RECEIVE_COUNT,
        payload_root_prefix: str = DEFAULT_PAYLOAD_ROOT_PREFIX,
        log_level: str = "WARNING",
    ) -> None:
        self.prefix = prefix
        self.region = region
        self.account = account
        self.visibility_timeout = visibility_timeout
        self.max_receive_count = max_receive_count
        self.payload_root_prefix = payload_root_prefix
        self.log_level = log_level
        self.outputs: dict[str, str] = {}

    # ------------------------------------------------------------------ names

    @property
    def workflow_arn_prefix(self) -> str:
        """``CIRRUS_BASE_WORKFLOW_ARN``: every workflow's ARN is this plus its name."""
        return f"arn:aws:states:{self.region}:{self.account}:stateMachine:{self.prefix}-"

    def state_machine_arn(self, workflow: str) -> str:
        """ARN of the workflow ``workflow`` (``{prefix}-{workflow}``)."""
        return f"{self.workflow_arn_prefix}{workflow}"

    def _names(self) -> dict[str, str]:
        return {
            "state_table": f"{self.prefix}-state",
            "process_queue": f"{self.prefix}-process",
            "process_dlq": f"{self.prefix}-process-dlq",
            "update_state_dlq": f"{self.prefix}-update-state-dlq",
            "workflow_event_topic": f"{self.prefix}-workflow-event",
            "publish_topic": f"{self.prefix}-publish",
            "payload_bucket": f"{self.prefix}-payload-{self.account}",
            "data_bucket": f"{self.prefix}-data-{self.account}",
        }

    # ------------------------------------------------------------------ resources

    def create(self, client: Callable[[str], Any]) -> None:
        """Create the deployment's resources; fills :attr:`outputs`.

        Args:
            client: Returns a boto3 client for a service name, bound to the moto
                account (``EmbeddedStack.client``).
        """
        names = self._names()
        dynamodb = client("dynamodb")
        table = dynamodb.create_table(**_state_table_spec(names["state_table"]))
        sqs = client("sqs")
        dlq_url = str(
            sqs.create_queue(
                QueueName=names["process_dlq"],
                Attributes={"MessageRetentionPeriod": str(_DLQ_RETENTION_SECONDS)},
            )["QueueUrl"]
        )
        dlq_arn = queue_arn(sqs, dlq_url)
        redrive = {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": self.max_receive_count}
        # No MaximumMessageSize: cirrus's template leaves the queue at SQS's default.
        queue_url = str(
            sqs.create_queue(
                QueueName=names["process_queue"],
                Attributes={
                    "VisibilityTimeout": str(self.visibility_timeout),
                    "RedrivePolicy": json.dumps(redrive),
                },
            )["QueueUrl"]
        )
        update_state_dlq_url = str(
            sqs.create_queue(
                QueueName=names["update_state_dlq"],
                Attributes={"MessageRetentionPeriod": str(_DLQ_RETENTION_SECONDS)},
            )["QueueUrl"]
        )
        sns = client("sns")
        event_topic = str(sns.create_topic(Name=names["workflow_event_topic"])["TopicArn"])
        publish_topic = str(sns.create_topic(Name=names["publish_topic"])["TopicArn"])
        s3 = client("s3")
        for bucket in (names["payload_bucket"], names["data_bucket"]):
            _create_bucket(s3, bucket, self.region)
        s3.put_bucket_lifecycle_configuration(
            Bucket=names["payload_bucket"],
            LifecycleConfiguration={
                "Rules": [
                    {
                        "ID": "expire-tmp",
                        # cirrus's own scratch prefix in its bucket, not a local temp dir.
                        "Filter": {"Prefix": f"{self.payload_root_prefix}/tmp/"},  # noqa: S108
                        "Status": "Enabled",
                        "Expiration": {"Days": _TMP_EXPIRATION_DAYS},
                    }
                ]
            },
        )
        self.outputs = {
            "CirrusPrefix": self.prefix,
            "CirrusStateTableName": names["state_table"],
            "CirrusStateTableArn": str(table["TableDescription"]["TableArn"]),
            "CirrusProcessQueueUrl": queue_url,
            "CirrusProcessQueueArn": queue_arn(sqs, queue_url),
            "CirrusProcessDlqUrl": dlq_url,
            "CirrusProcessDlqArn": dlq_arn,
            "CirrusUpdateStateDlqUrl": update_state_dlq_url,
            "CirrusWorkflowEventTopicArn": event_topic,
            "CirrusPublishTopicArn": publish_topic,
            "CirrusPayloadBucketName": names["payload_bucket"],
            "CirrusPayloadRootPrefix": self.payload_root_prefix,
            "CirrusDataBucketName": names["data_bucket"],
            "CirrusWorkflowArnPrefix": self.workflow_arn_prefix,
        }

    def environment(self) -> dict[str, str]:
        """The environment of cirrus's process and update-state Lambdas (functions.yaml).

        In one process both Lambdas share one environment: the union of theirs
        (only update-state reads ``CIRRUS_PUBLISH_TOPIC_ARN`` and
        ``CIRRUS_PROCESS_QUEUE_URL``, only process reads ``CIRRUS_BASE_WORKFLOW_ARN``,
        so nothing one reads is wrong for the other). Workflow metrics
        (``CIRRUS_WORKFLOW_LOG_GROUP``) and the deprecated Timestream event
        database (``CIRRUS_EVENT_DB_AND_TABLE``) stay off, as with cirrus's
        ``EnableWorkflowMetrics=false``.

        Raises:
            RuntimeError: :meth:`create` has not run.
        """
        outputs = self._created()
        return {
            # The Lambda runtime's own variable: cirrus builds its events' console
            # URLs (``execution``) from it, and falls back to us-west-2 without it.
            "AWS_REGION": self.region,
            "CIRRUS_LOG_LEVEL": self.log_level,
            "CIRRUS_DATA_BUCKET": outputs["CirrusDataBucketName"],
            "CIRRUS_PAYLOAD_BUCKET": outputs["CirrusPayloadBucketName"],
            "CIRRUS_PAYLOAD_ROOT_PREFIX": outputs["CirrusPayloadRootPrefix"],
            "CIRRUS_STATE_DB": outputs["CirrusStateTableName"],
            "CIRRUS_WORKFLOW_EVENT_TOPIC_ARN": outputs["CirrusWorkflowEventTopicArn"],
            "CIRRUS_BASE_WORKFLOW_ARN": outputs["CirrusWorkflowArnPrefix"],
            "CIRRUS_PUBLISH_TOPIC_ARN": outputs["CirrusPublishTopicArn"],
            "CIRRUS_PROCESS_QUEUE_URL": outputs["CirrusProcessQueueUrl"],
            "CIRRUS_WORKFLOW_LOG_GROUP": "",
        }

    def create_workflow(
        self, client: Callable[[str], Any], workflow: str, definition: dict[str, Any]
    ) -> str:
        """Create the workflow ``workflow`` (state machine ``{prefix}-{workflow}``); its ARN.

        Raises:
            ValueError: ``workflow`` holds an "_" (cirrus could not key its payloads).
        """
        if "_" in workflow:
            msg = (
                f"cirrus workflow names hold no '_' (its state table key is "
                f"'{{collections}}_{{workflow}}', split on the last '_'): {workflow!r}"
            )
            raise ValueError(msg)
        created = client("stepfunctions").create_state_machine(
            name=f"{self.prefix}-{workflow}",
            roleArn=f"arn:aws:iam::{self.account}:role/{self.prefix}-{workflow}-workflow-role",
            definition=json.dumps(definition),
        )
        return str(created["stateMachineArn"])

    def create_test_workflows(self, client: Callable[[str], Any]) -> dict[str, str]:
        """Create every workflow of :data:`CIRRUS_TEST_WORKFLOWS`; their ARNs by name."""
        return {
            name: self.create_workflow(client, name, definition)
            for name, definition in CIRRUS_TEST_WORKFLOWS.items()
        }

    # ------------------------------------------------------------------ cirrus's Lambdas

    def pumps(
        self, *, client: Callable[[str], Any], wrap: Callable[[Handler], Handler]
    ) -> dict[str, SqsPump | ExecutionPump]:
        """Pumps running cirrus's own handlers on this deployment.

        ``cirrus-process`` is the process Lambda's event source mapping (batches
        of 10; a crashed invocation leaves the whole batch on the queue, which is
        what cirrus relies on: on a partial failure it deletes the messages it
        handled itself, then raises). ``cirrus-executions`` is the update-state
        rule: every stopped execution of a ``{prefix}-*`` state machine, once, as
        EventBridge's "Step Functions Execution Status Change" event.

        Args:
            client: Returns a boto3 client for a service name (``EmbeddedStack.client``).
            wrap: Guards a handler the way the stack invokes handlers (``Invoker.wrap``).

        Raises:
            RuntimeError: :meth:`create` has not run, or the process environment is not
                :meth:`environment`.
            CirrusUnavailableError: cirrus-geo 2.x does not import here.
        """
        outputs = self._created()
        self._check_environment()
        process, update_state = _import_cirrus()
        return {
            "cirrus-process": SqsPump(
                sqs=client("sqs"),
                queue_url=outputs["CirrusProcessQueueUrl"],
                queue_arn=outputs["CirrusProcessQueueArn"],
                handler=wrap(process.lambda_handler),
                region=self.region,
                function_name=f"{self.prefix}-process",
                batch_size=_PROCESS_BATCH_SIZE,
                name="cirrus-process",
            ),
            "cirrus-executions": ExecutionPump(
                sfn=client("stepfunctions"),
                handler=wrap(update_state.lambda_handler),
                prefix=self.prefix,
                region=self.region,
                account=self.account,
                function_name=f"{self.prefix}-update-state",
                name="cirrus-executions",
            ),
        }

    # ------------------------------------------------------------------ internals

    def _created(self) -> dict[str, str]:
        if not self.outputs:
            msg = "the cirrus deployment is not created yet (call create() first)"
            raise RuntimeError(msg)
        return self.outputs

    def _check_environment(self) -> None:
        """Refuse to run cirrus's handlers on another deployment's environment."""
        wrong = sorted(
            name for name, value in self.environment().items() if os.environ.get(name) != value
        )
        if wrong:
            msg = (
                "cirrus's Lambdas read their configuration from the environment, and "
                f"these variables do not hold this deployment's values: {', '.join(wrong)} "
                "(set CirrusDeployment.environment() first)"
            )
            raise RuntimeError(msg)


def _state_table_spec(name: str) -> dict[str, Any]:
    """``CreateTable`` arguments for cirrus's state table (base.yaml's StateTable)."""
    keys = ("collections_workflow", "itemids", "state_updated", "updated")
    return {
        "TableName": name,
        "BillingMode": "PAY_PER_REQUEST",
        "AttributeDefinitions": [{"AttributeName": key, "AttributeType": "S"} for key in keys],
        "KeySchema": [
            {"AttributeName": "collections_workflow", "KeyType": "HASH"},
            {"AttributeName": "itemids", "KeyType": "RANGE"},
        ],
        "GlobalSecondaryIndexes": [
            {
                "IndexName": index,
                "KeySchema": [
                    {"AttributeName": "collections_workflow", "KeyType": "HASH"},
                    {"AttributeName": index, "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "ALL"},
            }
            for index in ("state_updated", "updated")
        ],
    }


def _create_bucket(s3: Any, bucket: str, region: str) -> None:
    # us-east-1 is the one region S3 refuses a LocationConstraint for.
    if region == "us-east-1":
        s3.create_bucket(Bucket=bucket)
    else:
        s3.create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": region})


def _import_cirrus() -> tuple[Any, Any]:
    """cirrus-geo's process and update_state modules, with cirrus's caches emptied.

    Raises:
        CirrusUnavailableError: cirrus-geo is missing, not 2.x, or does not import.
    """
    try:
        version = importlib.metadata.version("cirrus-geo")
        process = importlib.import_module(_PROCESS_MODULE)
        update_state = importlib.import_module(_UPDATE_STATE_MODULE)
    except Exception as exc:  # ImportError, or an error of cirrus's own module code
        msg = (
            f"cirrus-geo 2.x does not import in this Python ({sys.version.split()[0]}, "
            f"{sys.executable}): {exc!r}. cirrus mode runs cirrus-geo's own Lambda code, "
            "which needs Python >= 3.12: build its environment with `make venv-cirrus` "
            "and run from .venv-cirrus (the cirrus tier: `make test-cirrus`)"
        )
        raise CirrusUnavailableError(msg) from exc
    if version.split(".")[0] != _SUPPORTED_MAJOR:
        msg = (
            f"cirrus-geo {version} is installed; the embedded cirrus deployment is laid out "
            f"as cirrus-geo {_SUPPORTED_MAJOR}.x's (`make venv-cirrus` installs 2.0.0)"
        )
        raise CirrusUnavailableError(msg)
    # cirrus caches boto3 clients and resources (built at import, for one Lambda's one
    # deployment) and queue URLs by ARN for the life of the process. A deployment made
    # since (another test module, region or endpoint) must not get the last one's.
    utils = importlib.import_module("cirrus.lib.utils")
    utils.get_client.cache_clear()
    utils.get_resource.cache_clear()
    utils.QUEUE_URLS.clear()
    return process, update_state


# cirrus-geo's loggers (cirrus.lib.logging configures them when cirrus is first imported, as
# the stack starts): one StreamHandler, bound to the stderr of that moment.
CIRRUS_LOGGERS = ("lambda_function", "function", "feeder", "task", "cirrus.lib")


@contextlib.contextmanager
def cirrus_logs_to(sink: IO[str]) -> Iterator[None]:
    """Send cirrus's log lines to ``sink`` (a log file), as the tracker's go there.

    Nothing to do without cirrus: its loggers then have no handlers.
    """
    handlers = {
        handler
        for name in CIRRUS_LOGGERS
        for handler in logging.getLogger(name).handlers
        if isinstance(handler, logging.StreamHandler)
        and not isinstance(handler, logging.FileHandler)
    }
    saved = [(handler, handler.setStream(sink)) for handler in handlers]
    try:
        yield
    finally:
        for handler, stream in saved:
            if stream is not None:
                handler.setStream(stream)
