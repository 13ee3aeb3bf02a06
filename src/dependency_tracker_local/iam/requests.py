"""What AWS authorizes for one API call: botocore operation + parameters → IAM requests.

Each call becomes the authorization requests the service makes: the action (which is
not always the operation's name: ``SendMessageBatch`` is ``sqs:SendMessage``, a
``GetObject`` with ``VersionId`` is ``s3:GetObjectVersion``), the resource ARN, and the
condition keys the service sets for that request (``s3:prefix`` only on listings).
Every request carries ``aws:SecureTransport`` true, as the SDK's HTTPS calls do on AWS.
An operation the model does not know raises :class:`UnmodelledCallError`: a call is
never passed unchecked because nobody described it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dependency_tracker_local.iam.policy import Request

if TYPE_CHECKING:
    from collections.abc import Callable

# Keys every request carries (the SDK calls AWS over HTTPS).
GLOBAL_KEYS = {"aws:SecureTransport": ("true",)}


class UnmodelledCallError(RuntimeError):
    """An API call whose IAM requests the model does not know; teach ``requests`` the call."""

    def __init__(self, service: str, operation: str) -> None:
        super().__init__(
            f"the IAM model does not know what {service} {operation} is authorized as: "
            "teach dependency_tracker_local.iam.requests the call"
        )


@dataclass(frozen=True)
class Scope:
    """Where a call is made: partition, region, account; how a task token names its owner."""

    region: str
    account: str
    # The ARN of the state machine whose execution holds a task token (None: unknown token).
    token_owner: Callable[[str], str | None]
    partition: str = "aws"

    def arn(self, service: str, resource: str) -> str:
        """A regional ARN of this account."""
        return f"arn:{self.partition}:{service}:{self.region}:{self.account}:{resource}"


def requests_for(
    service: str, operation: str, params: dict[str, Any], scope: Scope
) -> list[Request]:
    """The IAM requests AWS makes for ``operation`` of ``service`` (botocore's names)."""
    build = _SERVICES.get(service)
    found = None if build is None else build(operation, params, scope)
    if found is None:
        raise UnmodelledCallError(service, operation)
    return [request.with_keys(GLOBAL_KEYS) for request in found]


# ---------------------------------------------------------------------- DynamoDB

_DYNAMODB_TABLE_CALLS = {
    "GetItem",
    "PutItem",
    "UpdateItem",
    "DeleteItem",
    "Query",
    "Scan",
    "DescribeTable",
    "DescribeTimeToLive",
}
_TRANSACT_WRITE = {
    "Put": "PutItem",
    "Update": "UpdateItem",
    "Delete": "DeleteItem",
    "ConditionCheck": "ConditionCheckItem",
}


def _dynamodb(operation: str, params: dict[str, Any], scope: Scope) -> list[Request] | None:
    def table(name: str, index: str | None = None) -> str:
        arn = name if name.startswith("arn:") else scope.arn("dynamodb", f"table/{name}")
        return f"{arn}/index/{index}" if index else arn

    if operation in _DYNAMODB_TABLE_CALLS:
        index = params.get("IndexName") if operation in {"Query", "Scan"} else None
        return [Request.of(f"dynamodb:{operation}", table(params["TableName"], index))]
    if operation in {"BatchGetItem", "BatchWriteItem"}:
        return [Request.of(f"dynamodb:{operation}", table(name)) for name in params["RequestItems"]]
    if operation == "TransactWriteItems":
        # Each item is authorized as its own action on its own table.
        found = []
        for entry in params["TransactItems"]:
            ((kind, item),) = entry.items()
            found.append(Request.of(f"dynamodb:{_TRANSACT_WRITE[kind]}", table(item["TableName"])))
        return found
    if operation == "TransactGetItems":
        return [
            Request.of("dynamodb:GetItem", table(entry["Get"]["TableName"]))
            for entry in params["TransactItems"]
        ]
    return None


# ---------------------------------------------------------------------- S3


def _object(scope: Scope, bucket: str, key: str) -> str:
    return f"arn:{scope.partition}:s3:::{bucket}/{key}"


# A multipart upload's create, parts and completion are s3:PutObject (S3's "Multipart
# upload and permissions"); its abort is an action of its own.
_OBJECT_WRITES = {
    "PutObject": "s3:PutObject",
    "CreateMultipartUpload": "s3:PutObject",
    "UploadPart": "s3:PutObject",
    "CompleteMultipartUpload": "s3:PutObject",
    "AbortMultipartUpload": "s3:AbortMultipartUpload",
}


def _s3(operation: str, params: dict[str, Any], scope: Scope) -> list[Request] | None:
    bucket = params.get("Bucket", "")
    bucket_arn = f"arn:{scope.partition}:s3:::{bucket}"
    versioned = "Version" if params.get("VersionId") else ""
    if operation in {"GetObject", "HeadObject"}:
        # With a version id only s3:GetObjectVersion is needed (S3's GetObject reference).
        return [Request.of(f"s3:GetObject{versioned}", _object(scope, bucket, params["Key"]))]
    if operation in _OBJECT_WRITES:
        return [Request.of(_OBJECT_WRITES[operation], _object(scope, bucket, params["Key"]))]
    if operation == "DeleteObject":
        return [Request.of(f"s3:DeleteObject{versioned}", _object(scope, bucket, params["Key"]))]
    if operation == "CopyObject":
        source = params["CopySource"]
        if isinstance(source, str):
            path, _, query = source.lstrip("/").partition("?versionId=")
            source_bucket, _, source_key = path.partition("/")
            source_version = query or None
        else:
            source_bucket, source_key = source["Bucket"], source["Key"]
            source_version = source.get("VersionId")
        read = "s3:GetObjectVersion" if source_version else "s3:GetObject"
        return [
            Request.of(read, _object(scope, source_bucket, source_key)),
            Request.of("s3:PutObject", _object(scope, bucket, params["Key"])),
        ]
    if operation in {"ListObjects", "ListObjectsV2", "ListObjectVersions"}:
        keys = {
            name: str(params[field])
            for name, field in (
                ("s3:prefix", "Prefix"),
                ("s3:delimiter", "Delimiter"),
                ("s3:max-keys", "MaxKeys"),
            )
            if field in params
        }
        action = "s3:ListBucketVersions" if operation == "ListObjectVersions" else "s3:ListBucket"
        return [Request.of(action, bucket_arn, keys)]
    return None


def list_bucket_for(request_params: dict[str, Any], scope: Scope) -> Request:
    """The ``s3:ListBucket`` request S3 asks about before answering ``NoSuchKey`` to a read.

    A ``GetObject`` carries no listing keys: a grant conditioned on ``s3:prefix`` does not
    apply to it.
    """
    bucket_arn = f"arn:{scope.partition}:s3:::{request_params['Bucket']}"
    return Request.of("s3:ListBucket", bucket_arn, GLOBAL_KEYS)


# ---------------------------------------------------------------------- SQS, SNS, EventBridge

_SQS_ACTIONS = {
    "SendMessage": "SendMessage",
    "SendMessageBatch": "SendMessage",
    "ReceiveMessage": "ReceiveMessage",
    "DeleteMessage": "DeleteMessage",
    "DeleteMessageBatch": "DeleteMessage",
    "ChangeMessageVisibility": "ChangeMessageVisibility",
    "ChangeMessageVisibilityBatch": "ChangeMessageVisibility",
    "GetQueueAttributes": "GetQueueAttributes",
    "PurgeQueue": "PurgeQueue",
}


def _sqs(operation: str, params: dict[str, Any], scope: Scope) -> list[Request] | None:
    if operation == "GetQueueUrl":
        account = params.get("QueueOwnerAWSAccountId", scope.account)
        arn = f"arn:{scope.partition}:sqs:{scope.region}:{account}:{params['QueueName']}"
        return [Request.of("sqs:GetQueueUrl", arn)]
    if operation not in _SQS_ACTIONS:
        return None
    account, name = params["QueueUrl"].rstrip("/").split("/")[-2:]
    arn = f"arn:{scope.partition}:sqs:{scope.region}:{account}:{name}"
    return [Request.of(f"sqs:{_SQS_ACTIONS[operation]}", arn)]


def _sns(operation: str, params: dict[str, Any], _scope: Scope) -> list[Request] | None:
    if operation in {"Publish", "PublishBatch"}:
        return [Request.of("sns:Publish", params.get("TopicArn") or params["TargetArn"])]
    return None


def _events(operation: str, params: dict[str, Any], scope: Scope) -> list[Request] | None:
    if operation != "PutEvents":
        return None
    found = []
    for entry in params["Entries"]:
        bus = entry.get("EventBusName") or "default"
        arn = bus if bus.startswith("arn:") else scope.arn("events", f"event-bus/{bus}")
        keys = {
            "events:source": entry.get("Source", ""),
            "events:detail-type": entry.get("DetailType", ""),
        }
        found.append(Request.of("events:PutEvents", arn, keys))
    return found


# ---------------------------------------------------------------------- Step Functions, Lambda, SSM

_STATES_BY_MACHINE = {
    "StartExecution",
    "StartSyncExecution",
    "DescribeStateMachine",
    "ListExecutions",
}
_STATES_BY_EXECUTION = {
    "DescribeExecution",
    "StopExecution",
    "GetExecutionHistory",
    "DescribeStateMachineForExecution",
}
_TASK_ANSWERS = {"SendTaskSuccess", "SendTaskFailure", "SendTaskHeartbeat"}


def _states(operation: str, params: dict[str, Any], scope: Scope) -> list[Request] | None:
    if operation in _STATES_BY_MACHINE:
        return [Request.of(f"states:{operation}", params["stateMachineArn"])]
    if operation in _STATES_BY_EXECUTION:
        return [Request.of(f"states:{operation}", params["executionArn"])]
    if operation in _TASK_ANSWERS:
        # Authorized on the state machine whose execution issued the token; an unknown
        # token names none, and Step Functions answers it with its own error.
        owner = scope.token_owner(params["taskToken"])
        return [] if owner is None else [Request.of(f"states:{operation}", owner)]
    return None


def _lambda(operation: str, params: dict[str, Any], scope: Scope) -> list[Request] | None:
    actions = {"Invoke": "InvokeFunction", "GetFunction": "GetFunction"}
    if operation not in actions:
        return None
    name = str(params["FunctionName"])
    arn = name if name.startswith("arn:") else scope.arn("lambda", f"function:{name}")
    return [Request.of(f"lambda:{actions[operation]}", arn)]


def _ssm(operation: str, params: dict[str, Any], scope: Scope) -> list[Request] | None:
    def parameter(name: str) -> str:
        return (
            name if name.startswith("arn:") else scope.arn("ssm", f"parameter/{name.lstrip('/')}")
        )

    if operation == "GetParameter":
        return [Request.of("ssm:GetParameter", parameter(params["Name"]))]
    if operation == "GetParameters":
        return [Request.of("ssm:GetParameters", parameter(name)) for name in params["Names"]]
    if operation == "GetParametersByPath":
        return [Request.of("ssm:GetParametersByPath", parameter(params["Path"]))]
    return None


def _sts(operation: str, _params: dict[str, Any], _scope: Scope) -> list[Request] | None:
    # GetCallerIdentity needs no permission (STS's reference).
    return [] if operation == "GetCallerIdentity" else None


_SERVICES: dict[str, Callable[[str, dict[str, Any], Scope], list[Request] | None]] = {
    "dynamodb": _dynamodb,
    "s3": _s3,
    "sqs": _sqs,
    "sns": _sns,
    "events": _events,
    "stepfunctions": _states,
    "lambda": _lambda,
    "ssm": _ssm,
    "sts": _sts,
}
