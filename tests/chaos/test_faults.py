"""The fault injector itself: each kind does what it says, on a real (moto) client."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from botocore.exceptions import ClientError

from dependency_tracker.core import clients
from tests.chaos.faults import Crash, FakeParents, FaultInjector, running

if TYPE_CHECKING:
    from tests.conftest import Aws

SITE = "test:dynamodb.PutItem"


def put(table: str, key: str) -> dict[str, object]:
    return {
        "TableName": table,
        "Item": {"payload_id": {"S": key}, "state": {"S": "CLAIMED"}},
        "ConditionExpression": "attribute_not_exists(payload_id)",
    }


def stored(aws: Aws, key: str) -> bool:
    found = aws.dynamodb.get_item(
        TableName=aws.states.table_name, Key={"payload_id": {"S": key}}, ConsistentRead=True
    )
    return "Item" in found


def injector(aws: Aws, kind: str, count: int = 1) -> FaultInjector:
    faults = FaultInjector(seed=1, plan={(SITE, count): kind}, twin=aws.dynamodb)
    faults.attach(clients.client("dynamodb"))
    return faults


@pytest.mark.parametrize(
    ("kind", "code"),
    [("throttle", "ProvisionedThroughputExceededException"), ("server", "InternalServerError")],
)
def test_errors_are_raised_before_the_call(aws: Aws, kind: str, code: str) -> None:
    faults = injector(aws, kind)
    table = aws.states.table_name
    with running("test"), pytest.raises(ClientError) as raised:
        clients.client("dynamodb").put_item(**put(table, "a"))
    assert raised.value.response["Error"]["Code"] == code
    assert not stored(aws, "a")  # nothing was written
    assert faults.summary()[kind] == 1


def test_crash_comes_after_the_write(aws: Aws) -> None:
    faults = injector(aws, "crash", count=2)
    table = aws.states.table_name
    with running("test"):
        clients.client("dynamodb").put_item(**put(table, "a"))  # call 1: no fault
        with pytest.raises(Crash):
            clients.client("dynamodb").put_item(**put(table, "b"))
    assert stored(aws, "b")  # the write happened, then the Lambda died
    assert faults.summary()["crash"] == 1


def test_conditional_race_is_a_real_lost_race(aws: Aws) -> None:
    faults = injector(aws, "conditional_race")
    table = aws.states.table_name
    with running("test"), pytest.raises(ClientError) as raised:
        clients.client("dynamodb").put_item(**put(table, "a"))
    assert raised.value.response["Error"]["Code"] == "ConditionalCheckFailedException"
    assert stored(aws, "a")  # the twin's write won
    assert faults.summary()["conditional_race"] == 1


def test_other_sites_and_disabled_injectors_are_left_alone(aws: Aws) -> None:
    faults = injector(aws, "throttle")
    faults.enabled = False
    table = aws.states.table_name
    with running("test"):
        clients.client("dynamodb").put_item(**put(table, "a"))
    with running("other"):
        clients.client("dynamodb").put_item(**put(table, "b"))
    assert faults.summary()["throttle"] == 0
    assert faults.calls == {SITE: 1, "other:dynamodb.PutItem": 1}


def test_fake_parents_resume_once_then_refuse(aws: Aws) -> None:
    parents = FakeParents(tokens={"tok-1", "tok-2"})
    sfn = clients.client("stepfunctions")
    parents.attach(sfn)
    sfn.send_task_success(taskToken="tok-1", output="{}")
    with pytest.raises(ClientError) as again:
        sfn.send_task_failure(taskToken="tok-1", error="DependencyFailed")
    assert again.value.response["Error"]["Code"] == "InvalidToken"
    parents.parent_gone("tok-2", "TaskTimedOut")
    with pytest.raises(ClientError) as gone:
        sfn.send_task_success(taskToken="tok-2", output="{}")
    assert gone.value.response["Error"]["Code"] == "TaskTimedOut"
    assert list(parents.sent) == ["tok-1"]
    assert [s.error for s in parents.late["tok-1"]] == ["DependencyFailed"]
