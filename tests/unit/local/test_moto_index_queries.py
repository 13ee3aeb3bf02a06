"""Under aws_like_costs a query on a sparse global index answers as moto's own does."""

from __future__ import annotations

from typing import Any

import boto3
from moto import mock_aws

from dependency_tracker.table.schema import DEADLINES_INDEX, create_tables
from dependency_tracker_local.moto_costs import aws_like_costs


def due(client: Any, now: int) -> list[dict[str, Any]]:
    return list(
        client.query(
            TableName="d",
            IndexName=DEADLINES_INDEX,
            KeyConditionExpression="deadline_shard = :s AND deadline_epoch <= :now",
            ExpressionAttributeValues={":s": {"S": "deadline#0"}, ":now": {"N": str(now)}},
        )["Items"]
    )


def test_an_index_query_keeps_moto_s_items_and_order() -> None:
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_tables(client, state_table="s", dependency_table="d")
        # GIVEN rows without the index's keys, and index entries in no particular order,
        # one of them on another shard and one that lost its shard key (decided)
        for index in range(300):
            client.put_item(
                TableName="d",
                Item={"payload_id": {"S": f"p{index}"}, "waiter_id": {"S": "token#x"}},
            )
        for index, epoch in enumerate([50, 10, 40, 30, 20, 60]):
            item = {
                "payload_id": {"S": f"join#j{index}"},
                "waiter_id": {"S": "join"},
                "deadline_shard": {"S": "deadline#1" if epoch == 60 else "deadline#0"},
                "deadline_epoch": {"N": str(epoch)},
            }
            client.put_item(TableName="d", Item=item)
        client.update_item(
            TableName="d",
            Key={"payload_id": {"S": "join#j2"}, "waiter_id": {"S": "join"}},
            UpdateExpression="REMOVE deadline_shard",
        )
        # WHEN the index is queried by moto alone and under the patch
        plain = due(client, 45)
        with aws_like_costs():
            patched = due(client, 45)
        # THEN both answer the same entries in the same order: by deadline
        assert patched == plain
        assert [item["payload_id"]["S"] for item in patched] == ["join#j1", "join#j4", "join#j3"]
