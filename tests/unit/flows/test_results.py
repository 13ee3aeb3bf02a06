"""Stored results: inline when small, a pointer in the payload bucket when not."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from dependency_tracker.payloads.bucket import PayloadBucket
from dependency_tracker.payloads.results import INLINE_RESULT_BYTES, build_result, result_items

if TYPE_CHECKING:
    from tests.conftest import Aws


def output(blob: int = 0) -> dict[str, object]:
    return {
        "type": "FeatureCollection",
        "features": [
            {
                "id": "a",
                "collection": "c",
                "properties": {"blob": "x" * blob},
                "links": [{"rel": "self", "href": "s3://out/a.json"}],
            },
            {"id": "b"},
        ],
    }


def test_items_name_ids_collections_and_self_hrefs() -> None:
    assert result_items(output()) == [
        {"id": "a", "collection": "c", "href": "s3://out/a.json"},
        {"id": "b"},
    ]
    assert result_items({"not": "a payload"}) == []
    assert result_items(None) == []


def test_small_result_is_inline() -> None:
    stored = json.loads(build_result("p", 1, json.dumps(output()), None))
    assert stored["items"][0]["id"] == "a"
    assert stored["output"] == output()


def test_large_result_goes_to_the_bucket(aws: Aws) -> None:
    aws.s3.create_bucket(Bucket="results-bkt")
    bucket = PayloadBucket(aws.s3, "results-bkt")
    text = json.dumps(output(blob=INLINE_RESULT_BYTES))
    stored_json = build_result("p", 2, text, bucket)
    stored = json.loads(stored_json)
    assert len(stored_json) < 300
    assert stored["item_count"] == 2
    assert stored["bytes"] > INLINE_RESULT_BYTES
    assert stored["url"].startswith("s3://results-bkt/results/")
    assert stored["url"].endswith("/2.json")
    key = stored["url"].removeprefix("s3://results-bkt/")
    body = json.loads(aws.s3.get_object(Bucket="results-bkt", Key=key)["Body"].read())
    assert body["output"] == json.loads(text)


def test_large_result_without_a_bucket_is_truncated_not_inlined() -> None:
    stored = json.loads(build_result("p", 1, json.dumps(output(blob=10_000)), None))
    assert stored == {"bytes": stored["bytes"], "item_count": 2, "truncated": True}


def test_output_pointer_is_kept() -> None:
    pointer = json.dumps({"url": "s3://big/out.json"})
    assert json.loads(build_result("p", 1, pointer, None)) == {"url": "s3://big/out.json"}


def test_non_json_output_is_kept_as_text() -> None:
    assert json.loads(build_result("p", 1, "plain", None))["output"] == "plain"
