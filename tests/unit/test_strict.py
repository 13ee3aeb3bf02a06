"""The strict layer: one test per AWS limit, just under and just over.

Each case runs twice against a fresh moto account: without the layer (what
moto alone does, as the limits table in docs/local.md says) and with it (AWS's
error code and text, and the request just under the limit still accepted).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from dependency_tracker.core import limits
from dependency_tracker_local import strict
from dependency_tracker_local.strict import is_active, strict_limits
from tests.conftest import wait_until

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

ROLE = "arn:aws:iam::123456789012:role/strict-test"
TABLE = "strict"
MB = limits.SQS_DEFAULT_MAX_MESSAGE_BYTES


@dataclass
class Clients:
    dynamodb: Any
    sfn: Any
    sqs: Any
    queue_url: str
    machine_arn: str

    def token(self) -> str:
        """A real task token: a waiting execution of a callback state machine."""
        definition = {
            "StartAt": "Wait",
            "States": {
                "Wait": {
                    "Type": "Task",
                    "Resource": "arn:aws:states:::sqs:sendMessage.waitForTaskToken",
                    "Parameters": {"QueueUrl": self.queue_url, "MessageBody.$": "$$.Task.Token"},
                    "End": True,
                }
            },
        }
        arn = self.sfn.create_state_machine(
            name=f"callback-{len(self.sfn.list_state_machines()['stateMachines'])}",
            roleArn=ROLE,
            definition=json.dumps(definition),
        )["stateMachineArn"]
        self.sfn.start_execution(stateMachineArn=arn, name="waiting", input="{}")

        def published() -> list[dict[str, Any]]:
            received = self.sqs.receive_message(QueueUrl=self.queue_url, WaitTimeSeconds=0)
            return list(received.get("Messages", []))

        (message,) = wait_until(published)
        return str(message["Body"])


@pytest.fixture
def moto() -> Iterator[Clients]:
    """A moto account with a two-key table, a queue and a state machine; no strict layer."""
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        session = boto3.session.Session(region_name="us-east-1")
        dynamodb = session.client("dynamodb")
        dynamodb.create_table(
            TableName=TABLE,
            KeySchema=[
                {"AttributeName": "pk", "KeyType": "HASH"},
                {"AttributeName": "sk", "KeyType": "RANGE"},
            ],
            AttributeDefinitions=[
                {"AttributeName": "pk", "AttributeType": "S"},
                {"AttributeName": "sk", "AttributeType": "S"},
            ],
            BillingMode="PAY_PER_REQUEST",
        )
        sqs = session.client("sqs")
        queue_url = sqs.create_queue(
            QueueName="strict", Attributes={"MaximumMessageSize": str(MB)}
        )["QueueUrl"]
        sfn = session.client("stepfunctions")
        machine_arn = sfn.create_state_machine(
            name="noop",
            roleArn=ROLE,
            definition=json.dumps({"StartAt": "Done", "States": {"Done": {"Type": "Succeed"}}}),
        )["stateMachineArn"]
        yield Clients(dynamodb, sfn, sqs, queue_url, machine_arn)


def key(pk: str = "p", sk: str = "s") -> dict[str, Any]:
    return {"pk": {"S": pk}, "sk": {"S": sk}}


def sized_item(total: int) -> dict[str, Any]:
    """An item whose DynamoDB size is exactly ``total`` bytes."""
    item = {**key(), "v": {"S": ""}}
    item["v"]["S"] = "x" * (total - limits.item_size(item))
    assert limits.item_size(item) == total
    return item


@dataclass
class Case:
    """A request just over an AWS limit (``over``) and the same just under it (``under``)."""

    under: Callable[[Clients], object]
    over: Callable[[Clients], object]
    code: str
    message: str
    moto_refuses: bool = False  # moto alone already refuses `over` (docs/local.md says so)
    moto_refuses_under: bool = False  # moto alone refuses even `under`, which AWS accepts


def put(item: dict[str, Any]) -> Callable[[Clients], object]:
    return lambda c: c.dynamodb.put_item(TableName=TABLE, Item=item)


def update_grow_set(members: int, member_bytes: int) -> Callable[[Clients], object]:
    """ADD string-set members to an item of 300,000 bytes (moto sizes no ADD)."""

    def call(c: Clients) -> object:
        c.dynamodb.put_item(TableName=TABLE, Item=sized_item(300_000))
        values = [f"{i:06d}" + "m" * (member_bytes - 6) for i in range(members)]
        return c.dynamodb.update_item(
            TableName=TABLE,
            Key=key(),
            UpdateExpression="ADD members :m",
            ExpressionAttributeValues={":m": {"SS": values}},
        )

    return call


def update_nested(value_bytes: int) -> Callable[[Clients], object]:
    """SET a map entry on an item of 300,000 bytes (moto sizes only top-level SETs)."""

    def call(c: Clients) -> object:
        c.dynamodb.put_item(TableName=TABLE, Item={**sized_item(300_000), "m": {"M": {}}})
        return c.dynamodb.update_item(
            TableName=TABLE,
            Key=key(),
            UpdateExpression="SET m.k = :v",
            ExpressionAttributeValues={":v": {"S": "q" * value_bytes}},
        )

    return call


# 300,000 + "members" (7) + n members: the item is exactly 409,600 bytes at 109,593 bytes.
GROW = 409_600 - 300_000 - len("members")
# 300,000 + "m" map (1 + 3) + entry (1 + "k" 1 + value): exactly 409,600 at 109,594 bytes.
NESTED = 409_600 - 300_006

HASH_OVER, HASH_UNDER = "h" * 2049, "h" * 2048
RANGE_OVER, RANGE_UNDER = "r" * 1025, "r" * 1024
HASH_TEXT = "Size of hashkey has exceeded the maximum size limit of 2048 bytes"
RANGE_TEXT = "Aggregated size of all range keys has exceeded the size limit of 1024 bytes"


def batch_write(count: int) -> Callable[[Clients], object]:
    return lambda c: c.dynamodb.batch_write_item(
        RequestItems={TABLE: [{"PutRequest": {"Item": key(f"k{i}")}} for i in range(count)]}
    )


def transact(count: int) -> Callable[[Clients], object]:
    return lambda c: c.dynamodb.transact_write_items(
        TransactItems=[{"Put": {"TableName": TABLE, "Item": key(f"t{i}")}} for i in range(count)]
    )


def start(*, name: str = "run", input_bytes: int = 2) -> Callable[[Clients], object]:
    text = json.dumps({"x": "a" * (input_bytes - 9)}) if input_bytes > 2 else "{}"
    assert limits.utf8_size(text) == input_bytes
    return lambda c: c.sfn.start_execution(stateMachineArn=c.machine_arn, name=name, input=text)


def task_success(output_bytes: int) -> Callable[[Clients], object]:
    fill = output_bytes - len('{"x": ""}')
    text = json.dumps({"x": "é" * (fill // 2) + "a" * (fill % 2)}, ensure_ascii=False)
    assert limits.utf8_size(text) == output_bytes  # counted in bytes, not characters
    return lambda c: c.sfn.send_task_success(taskToken=c.token(), output=text)


def task_failure(*, error: int = 1, cause: int = 1) -> Callable[[Clients], object]:
    return lambda c: c.sfn.send_task_failure(
        taskToken=c.token(), error="e" * error, cause="c" * cause
    )


def send(body_bytes: int, *, attribute: bool = False) -> Callable[[Clients], object]:
    """A message of ``body_bytes`` in all (body, or body plus one 100-byte attribute)."""

    def call(c: Clients) -> object:
        # "é" is one character and two bytes: moto counts characters, SQS bytes.
        extra: dict[str, Any] = {}
        size = body_bytes
        if attribute:
            extra["MessageAttributes"] = {"a": {"DataType": "String", "StringValue": "v" * 93}}
            size -= 1 + len("String") + 93
        body = "é" * (size // 2) + "a" * (size % 2)
        return c.sqs.send_message(QueueUrl=c.queue_url, MessageBody=body, **extra)

    return call


CASES: dict[str, Case] = {
    "item size on PutItem": Case(
        put(sized_item(409_600)),
        put(sized_item(409_601)),
        "ValidationException",
        "Item size has exceeded the maximum allowed size",
        moto_refuses=True,
        moto_refuses_under=True,  # from 405,000 bytes, counted its own way
    ),
    "item size after UpdateItem ADD": Case(
        update_grow_set(1, GROW),
        update_grow_set(1, GROW + 1),
        "ValidationException",
        "Item size to update has exceeded the maximum allowed size",
    ),
    "item size after UpdateItem SET of a map entry": Case(
        update_nested(NESTED),
        update_nested(NESTED + 1),
        "ValidationException",
        "Item size to update has exceeded the maximum allowed size",
    ),
    "partition key on PutItem": Case(
        put(key(HASH_UNDER)), put(key(HASH_OVER)), "ValidationException", HASH_TEXT, True
    ),
    "sort key on PutItem": Case(
        put(key(sk=RANGE_UNDER)), put(key(sk=RANGE_OVER)), "ValidationException", RANGE_TEXT, True
    ),
    "partition key on GetItem": Case(
        lambda c: c.dynamodb.get_item(TableName=TABLE, Key=key(HASH_UNDER)),
        lambda c: c.dynamodb.get_item(TableName=TABLE, Key=key(HASH_OVER)),
        "ValidationException",
        HASH_TEXT,
    ),
    "sort key on GetItem": Case(
        lambda c: c.dynamodb.get_item(TableName=TABLE, Key=key(sk=RANGE_UNDER)),
        lambda c: c.dynamodb.get_item(TableName=TABLE, Key=key(sk=RANGE_OVER)),
        "ValidationException",
        RANGE_TEXT,
    ),
    "partition key on DeleteItem": Case(
        lambda c: c.dynamodb.delete_item(TableName=TABLE, Key=key(HASH_UNDER)),
        lambda c: c.dynamodb.delete_item(TableName=TABLE, Key=key(HASH_OVER)),
        "ValidationException",
        HASH_TEXT,
    ),
    "partition key in a Query": Case(
        lambda c: c.dynamodb.query(
            TableName=TABLE,
            KeyConditionExpression="pk = :p",
            ExpressionAttributeValues={":p": {"S": HASH_UNDER}},
        ),
        lambda c: c.dynamodb.query(
            TableName=TABLE,
            KeyConditionExpression="#k = :p",
            ExpressionAttributeNames={"#k": "pk"},
            ExpressionAttributeValues={":p": {"S": HASH_OVER}},
        ),
        "ValidationException",
        HASH_TEXT,
    ),
    "sort key in a Query": Case(
        lambda c: c.dynamodb.query(
            TableName=TABLE,
            KeyConditionExpression="pk = :p AND begins_with(sk, :s)",
            ExpressionAttributeValues={":p": {"S": "p"}, ":s": {"S": RANGE_UNDER}},
        ),
        lambda c: c.dynamodb.query(
            TableName=TABLE,
            KeyConditionExpression="pk = :p AND begins_with(sk, :s)",
            ExpressionAttributeValues={":p": {"S": "p"}, ":s": {"S": RANGE_OVER}},
        ),
        "ValidationException",
        RANGE_TEXT,
    ),
    "partition key in BatchGetItem": Case(
        lambda c: c.dynamodb.batch_get_item(RequestItems={TABLE: {"Keys": [key(HASH_UNDER)]}}),
        lambda c: c.dynamodb.batch_get_item(RequestItems={TABLE: {"Keys": [key(HASH_OVER)]}}),
        "ValidationException",
        HASH_TEXT,
    ),
    "BatchWriteItem over 25 requests": Case(
        batch_write(25),
        batch_write(26),
        "ValidationException",
        "Member must have length less than or equal to 25",
    ),
    "BatchGetItem over 100 keys": Case(
        lambda c: c.dynamodb.batch_get_item(
            RequestItems={TABLE: {"Keys": [key(f"g{i}") for i in range(100)]}}
        ),
        lambda c: c.dynamodb.batch_get_item(
            RequestItems={TABLE: {"Keys": [key(f"g{i}") for i in range(101)]}}
        ),
        "ValidationException",
        "Too many items requested for the BatchGetItem call",
        moto_refuses=True,  # with another text
    ),
    "TransactWriteItems over 100 actions": Case(
        transact(100),
        transact(101),
        "ValidationException",
        "Member must have length less than or equal to 100",
        moto_refuses=True,
    ),
    "execution input": Case(
        start(name="under", input_bytes=262_144),
        start(name="over", input_bytes=262_145),
        "ValidationException",
        "Value at 'input' failed to satisfy constraint: "
        "Member must have length less than or equal to 262144",
    ),
    "execution name length": Case(
        start(name="n" * 80),
        start(name="o" * 81),
        "ValidationException",
        "at 'name' failed to satisfy constraint: Member must have length less than or equal to 80",
    ),
    "execution name characters": Case(
        start(name="payload_id-1"),
        start(name="collection/workflow-x/item"),
        "InvalidName",
        "Invalid Name: 'collection/workflow-x/item'",
    ),
    "SendTaskSuccess output": Case(
        task_success(262_144),
        task_success(262_145),
        "ValidationException",
        "Value at 'output' failed to satisfy constraint: "
        "Member must have length less than or equal to 262144",
    ),
    "SendTaskFailure error": Case(
        task_failure(error=256),
        task_failure(error=257),
        "ValidationException",
        "Value at 'error' failed to satisfy constraint: "
        "Member must have length less than or equal to 256",
    ),
    "SendTaskFailure cause": Case(
        task_failure(cause=32_768),
        task_failure(cause=32_769),
        "ValidationException",
        "Value at 'cause' failed to satisfy constraint: "
        "Member must have length less than or equal to 32768",
    ),
    "SQS body in bytes": Case(
        send(MB),
        send(MB + 1),
        "InvalidParameterValue",
        f"Message must be shorter than {MB} bytes",
    ),
    "SQS body and attributes": Case(
        send(MB, attribute=True),
        send(MB + 1, attribute=True),
        "InvalidParameterValue",
        f"Message must be shorter than {MB} bytes",
    ),
}


def refusal(call: Callable[[], object]) -> ClientError | None:
    try:
        call()
    except ClientError as exc:
        return exc
    return None


@pytest.mark.parametrize("name", list(CASES))
def test_moto_alone(moto: Clients, name: str) -> None:
    """What moto does without the layer: the 'moto enforces' column of docs/local.md."""
    case = CASES[name]
    assert not is_active()
    assert (refusal(lambda: case.under(moto)) is not None) is case.moto_refuses_under
    refused = refusal(lambda: case.over(moto))
    assert (refused is not None) is case.moto_refuses, refused


@pytest.mark.parametrize("name", list(CASES))
def test_strict_layer(moto: Clients, name: str) -> None:
    """With the layer: just under passes, just over fails with AWS's code and text."""
    case = CASES[name]
    with strict_limits():
        assert refusal(lambda: case.under(moto)) is None
        refused = refusal(lambda: case.over(moto))
    assert refused is not None, f"{name}: the strict layer let the request through"
    assert refused.response["Error"]["Code"] == case.code
    assert case.message in refused.response["Error"]["Message"]


def test_refused_update_changes_nothing(moto: Clients) -> None:
    """An update refused for size leaves the item as it was, and creates none."""
    with strict_limits():
        assert refusal(lambda: update_grow_set(1, GROW + 1)(moto)) is not None
        stored = moto.dynamodb.get_item(TableName=TABLE, Key=key(), ConsistentRead=True)["Item"]
        assert "members" not in stored
        assert limits.item_size(stored) == 300_000
        refused = refusal(
            lambda: moto.dynamodb.update_item(
                TableName=TABLE,
                Key=key("new"),
                UpdateExpression="SET v = :v",
                ExpressionAttributeValues={":v": {"S": "z" * 409_600}},
            )
        )
        assert refused is not None
        assert "Item" not in moto.dynamodb.get_item(TableName=TABLE, Key=key("new"))


def test_nested_blocks_keep_the_layer_on(moto: Clients) -> None:
    with strict_limits():
        with strict_limits():
            assert is_active()
        assert is_active()
        assert refusal(lambda: batch_write(26)(moto)) is not None
    assert not is_active()
    assert refusal(lambda: batch_write(26)(moto)) is None


def test_item_size_counts_as_dynamodb_does() -> None:
    """Names count, numbers by significant digits, containers 3 bytes plus 1 per element."""
    assert limits.item_size({"ab": {"S": "héllo"}}) == 2 + 6
    assert limits.item_size({"n": {"N": "12345"}}) == 1 + 4
    assert limits.item_size({"n": {"N": "0.00100"}}) == 1 + 2
    assert limits.item_size({"b": {"BOOL": True}, "z": {"NULL": True}}) == 4
    assert limits.item_size({"s": {"SS": ["a", "bc"]}}) == 1 + 3
    assert limits.item_size({"l": {"L": [{"S": "a"}, {"N": "1"}]}}) == 1 + 3 + (1 + 1) + (1 + 2)
    assert limits.item_size({"m": {"M": {"k": {"S": "v"}}}}) == 1 + 3 + 1 + 1 + 1
    assert limits.item_size({"b": {"B": b"\x00\x01"}}) == 1 + 2
    with pytest.raises(ValueError, match="not a DynamoDB attribute value"):
        limits.item_size({"x": {"Q": "?"}})


LONE = "sx/\ud800"  # a lone UTF-16 surrogate: JSON can escape it, UTF-8 cannot hold it

UNENCODABLE: dict[str, tuple[Callable[[Clients, str], object], str]] = {
    "PutItem key": (lambda c, s: c.dynamodb.put_item(TableName=TABLE, Item=key(s)), "Validation"),
    "PutItem value": (
        lambda c, s: c.dynamodb.put_item(TableName=TABLE, Item={**key(), "v": {"S": s}}),
        "Validation",
    ),
    "GetItem key": (lambda c, s: c.dynamodb.get_item(TableName=TABLE, Key=key(s)), "Validation"),
    "UpdateItem value": (
        lambda c, s: c.dynamodb.update_item(
            TableName=TABLE,
            Key=key(),
            UpdateExpression="SET v = :v",
            ExpressionAttributeValues={":v": {"S": s}},
        ),
        "Validation",
    ),
    "Query key": (
        lambda c, s: c.dynamodb.query(
            TableName=TABLE,
            KeyConditionExpression="pk = :p",
            ExpressionAttributeValues={":p": {"S": s}},
        ),
        "Validation",
    ),
    "SQS body": (
        lambda c, s: c.sqs.send_message(QueueUrl=c.queue_url, MessageBody=s),
        "InvalidMessageContents",
    ),
    "SQS batch body": (
        lambda c, s: c.sqs.send_message_batch(
            QueueUrl=c.queue_url, Entries=[{"Id": "1", "MessageBody": s}]
        ),
        "InvalidMessageContents",
    ),
    "execution input": (
        lambda c, s: c.sfn.start_execution(
            stateMachineArn=c.machine_arn, name="lone", input=f'{{"id": "{s}"}}'
        ),
        "InvalidExecutionInput",
    ),
}


@pytest.mark.parametrize("name", list(UNENCODABLE))
def test_a_string_without_utf8_form_is_refused_not_crashed_on(moto: Clients, name: str) -> None:
    """moto alone crashes (UnicodeEncodeError: HTTP 500 through a server) or takes it."""
    call, code = UNENCODABLE[name]
    with strict_limits():
        assert refusal(lambda: call(moto, "sx/ok")) is None
        refused = refusal(lambda: call(moto, LONE))
    assert refused is not None, f"{name}: the strict layer let the request through"
    assert refused.response["Error"]["Code"] == (
        "ValidationException" if code == "Validation" else code
    )
    if code == "Validation":
        assert refused.response["Error"]["Message"] == strict.DDB_NOT_UTF8
    if code == "InvalidMessageContents":
        assert "Invalid binary character '#xD800'" in refused.response["Error"]["Message"]
