"""The IAM model in the embedded stack: each handler and state machine calls AWS as its role.

Defects 1 and 2 of the permissions review are caught here: with the model, a path whose
call the role does not allow fails as on AWS (defect 3 is in template_contract's
test_iam_calls.py, which controls when status changes are delivered).
"""

from __future__ import annotations

import functools
import io
import json
from typing import TYPE_CHECKING, Any

import pytest
from botocore.exceptions import ClientError

from dependency_tracker.joins.manifest import manifest_text
from dependency_tracker.sweeper.store import CURSOR_KEY
from dependency_tracker_local import LocalStack
from dependency_tracker_local.iam import machines
from tests.e2e.conftest import dependency, dependency_id, finished

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from dependency_tracker_local.iam.enforce import IamModel

pytestmark = pytest.mark.e2e
JOIN = "wait-for-join"


@pytest.fixture(scope="module")
def stack() -> Iterator[LocalStack]:
    with LocalStack(prefix="deptrack", sink=io.StringIO(), sweeper_interval=None) as running:
        yield running
        assert model(running).denials == []


def model(stack: LocalStack) -> IamModel:
    assert stack.iam is not None, "the IAM model is on unless DEPTRACK_IAM=0"
    return stack.iam


def as_function(stack: LocalStack, name: str, call: Callable[[], Any]) -> Any:
    """``call`` made as function ``name``'s role, as the stack runs its handler."""
    return model(stack).as_function(name, call)()


def refused(stack: LocalStack, name: str, call: Callable[[], Any]) -> ClientError:
    """The error ``call`` raises as ``name``'s role; the denial is taken off the model's list."""
    before = len(model(stack).denials)
    with pytest.raises(ClientError) as caught:
        as_function(stack, name, call)
    del model(stack).denials[before:]
    return caught.value


def test_the_sweepers_first_run_finds_no_cursor_and_sweeps(stack: LocalStack) -> None:
    # GIVEN a deployment whose sweeper never stopped part way: no cursor object
    s3, bucket = stack.client("s3"), stack.outputs["PayloadBucketName"]
    s3.delete_object(Bucket=bucket, Key=CURSOR_KEY)
    # WHEN the sweeper runs as its role
    report = stack.sweep_once()
    # THEN it swept from the top, and the IAM model refused none of its calls
    assert report["found"] == 0
    assert model(stack).denials == []


def test_a_missing_key_is_no_such_key_only_to_a_caller_that_may_list(stack: LocalStack) -> None:
    s3, bucket = stack.client("s3"), stack.outputs["PayloadBucketName"]
    # GIVEN no object at these keys; the process role may read the bucket's objects, the
    # sweeper's may list the bucket only under sweeper/ (its FindCursor condition)
    # WHEN each reads a missing key THEN S3 hides that it is missing: AccessDenied (403)
    for function, key in (("process", "payloads/none.json"), ("sweeper", "sweeper/none.json")):
        error = refused(stack, function, functools.partial(s3.get_object, Bucket=bucket, Key=key))
        assert error.response["Error"]["Code"] == "AccessDenied"
        assert error.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    head = refused(stack, "process", lambda: s3.head_object(Bucket=bucket, Key="payloads/x"))
    assert head.response["Error"]["Code"] == "403"
    # AND the sweeper may list under its prefix; code outside a handler hears NoSuchKey
    listed = as_function(
        stack, "sweeper", lambda: s3.list_objects_v2(Bucket=bucket, Prefix="sweeper/none.json")
    )
    assert listed["KeyCount"] == 0
    with pytest.raises(s3.exceptions.NoSuchKey):
        s3.get_object(Bucket=bucket, Key="payloads/none.json")


def test_a_call_the_role_does_not_allow_fails_as_aws_refuses_it(stack: LocalStack) -> None:
    s3, dynamodb = stack.client("s3"), stack.client("dynamodb")
    bucket, table = stack.outputs["PayloadBucketName"], stack.outputs["StateTableName"]
    # WHEN the callback function writes where its role grants nothing
    put = refused(stack, "callback", lambda: s3.put_object(Bucket=bucket, Key="x", Body=b""))
    scan = refused(stack, "callback", lambda: dynamodb.scan(TableName=table))
    # THEN each service answers with its own code and AWS's message
    caller = "arn:aws:sts::123456789012:assumed-role/deptrack-stack-callbackrole-generated/"
    assert put.response["Error"]["Code"] == "AccessDenied"
    assert put.response["Error"]["Message"] == (
        f"User: {caller}deptrack-callback is not authorized to perform: s3:PutObject on "
        f"resource: arn:aws:s3:::{bucket}/x because no identity-based policy allows the "
        "s3:PutObject action"
    )
    assert scan.response["Error"]["Code"] == "AccessDeniedException"
    assert (
        f"dynamodb:Scan on resource: arn:aws:dynamodb:us-east-1:123456789012:table/{table}"
        in (scan.response["Error"]["Message"])
    )


def test_each_state_machine_runs_as_its_own_role(stack: LocalStack) -> None:
    sfn = stack.client("stepfunctions")
    for name, role in (
        ("wait-for-dependencies", "waitfordependenciesrole"),
        ("wait-for-join", "waitforjoinrole"),
    ):
        arn = stack.outputs["StateMachines"][name]
        described = sfn.describe_state_machine(stateMachineArn=arn)
        assert described["roleArn"].endswith(f":role/deptrack-stack-{role}-generated")
        principal = machines.principal_of(arn)
        assert principal is not None
        assert principal.role.arn == described["roleArn"]


def test_a_join_by_manifest_in_a_versioned_bucket_reads_every_chunk(stack: LocalStack) -> None:
    # GIVEN a versioned bucket holding a manifest of five members, registered two by two
    s3, bucket = stack.client("s3"), stack.outputs["PayloadBucketName"]
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    members = [dependency(f"iam-v-{i}") for i in range(5)]
    s3.put_object(Bucket=bucket, Key="manifests/v.jsonl", Body=manifest_text(members).encode())
    assert stack.app is not None
    chunk_size = stack.app.settings.join_chunk_size
    stack.configure(join_chunk_size=2)
    try:
        # WHEN a parent joins them by the manifest's URL
        execution = stack.client("stepfunctions").start_execution(
            stateMachineArn=stack.outputs["StateMachines"][JOIN],
            name="iam-versioned-manifest",
            input=json.dumps(
                {"dependencies_url": f"s3://{bucket}/manifests/v.jsonl", "timeout_seconds": 60}
            ),
        )["executionArn"]
        described = finished(stack, execution, timeout=60)
    finally:
        stack.configure(join_chunk_size=chunk_size)
        s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Suspended"})
    # THEN the later chunks read the first chunk's version (s3:GetObjectVersion) and every
    # member ran: the parent succeeds
    assert described["status"] == "SUCCEEDED", described.get("error")
    summary = json.loads(described["output"])["join"]
    assert summary["succeeded"] == [dependency_id(f"iam-v-{i}") for i in range(5)]
    assert model(stack).denials == []
