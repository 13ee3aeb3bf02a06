"""The IAM requests AWS makes for each API call the model knows."""

from __future__ import annotations

from typing import Any

import pytest

from dependency_tracker_local.iam.requests import Scope, UnmodelledCallError, requests_for

SCOPE = Scope("us-east-1", "123456789012", {"tok": "arn:aws:states:us-east-1:1:stateMachine:p"}.get)
TABLE = "arn:aws:dynamodb:us-east-1:123456789012:table/t"


def named(service: str, operation: str, **params: Any) -> list[tuple[str, str, dict[str, Any]]]:
    found = requests_for(service, operation, params, SCOPE)
    assert all(r.keys["aws:securetransport"] == ("true",) for r in found)
    return [
        (r.action, r.resource, {k: v for k, v in r.keys.items() if k != "aws:securetransport"})
        for r in found
    ]


def test_dynamodb_requests_per_table_item_and_index() -> None:
    assert named("dynamodb", "Query", TableName="t", IndexName="i") == [
        ("dynamodb:Query", f"{TABLE}/index/i", {})
    ]
    assert named("dynamodb", "GetItem", TableName="t") == [("dynamodb:GetItem", TABLE, {})]
    assert [
        a for a, _, _ in named("dynamodb", "BatchGetItem", RequestItems={"t": {}, "u": {}})
    ] == [
        "dynamodb:BatchGetItem",
        "dynamodb:BatchGetItem",
    ]
    items = [
        {"Put": {"TableName": "t"}},
        {"Update": {"TableName": "t"}},
        {"ConditionCheck": {"TableName": "u"}},
    ]
    assert [
        (a, r.rpartition("/")[2])
        for a, r, _ in named("dynamodb", "TransactWriteItems", TransactItems=items)
    ] == [
        ("dynamodb:PutItem", "t"),
        ("dynamodb:UpdateItem", "t"),
        ("dynamodb:ConditionCheckItem", "u"),
    ]


def test_s3_versions_listings_and_copies() -> None:
    assert named("s3", "GetObject", Bucket="b", Key="k") == [
        ("s3:GetObject", "arn:aws:s3:::b/k", {})
    ]
    assert named("s3", "GetObject", Bucket="b", Key="k", VersionId="v") == [
        ("s3:GetObjectVersion", "arn:aws:s3:::b/k", {})
    ]
    assert (
        named("s3", "HeadObject", Bucket="b", Key="k", VersionId="v")[0][0] == "s3:GetObjectVersion"
    )
    assert named("s3", "ListObjectsV2", Bucket="b", Prefix="sweeper/c", MaxKeys=1) == [
        ("s3:ListBucket", "arn:aws:s3:::b", {"s3:prefix": ("sweeper/c",), "s3:max-keys": ("1",)})
    ]
    assert named("s3", "ListObjectsV2", Bucket="b") == [("s3:ListBucket", "arn:aws:s3:::b", {})]
    assert named("s3", "ListObjectVersions", Bucket="b")[0][0] == "s3:ListBucketVersions"
    assert named(
        "s3", "CopyObject", Bucket="b", Key="n", CopySource={"Bucket": "a", "Key": "o"}
    ) == [
        ("s3:GetObject", "arn:aws:s3:::a/o", {}),
        ("s3:PutObject", "arn:aws:s3:::b/n", {}),
    ]


def test_sqs_batches_are_their_single_action_on_the_queue_of_the_url() -> None:
    url = "https://sqs.us-east-1.amazonaws.com/123456789012/q"
    assert named("sqs", "SendMessageBatch", QueueUrl=url, Entries=[]) == [
        ("sqs:SendMessage", "arn:aws:sqs:us-east-1:123456789012:q", {})
    ]


def test_step_functions_task_answers_are_authorized_on_the_token_owner() -> None:
    assert named("stepfunctions", "SendTaskSuccess", taskToken="tok", output="{}") == [
        ("states:SendTaskSuccess", "arn:aws:states:us-east-1:1:stateMachine:p", {})
    ]
    # a token no execution holds: Step Functions answers it itself
    assert named("stepfunctions", "SendTaskFailure", taskToken="unknown") == []
    arn = "arn:aws:states:us-east-1:1:execution:p:e"
    assert named("stepfunctions", "DescribeExecution", executionArn=arn)[0][:2] == (
        "states:DescribeExecution",
        arn,
    )


def test_sns_events_and_lambda() -> None:
    assert named("sns", "Publish", TopicArn="arn:t", Message="m")[0][:2] == ("sns:Publish", "arn:t")
    entries = [{"Source": "s", "DetailType": "d", "Detail": "{}"}]
    assert named("events", "PutEvents", Entries=entries) == [
        (
            "events:PutEvents",
            "arn:aws:events:us-east-1:123456789012:event-bus/default",
            {"events:source": ("s",), "events:detail-type": ("d",)},
        )
    ]
    assert named("lambda", "Invoke", FunctionName="f")[0][:2] == (
        "lambda:InvokeFunction",
        "arn:aws:lambda:us-east-1:123456789012:function:f",
    )


def test_an_unknown_operation_fails_loudly() -> None:
    with pytest.raises(UnmodelledCallError, match="s3 PutBucketPolicy"):
        requests_for("s3", "PutBucketPolicy", {"Bucket": "b"}, SCOPE)
    with pytest.raises(UnmodelledCallError, match="kinesis PutRecord"):
        requests_for("kinesis", "PutRecord", {}, SCOPE)
