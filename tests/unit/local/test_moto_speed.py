"""moto's fixed per-request work done once (``moto_speed``) gives moto's own answers.

Every quick response is compared with the one moto's shape serializer writes for
the same result, over every kind of attribute value, odd Unicode included.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from moto import mock_aws
from moto.core.responses import BaseResponse

from dependency_tracker_local import moto_speed
from dependency_tracker_local.moto_costs import aws_like_costs
from tests.conftest import wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator

REGION = "us-east-1"
ODD = 'naïve ☃ \u202e \U0001d518 \x7f "quoted" \\ slash'
VALUES: dict[str, Any] = {
    "s": {"S": ODD},
    "n": {"N": "-12.500"},
    "b": {"B": b"\x00\xffbinary"},
    "bool": {"BOOL": False},
    "null": {"NULL": True},
    "ss": {"SS": ["a", ODD]},
    "ns": {"NS": ["1", "2.5"]},
    "bs": {"BS": [b"\x01", b"\x02"]},
    "l": {"L": [{"S": "x"}, {"N": "1"}, {"M": {"deep": {"L": [{"NULL": True}]}}}]},
    "m": {"M": {"k": {"S": ODD}, "n": {"N": "3"}}},
}


@pytest.fixture
def compared(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    """Every quick response checked against moto's own serializer; counts by operation."""
    counts: Counter[str] = Counter()
    quick = moto_speed.quick_response

    def checked(handler: Any, result: Any) -> Any:
        answer = quick(handler, result)
        if answer is not None:
            # The switch installed over moto's method wraps (and names) moto's original.
            serialized = BaseResponse.serialized.__wrapped__  # type: ignore[attr-defined]
            status, headers, body = serialized(handler, result)
            assert answer[0] == status
            assert answer[1]["Content-Type"] == headers["Content-Type"]
            assert json.loads(answer[2]) == json.loads(body)
            counts[handler._get_action()] += 1
        return answer

    monkeypatch.setattr(moto_speed, "quick_response", checked)
    with aws_like_costs(), mock_aws():
        yield counts


def test_dynamodb_and_stream_responses_match_moto_serializer(compared: Counter[str]) -> None:
    dynamodb = boto3.client("dynamodb", region_name=REGION)
    table = dynamodb.create_table(
        TableName="t",
        KeySchema=[
            {"AttributeName": "pk", "KeyType": "HASH"},
            {"AttributeName": "sk", "KeyType": "RANGE"},
        ],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
    )["TableDescription"]
    key = {"pk": {"S": ODD}, "sk": {"S": "1"}}
    dynamodb.put_item(TableName="t", Item={**key, **VALUES}, ReturnConsumedCapacity="TOTAL")
    got = dynamodb.get_item(TableName="t", Key=key)["Item"]
    assert got["b"] == VALUES["b"]
    assert got["bs"]["BS"] == VALUES["bs"]["BS"]
    assert got["s"] == VALUES["s"]
    dynamodb.update_item(
        TableName="t",
        Key=key,
        UpdateExpression="SET #n = #n + :one, #new = :v ADD #ss :more",
        ExpressionAttributeNames={"#n": "n", "#new": "new", "#ss": "ss"},
        ExpressionAttributeValues={
            ":one": {"N": "1"},
            ":v": {"B": b"\x02"},
            ":more": {"SS": ["z"]},
        },
        ReturnValues="ALL_NEW",
    )
    dynamodb.put_item(TableName="t", Item={"pk": {"S": ODD}, "sk": {"S": "2"}})
    queried = dynamodb.query(
        TableName="t",
        KeyConditionExpression="pk = :p",
        ExpressionAttributeValues={":p": {"S": ODD}},
        Limit=1,
    )
    assert queried["LastEvaluatedKey"] == key
    dynamodb.scan(TableName="t")
    dynamodb.batch_get_item(
        RequestItems={"t": {"Keys": [key, {"pk": {"S": "none"}, "sk": {"S": "0"}}]}}
    )
    dynamodb.transact_write_items(
        TransactItems=[{"Update": {"TableName": "t", "Key": key, "UpdateExpression": "REMOVE l"}}]
    )
    dynamodb.delete_item(TableName="t", Key=key, ReturnValues="ALL_OLD")

    streams = boto3.client("dynamodbstreams", region_name=REGION)
    shard = streams.describe_stream(StreamArn=table["LatestStreamArn"])["StreamDescription"][
        "Shards"
    ][0]
    iterator = streams.get_shard_iterator(
        StreamArn=table["LatestStreamArn"],
        ShardId=shard["ShardId"],
        ShardIteratorType="TRIM_HORIZON",
    )["ShardIterator"]
    records = streams.get_records(ShardIterator=iterator)["Records"]
    assert [record["eventName"] for record in records] == [
        "INSERT",
        "MODIFY",
        "INSERT",
        "MODIFY",
        "REMOVE",
    ]
    assert records[0]["dynamodb"]["NewImage"]["b"] == VALUES["b"]
    assert set(compared) == {
        "PutItem",
        "GetItem",
        "UpdateItem",
        "Query",
        "Scan",
        "BatchGetItem",
        "TransactWriteItems",
        "DeleteItem",
        "GetRecords",
    }


def test_a_cached_update_expression_takes_each_requests_values(compared: Counter[str]) -> None:
    dynamodb = boto3.client("dynamodb", region_name=REGION)
    dynamodb.create_table(
        TableName="t",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    for value in ("first", "second", ODD):
        attributes = dynamodb.update_item(
            TableName="t",
            Key={"pk": {"S": "a"}},
            UpdateExpression="SET #v = :v, #c = if_not_exists(#c, :zero) + :one",
            ExpressionAttributeNames={"#v": "v", "#c": "c"},
            ExpressionAttributeValues={":v": {"S": value}, ":zero": {"N": "0"}, ":one": {"N": "1"}},
            ReturnValues="ALL_NEW",
        )["Attributes"]
        assert attributes["v"] == {"S": value}
    assert attributes["c"] == {"N": "3"}
    # One condition's text, lexed once, checked against each request's values.
    condition = "#v = :expected AND attribute_exists(#c)"
    for expected, passes in (("nope", False), (ODD, True), ("nope", False)):
        update: dict[str, Any] = {
            "TableName": "t",
            "Key": {"pk": {"S": "a"}},
            "UpdateExpression": "SET #c = #c + :one",
            "ConditionExpression": condition,
            "ExpressionAttributeNames": {"#v": "v", "#c": "c"},
            "ExpressionAttributeValues": {":expected": {"S": expected}, ":one": {"N": "1"}},
        }
        if passes:
            dynamodb.update_item(**update)
        else:
            with pytest.raises(dynamodb.exceptions.ConditionalCheckFailedException):
                dynamodb.update_item(**update)
    assert dynamodb.get_item(TableName="t", Key={"pk": {"S": "a"}})["Item"]["c"] == {"N": "4"}


def test_one_parsed_definition_serves_executions_running_at_once() -> None:
    definition = json.dumps(
        {
            "StartAt": "Each",
            "States": {
                "Each": {
                    "Type": "Map",
                    "ItemsPath": "$.items",
                    "ItemProcessor": {
                        "StartAt": "Double",
                        "States": {
                            "Double": {
                                "Type": "Pass",
                                "Parameters": {"v.$": "States.MathAdd($, $)"},
                                "End": True,
                            }
                        },
                    },
                    "End": True,
                }
            },
        }
    )
    with aws_like_costs(), mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        sfn = boto3.client("stepfunctions", region_name=REGION)
        arn = sfn.create_state_machine(
            name="m", definition=definition, roleArn="arn:aws:iam::123456789012:role/r"
        )["stateMachineArn"]
        inputs = {f"e{i}": list(range(i, i + 5)) for i in range(12)}
        threads = [
            threading.Thread(
                target=sfn.start_execution,
                kwargs={
                    "stateMachineArn": arn,
                    "name": name,
                    "input": json.dumps({"items": items}),
                },
            )
            for name, items in inputs.items()
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        prefix = arn.replace(":stateMachine:", ":execution:")
        for name, items in inputs.items():
            output = _output(sfn, f"{prefix}:{name}")
            assert output == [{"v": 2 * item} for item in items]


def _output(sfn: Any, execution_arn: str) -> Any:
    def stopped() -> dict[str, Any] | None:
        described: dict[str, Any] = sfn.describe_execution(executionArn=execution_arn)
        return None if described["status"] == "RUNNING" else described

    described = wait_until(stopped)
    assert described["status"] == "SUCCEEDED", described
    return json.loads(described["output"])
