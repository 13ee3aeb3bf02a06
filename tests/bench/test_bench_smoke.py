"""The benchmark's CI job: a tiny ``make bench`` that must run and produce every figure.

Nothing about speed is asserted (timings on shared CI machines mean nothing);
only that every section ran, ``results.json`` has its complete structure and
the committed summary's shape comes out of it, plus two counts that do not
depend on the machine: a join's process invocations stay within their chunk,
and request units are counted the way DynamoDB bills transactions and batch
reads (checked on synthetic calls, no stack).
"""

from __future__ import annotations

import json
import math
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import pytest

from bench import run
from bench.config import JOIN, PATTERNS, SMOKE
from bench.counting import TRACKER, CallCounter

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.e2e

TARGETS = {
    "join_transitions",
    "map_vs_polling",
    "join_vs_polling",
    "update_state_waiters",
    "join_write_units",
    "join_calls_per_invocation",
    "join_platform",
}


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder: Path = tmp_path_factory.mktemp("bench")
    arguments = ["--smoke", "--output", str(folder / "results.json")]
    assert run.main([*arguments, "--summary", str(folder / "summary.json")]) == 0
    return folder


@pytest.fixture(scope="module")
def results(outputs: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((outputs / "results.json").read_text(encoding="utf-8"))
    return data


def test_meta_names_the_machine_and_versions(results):
    meta = results["meta"]
    assert meta["cpu_count"] >= 1
    assert meta["versions"]["moto"]
    assert meta["versions"]["boto3"]
    assert meta["config"]["name"] == "smoke"


def test_every_design_and_size_has_a_summary(results):
    config = SMOKE.patterns
    expected = {(p, n) for p in PATTERNS for n in config.sizes}
    expected |= {(JOIN, n) for n in config.join_only_sizes}
    rows = {(row["pattern"], row["n"]): row for row in results["patterns"]["summary"]}
    assert set(rows) == expected
    for row in rows.values():
        assert row["transitions"] >= 1
        assert row["history_events"] >= row["transitions"]
        for measure in ("from_child_stop", "from_state_recorded"):
            assert set(row["resume_latency_s"][measure]) == {"p50", "p95", "max"}
        assert set(row["calls_per_edge"]) == {"tracker", "state_machine", "plumbing_data"}
        assert row["calls_per_edge"]["tracker"]
        assert row["lambda_per_edge"]["process"]["records"] > 0
    assert results["patterns"]["scale"]["factor"] > 0


def test_wall_clock_calibration_is_left_to_the_timing_script(results):
    assert {"throughput", "calibration"}.isdisjoint(results)
    assert all("bound" not in row and "cpu" not in row for row in results["joins"]["sizes"])


def test_the_summary_keeps_the_counts_and_the_cost_model_in_a_few_hundred_lines(outputs, results):
    text = (outputs / "summary.json").read_text(encoding="utf-8")
    summary = json.loads(text)
    assert len(text.splitlines()) < 400
    assert len(summary["patterns"]) == len(results["patterns"]["summary"])
    assert [row["n"] for row in summary["joins"]] == list(SMOKE.joins.sizes)
    assert summary["joins"][0]["per_member"]["tracker_calls"] > 0
    assert summary["costs"]["per_million_edges_usd"]
    assert {target["name"] for target in summary["targets"]} == TARGETS


def test_handler_costs_cover_every_case(results):
    handlers = results["handlers"]
    assert [row["waiters"] for row in handlers["update_state"]] == list(SMOKE.handlers.waiters)
    for row in handlers["update_state"]:
        assert row["dynamodb_calls"]["dynamodb.UpdateItem@dependency"] == row["waiters"]
    assert {row["case"] for row in handlers["process_batch"]} == {"new", "running", "succeeded"}
    assert {row["concurrency"] for row in handlers["resolve_all"]} >= {1}


def test_cost_model_prices_every_row(results):
    costs = results["costs"]
    assert costs["region"] == "us-east-1"
    assert len(costs["per_million_edges"]) == len(results["patterns"]["summary"])
    for row in costs["per_million_edges"]:
        assert row["per_million_edges_usd"]["total_waiting"] > 0
    assert [row["wait"] for row in costs["waiting"]] == ["1 minute", "1 hour", "1 day"]
    assert costs["ten_minute_wait_transitions"]
    assert costs["minimum"]


def test_every_target_is_reported(results):
    assert {target["name"] for target in results["targets"]} == TARGETS
    assert all(isinstance(target["met"], bool) for target in results["targets"])


def test_joins_are_counted_per_member_and_per_invocation(results):
    section = results["joins"]
    config = SMOKE.joins
    rows = {row["n"]: row for row in section["sizes"]}
    assert set(rows) == set(config.sizes)
    assert config.chunk_size is not None
    for n, row in rows.items():
        assert "error" not in row, row.get("error")
        assert row["chunks"] == math.ceil(n / config.chunk_size)
        assert row["members_by"].startswith(
            "payloads (" if n in config.inline_sizes else "payloads_url"
        )
        # every member counted once, in one two-item transaction
        assert row["calls_by_function"]["callback"]["dynamodb.TransactWriteItems@dependency"] == n
        assert row["units"]["transactional_items"] >= 2 * n
        process = row["per_invocation"]["process"]
        bound = run.JOIN_CALLS_PER_CHUNK + run.JOIN_CALLS_PER_MEMBER * config.chunk_size
        assert 0 < process["max_calls"] <= bound
        assert row["per_invocation"]["decision"]["function"] == "callback"
        shards = [p for p in row["units"]["join_partitions"] if p.startswith("count shard")]
        assert shards
        assert row["per_member"]["write_units"] > 0
        # the platform model was on, stopped nothing, and each member ran exactly once
        assert row["platform"]["modelled"]
        assert row["platform"]["stopped_by_loop_detection"] == 0
        assert row["runs_per_member"] == {"min": 1, "max": 1, "not_once": 0, "other_executions": 0}
        # one process invocation per chunk: the join message's (it sends the others) and
        # theirs, after the one that handed the join message to the join queue
        registration = row["registration"]
        assert registration["hand_off_invocations"] == 1
        assert registration["process_invocations"] == row["chunks"]
        assert registration["fan_out_calls"]["sqs.SendMessageBatch"] == 1
        assert 0 < registration["chunk_calls_max"] <= bound
    model = section["model"]
    derived = {str(n) for n in config.derived_sizes}
    assert set(model["derived"]["totals"]["tracker_calls"]) == derived
    assert model["hot_partitions"]["members_per_s_per_join"] > 0
    aws = model["registration_on_aws"]
    assert [row["join_max_concurrency"] for row in aws["rows"] if row["case"] == "fast"] == [
        2,
        10,
        20,
        50,
    ]
    assert all(row["large_regions"]["seconds"] > 0 for row in aws["rows"])
    assert len(section["costs"]) == len(rows) + len(config.derived_sizes)


def _counter() -> CallCounter:
    return CallCounter(tables={"deps": "dependency", "state": "state"}, token_chars=None)


def _call(counter: CallCounter, operation: str, params: dict[str, Any], parsed: dict[str, Any]):
    context: dict[str, Any] = {}
    model = SimpleNamespace(name=operation)
    counter._params(TRACKER, "dynamodb", model=model, params=params, context=context)
    counter._after(parsed=parsed, context={**context, "bench.start": 0.0})
    return counter.drain().capacity[TRACKER]


def test_a_transactional_put_costs_twice_its_write_units():
    item = {"payload_id": {"S": "join#j"}, "waiter_id": {"S": "chunk#1"}, "blob": {"S": "x" * 1500}}
    update = {
        "Update": {
            "TableName": "deps",
            "Key": {"payload_id": {"S": "join#j#counts#0"}, "waiter_id": {"S": "counts"}},
            "UpdateExpression": "ADD succeeded :one",
        }
    }
    capacity = _call(
        _counter(),
        "TransactWriteItems",
        {"TransactItems": [{"Put": {"TableName": "deps", "Item": item}}, update]},
        {},
    )
    # the put: 2 KB, 2 units, twice; the update is sized afterwards from the stored row, twice
    assert capacity.write_units["dependency"] == 4
    assert capacity.by_partition_write[("dependency", "join#j")] == 4
    assert [entry[3] for entry in capacity.deferred_updates] == [2]
    assert capacity.transactional_items == 2


def test_a_batch_get_counts_every_key_asked_for():
    keys = [{"payload_id": {"S": f"p{i}"}, "waiter_id": {"S": "w"}} for i in range(3)]
    found = [{**keys[0], "blob": {"S": "x" * 5000}}]
    capacity = _call(
        _counter(),
        "BatchGetItem",
        {"RequestItems": {"deps": {"Keys": keys, "ConsistentRead": True}}},
        {
            "Responses": {"deps": found},
            "UnprocessedKeys": {"deps": {"Keys": [keys[2]]}},
        },
    )
    # found: 5 KB, 2 units; missing: the minimum, 1; unprocessed: nothing
    assert capacity.read_units["dependency"] == 3
    assert capacity.by_partition_read[("dependency", "p1")] == 1
    assert ("dependency", "p2") not in capacity.by_partition_read
