"""The committed ``bench/summary.json``: what of a bench run carries over to AWS.

``build/bench/results.json`` (git-ignored) keeps every figure of a run; the
summary keeps the counts (AWS calls, DynamoDB units, state transitions and
history events, per edge or per member), the cost model in dollars and the
targets, a few hundred lines that a reviewer can diff. Wall-clock figures are
this machine's and stay out of it.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path

# The sections of python -m bench (bench/run.py); older results also hold the timing ones.
SECTIONS = ("patterns", "handlers", "joins")
WIDTH = 100
# A mapping of plain values (calls by operation, units by table) stays on one line up to this.
LEAF_WIDTH = 180
ABOUT = (
    "Counts per edge (patterns) and per member (joins), the cost model and the targets of "
    "the bench run named in meta (make bench; every figure: build/bench/results.json). "
    "docs/performance.md explains them."
)


def summarize(results: dict[str, Any]) -> dict[str, Any]:
    """The counts, the cost model and the targets of a run's results."""
    meta = results.get("meta", {})
    out: dict[str, Any] = {
        "about": ABOUT,
        "meta": {
            "generated_at": meta.get("generated_at"),
            "config": meta.get("config", {}).get("name"),
            "versions": meta.get("versions", {}),
            # Sections rerun into the results later (--merge), each with its own date there.
            "sections_rerun": sorted(set(meta.get("merged", {})) & set(SECTIONS)),
        },
    }
    if "patterns" in results:
        out["patterns"] = [_pattern(row) for row in results["patterns"]["summary"]]
    joins = results.get("joins", {})
    if joins.get("sizes"):
        out["joins"] = [_join(row) for row in joins["sizes"] if "error" not in row]
        failed = [row["n"] for row in joins["sizes"] if "error" in row]
        if failed:
            out["joins_failed_at_n"] = failed
    if "model" in joins:
        out["join_model"] = _join_model(joins["model"])
    if "costs" in results:
        out["costs"] = _costs(results["costs"])
    if joins.get("costs"):
        out["join_costs_per_million_edges_usd"] = [
            {"n": row["n"], "derived": row.get("derived", False), **_usd(row)}
            for row in joins["costs"]
        ]
    out["targets"] = [
        {"name": target["name"], "met": target["met"], "measured": target["measured"]}
        for target in results.get("targets", [])
    ]
    return out


def _pattern(row: dict[str, Any]) -> dict[str, Any]:
    lambda_records = {name: stats["records"] for name, stats in row["lambda_per_edge"].items()}
    return {
        "pattern": row["pattern"],
        "n": row["n"],
        "per_parent": {
            "transitions": row["transitions"],
            "history_events": row["history_events"],
            "poll_rounds": row["poll_rounds"],
        },
        "child_transitions_each": row["child_transitions_each"],
        "tracker_calls_per_edge": row["calls_per_edge"]["tracker"],
        "state_machine_calls_per_edge": row["calls_per_edge"]["state_machine"],
        "lambda_records_per_edge": lambda_records,
        "units_per_edge": row["capacity_per_edge"],
        "sqs_messages_per_edge": row["sqs_messages_per_edge"],
    }


def _join(row: dict[str, Any]) -> dict[str, Any]:
    per = row["per_member"]
    process = row.get("per_invocation", {}).get("process", {})
    return {
        "n": row["n"],
        "chunk_size": row["chunk_size"],
        "chunks": row["chunks"],
        "per_parent": {"transitions": row["transitions"], "history_events": row["history_events"]},
        "per_member": {
            "tracker_calls": per["tracker_calls"],
            "write_units": per["write_units"],
            "read_units": per["read_units"],
        },
        "tracker_calls_per_member": per["tracker"],
        "calls_per_member_by_function": per["by_function"],
        "state_machine_calls_per_member": per["state_machine"],
        "max_calls_in_one_process_invocation": process.get("max_calls"),
        "runs_per_member": row.get("runs_per_member"),
    }


def _join_model(model: dict[str, Any]) -> dict[str, Any]:
    derived = model["derived"]
    hot = model["hot_partitions"]
    return {
        "derived_per_member": derived["per_member"],
        "derived_max_calls_per_invocation": derived["max_calls_per_invocation"],
        "hot_partitions": {
            "n": hot["n"],
            "hottest": hot["hottest"],
            "members_per_s_per_join": hot["members_per_s_per_join"],
            "headroom_over_start_execution": hot["headroom_over_start_execution"],
        },
        "map_write_units_per_edge": model.get("map_write_units_per_edge"),
    }


def _usd(row: dict[str, Any]) -> dict[str, Any]:
    usd = row["per_million_edges_usd"]
    return {"total_waiting": usd["total_waiting"], "total_with_child": usd["total_with_child"]}


def _costs(costs: dict[str, Any]) -> dict[str, Any]:
    return {
        "region": costs["region"],
        "prices_checked_on": costs["prices_checked_on"],
        "per_million_edges_usd": [
            {"pattern": row["pattern"], "n": row["n"], **_usd(row)}
            for row in costs["per_million_edges"]
        ],
        "waiting": costs["waiting"],
        "ten_minute_wait_transitions": costs["ten_minute_wait_transitions"],
        "minimum": costs["minimum"],
    }


def render(value: Any, indent: int = 0) -> str:
    """JSON, a value on one line when it fits in ``WIDTH`` columns (short, diffable)."""
    flat = json.dumps(value)
    leaf = isinstance(value, dict) and not any(isinstance(v, dict | list) for v in value.values())
    width = LEAF_WIDTH if leaf else WIDTH
    if not isinstance(value, dict | list) or indent + len(flat) <= width or not value:
        return flat
    pad = " " * (indent + 2)
    if isinstance(value, dict):
        items = [
            f"{pad}{json.dumps(key)}: {render(item, indent + 2)}" for key, item in value.items()
        ]
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    items = [pad + render(item, indent + 2) for item in value]
    return "[\n" + ",\n".join(items) + "\n" + " " * indent + "]"


def write(summary: dict[str, Any], path: Path) -> None:
    """Write ``summary`` to ``path`` (parents created)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(summary) + "\n", encoding="utf-8")
