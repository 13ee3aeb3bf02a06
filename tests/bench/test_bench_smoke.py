"""The benchmark's CI job: a tiny ``make bench`` that must run and produce every figure.

Nothing about speed is asserted (timings on shared CI machines mean nothing);
only that every section ran and ``results.json`` has its complete structure.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest

from bench import run
from bench.config import JOIN, PATTERNS, SMOKE

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.e2e

TARGETS = {
    "join_transitions",
    "map_vs_polling",
    "join_vs_polling",
    "throughput_vs_bound",
    "update_state_waiters",
}


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    output: Path = tmp_path_factory.mktemp("bench") / "results.json"
    assert run.main(["--smoke", "--output", str(output)]) == 0
    data: dict[str, Any] = json.loads(output.read_text(encoding="utf-8"))
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


def test_throughput_has_a_bound_and_a_ratio(results):
    section = results["throughput"]
    assert all("error" not in scale for scale in section["scales"])
    largest = section["largest"]
    assert largest["edges_resolved"] == largest["edges"]
    assert largest["peak_rss_mib"] > 0
    assert largest["cpu"]["by_thread_group_s"]
    assert section["bound"]["edges_per_s"]["calls"] > 0
    assert set(section["ratio"]) == {"calls", "engine"}
    assert results["calibration"]["per_call_ms"]["dynamodb.PutItem@dependency"] > 0


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
