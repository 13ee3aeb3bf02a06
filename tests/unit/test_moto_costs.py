"""The local stack applies each DynamoDB request atomically, as AWS applies each item write."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from moto.dynamodb.models import DynamoDBBackend

from tests.conftest import DEPENDENCY_TABLE

if TYPE_CHECKING:
    import pytest

    from tests.conftest import Aws

KEY = {"payload_id": {"S": "p"}, "waiter_id": {"S": "w"}}


def test_a_request_does_not_run_while_another_is_being_applied(
    aws: Aws, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN an item, and an UpdateItem that another thread's GetItem tries to read in the middle of
    aws.dynamodb.put_item(TableName=DEPENDENCY_TABLE, Item={**KEY, "n": {"N": "0"}})
    real = DynamoDBBackend.update_item
    read: list[dict[str, Any]] = []
    finished = threading.Event()

    def get() -> None:
        read.append(aws.dynamodb.get_item(TableName=DEPENDENCY_TABLE, Key=KEY)["Item"])
        finished.set()

    reader = threading.Thread(target=get)

    def update_item(self: DynamoDBBackend, *args: Any, **kwargs: Any) -> Any:
        reader.start()
        # moto is not thread-safe: without the request lock the read runs now, against an item
        # half updated (CI saw "dictionary changed size during iteration" from two writes).
        interleaved = finished.wait(timeout=0.5)
        result = real(self, *args, **kwargs)
        assert not interleaved
        return result

    monkeypatch.setattr(DynamoDBBackend, "update_item", update_item)
    # WHEN the update runs
    aws.dynamodb.update_item(
        TableName=DEPENDENCY_TABLE,
        Key=KEY,
        UpdateExpression="SET n = :one",
        ExpressionAttributeValues={":one": {"N": "1"}},
    )
    reader.join()
    # THEN the read waited for it, and saw the whole write
    assert read == [{**KEY, "n": {"N": "1"}}]
