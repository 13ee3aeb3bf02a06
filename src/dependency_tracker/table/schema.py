"""Table definitions, shared by the local stack, the tests and ``template.yaml``."""

from __future__ import annotations

from typing import Any

STATE_TABLE_KEY = "payload_id"
DEPENDENCY_TABLE_KEYS = ("payload_id", "waiter_id")
TTL_ATTRIBUTE = "expiration_time"
# The callback reads and filters a record's NewImage only; an old image would be one
# more copy of every task token in the stream (template.yaml sets the same).
STREAM_VIEW_TYPE = "NEW_IMAGE"
# The sparse index of undecided joins with a deadline (joins/deadlines.py): a few shard
# keys, each sorted by the deadline in epoch seconds; a decision removes the shard key.
DEADLINES_INDEX = "deadlines"
DEADLINE_INDEX_KEYS = ("deadline_shard", "deadline_epoch")


def state_table_definition(name: str) -> dict[str, Any]:
    """``CreateTable`` arguments of the payload state table."""
    return {
        "TableName": name,
        "KeySchema": [{"AttributeName": STATE_TABLE_KEY, "KeyType": "HASH"}],
        "AttributeDefinitions": [{"AttributeName": STATE_TABLE_KEY, "AttributeType": "S"}],
        "BillingMode": "PAY_PER_REQUEST",
    }


def dependency_table_definition(name: str) -> dict[str, Any]:
    """``CreateTable`` arguments of the dependency table (stream on, new images only)."""
    partition, sort = DEPENDENCY_TABLE_KEYS
    return {
        "TableName": name,
        "KeySchema": [
            {"AttributeName": partition, "KeyType": "HASH"},
            {"AttributeName": sort, "KeyType": "RANGE"},
        ],
        "AttributeDefinitions": [
            {"AttributeName": partition, "AttributeType": "S"},
            {"AttributeName": sort, "AttributeType": "S"},
            {"AttributeName": DEADLINE_INDEX_KEYS[0], "AttributeType": "S"},
            {"AttributeName": DEADLINE_INDEX_KEYS[1], "AttributeType": "N"},
        ],
        "GlobalSecondaryIndexes": [
            {
                "IndexName": DEADLINES_INDEX,
                "KeySchema": [
                    {"AttributeName": DEADLINE_INDEX_KEYS[0], "KeyType": "HASH"},
                    {"AttributeName": DEADLINE_INDEX_KEYS[1], "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "KEYS_ONLY"},
            }
        ],
        "BillingMode": "PAY_PER_REQUEST",
        "StreamSpecification": {"StreamEnabled": True, "StreamViewType": STREAM_VIEW_TYPE},
    }


def create_tables(dynamodb: Any, *, state_table: str, dependency_table: str) -> str:
    """Create both tables with TTL on; returns the dependency table's stream ARN."""
    dynamodb.create_table(**state_table_definition(state_table))
    created = dynamodb.create_table(**dependency_table_definition(dependency_table))
    for table in (state_table, dependency_table):
        dynamodb.get_waiter("table_exists").wait(
            TableName=table, WaiterConfig={"Delay": 1, "MaxAttempts": 30}
        )
        dynamodb.update_time_to_live(
            TableName=table,
            TimeToLiveSpecification={"Enabled": True, "AttributeName": TTL_ATTRIBUTE},
        )
    return str(created["TableDescription"]["LatestStreamArn"])
