"""Scan pages started at their key (``moto_scans``) hold what moto's own pages hold.

The same scan, with items put and deleted between its pages, runs once on moto
alone and once under ``aws_like_costs``; every page must be the same.
"""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from moto import mock_aws

from dependency_tracker_local.moto_costs import aws_like_costs

REGION = "us-east-1"


def _tables(dynamodb: Any) -> None:
    dynamodb.create_table(
        TableName="ranged",
        KeySchema=[
            {"AttributeName": "pk", "KeyType": "HASH"},
            {"AttributeName": "sk", "KeyType": "RANGE"},
        ],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "N"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    dynamodb.create_table(
        TableName="plain",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )


def _key(table: str, i: int) -> dict[str, Any]:
    # Numbers that sort differently as text (9 < 10) and ids with odd characters.
    if table == "ranged":
        return {"pk": {"S": f"p{i % 7}-é"}, "sk": {"N": str(i * 3 - 50)}}
    return {"pk": {"S": f"id/{i}\u00a0{'z' * (i % 3)}"}}


def _scenario(table: str, **scan: Any) -> list[list[Any]]:
    with mock_aws():
        dynamodb = boto3.client("dynamodb", region_name=REGION)
        _tables(dynamodb)
        for i in range(120):
            dynamodb.put_item(TableName=table, Item={**_key(table, i), "n": {"N": str(i)}})
        pages: list[list[Any]] = []
        start: dict[str, Any] | None = None
        turn = 0
        while True:
            more: dict[str, Any] = {"ExclusiveStartKey": start} if start else {}
            page = dynamodb.scan(TableName=table, Limit=9, **scan, **more)
            pages.append([item["n"]["N"] for item in page["Items"]])
            start = page.get("LastEvaluatedKey")
            if start is None:
                return pages
            # Between pages: new keys on both sides of the cursor, a delete, an overwrite,
            # and a cancelled transaction (its item put back as it was).
            turn += 1
            dynamodb.put_item(
                TableName=table, Item={**_key(table, 1000 + turn), "n": {"N": str(-turn)}}
            )
            dynamodb.delete_item(TableName=table, Key=_key(table, (turn * 13) % 120))
            dynamodb.put_item(TableName=table, Item={**_key(table, 5), "n": {"N": "5"}})
            with pytest.raises(dynamodb.exceptions.TransactionCanceledException):
                dynamodb.transact_write_items(
                    TransactItems=[
                        {"Delete": {"TableName": table, "Key": _key(table, 7)}},
                        {
                            "ConditionCheck": {
                                "TableName": table,
                                "Key": _key(table, 8),
                                "ConditionExpression": "attribute_not_exists(n)",
                            }
                        },
                    ]
                )


@pytest.mark.parametrize("table", ["ranged", "plain"])
@pytest.mark.parametrize(
    "scan",
    [{}, {"FilterExpression": "n > :v", "ExpressionAttributeValues": {":v": {"N": "40"}}}],
    ids=["all", "filtered"],
)
def test_scan_pages_equal_moto_s_own(table: str, scan: dict[str, Any]) -> None:
    scanned = _scenario(table, **scan)
    with aws_like_costs():
        started_at_key = _scenario(table, **scan)
    assert started_at_key == scanned
    assert len(scanned) > 5
