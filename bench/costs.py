"""Cost model: dollars per million dependency edges, and the cost of waiting.

Inputs are the counts measured by :mod:`bench.patterns` (per edge, per design
and n) and the list prices in ``bench/prices.json``; batch sizes, memory and
architecture come from ``template.yaml``. Nothing here is measured: every
figure is a count times a price, and ``inputs`` says which counts.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from bench.config import JOIN, MAP, POLL

PRICES = Path(__file__).resolve().parent / "prices.json"
TEMPLATE = Path(__file__).resolve().parent.parent / "template.yaml"
MILLION = 1_000_000
WAITS = {"1 minute": 60, "1 hour": 3600, "1 day": 86_400}
POLL_INTERVALS = (10, 60, 300)
TEN_MINUTES = 600


def load_prices(path: Path = PRICES) -> dict[str, Any]:
    """``prices.json`` as a dict."""
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def price(prices: dict[str, Any], name: str) -> float:
    """One unit price in USD."""
    return float(prices["prices"][name]["usd"])


def assumption(prices: dict[str, Any], name: str) -> Any:
    """One assumption's value."""
    return prices["assumptions"][name]["value"]


def template_settings(prices: dict[str, Any], path: Path = TEMPLATE) -> dict[str, Any]:
    """Batch sizes, memory and architecture of the functions, read from ``template.yaml``."""
    settings = dict(assumption(prices, "fallback_from_template"))
    settings["source"] = "fallback (prices.json)"
    if not path.is_file():
        return settings
    text = path.read_text(encoding="utf-8")
    found = {
        "process_batch_size": re.search(
            r"^  ProcessBatchSize:\n(?:    .*\n)*?    Default: (\d+)", text, re.MULTILINE
        ),
        "callback_batch_size": re.search(
            r"^  CallbackFunction:\n(?:.*\n)*?\s+Type: DynamoDB\n(?:.*\n)*?\s+BatchSize: (\d+)",
            text,
            re.MULTILINE,
        ),
        "memory_mb": re.search(r"^Globals:\n(?:.*\n)*?\s+MemorySize: (\d+)", text, re.MULTILINE),
        "architecture": re.search(
            r"^Globals:\n(?:.*\n)*?\s+Architectures: \[(\w+)\]", text, re.MULTILINE
        ),
    }
    if all(found.values()):
        settings = {
            key: (match.group(1) if key == "architecture" else int(match.group(1)))
            for key, match in found.items()
            if match is not None
        }
        settings["source"] = "template.yaml"
    return settings


def sqs_requests_per_message(size: float, batch: int, chunk: int) -> float:
    """Billed SQS requests to send, receive (in batches) and delete one message."""
    send = math.ceil(size / chunk) if size else 1
    receive = math.ceil(batch * size / chunk) / batch if size else 1 / batch
    return send + receive + 1 / batch


def edge_costs(
    row: dict[str, Any], prices: dict[str, Any], settings: dict[str, Any]
) -> dict[str, Any]:
    """Cost per million edges of one (design, n) summary row."""
    n = row["n"]
    chunk = int(prices["rules"]["sqs_chunk_bytes"])
    lam = row["lambda_per_edge"]
    records = {name: float(stats.get("records", 0.0)) for name, stats in lam.items()}
    batches = {
        "process": int(settings["process_batch_size"]),
        "callback": int(settings["callback_batch_size"]),
        "update-state": 1,  # EventBridge: one event per invocation
    }
    invocations = {name: records.get(name, 0.0) / batches.get(name, 1) for name in records}
    invocations_worst = dict(records)  # every event alone (idle queue, sparse stream)
    latency = assumption(prices, "aws_call_latency_ms")
    overhead = float(assumption(prices, "lambda_invocation_overhead_ms"))
    call_ms = sum(
        per_edge * float(latency.get(name.split(".", 1)[0], 10))
        for name, per_edge in row["calls_per_edge"]["tracker"].items()
    )
    duration_ms = call_ms + overhead * sum(invocations.values())
    gb = float(settings["memory_mb"]) / 1024
    capacity = row["capacity_per_edge"]
    write_units = sum(v for k, v in capacity.items() if k.startswith("write_units"))
    read_units = sum(v for k, v in capacity.items() if k.startswith("read_units"))
    read_units += capacity.get("state_machine_read_units", 0.0)
    messages = float(row["sqs_messages_per_edge"] or 0.0)
    sqs = messages * sqs_requests_per_message(
        float(row["sqs_message_bytes_mean"] or 0.0), batches["process"], chunk
    )
    parent_transitions = float(row["transitions"]) / n
    child_transitions = float(row["child_transitions_each"])  # one child per edge here
    per_edge = {
        "stepfunctions_parent": parent_transitions
        * price(prices, "stepfunctions_standard_per_transition"),
        "lambda_requests": sum(invocations.values()) * price(prices, "lambda_per_request"),
        "lambda_duration": duration_ms / 1000 * gb * price(prices, "lambda_arm64_per_gb_second"),
        "dynamodb_writes": write_units * price(prices, "dynamodb_on_demand_per_write_unit"),
        "dynamodb_reads": read_units * price(prices, "dynamodb_on_demand_per_read_unit"),
        "sqs": sqs * price(prices, "sqs_standard_per_request"),
        "dynamodb_streams": 0.0,  # GetRecords by a Lambda trigger is free
        "eventbridge": 0.0,  # AWS service events on the default bus are free
    }
    total = sum(per_edge.values())
    child = child_transitions * price(prices, "stepfunctions_standard_per_transition")
    per_million = {key: round(value * MILLION, 4) for key, value in per_edge.items()}
    lambda_worst = sum(invocations_worst.values()) * price(prices, "lambda_per_request")
    return {
        "pattern": row["pattern"],
        "n": n,
        "per_million_edges_usd": {
            **per_million,
            "total_waiting": round(total * MILLION, 2),
            "child_workflow": round(child * MILLION, 2),
            "total_with_child": round((total + child) * MILLION, 2),
            "total_waiting_if_every_lambda_batch_had_one_event": round(
                (total - per_edge["lambda_requests"] + lambda_worst) * MILLION, 2
            ),
        },
        "inputs_per_edge": {
            "parent_transitions": round(parent_transitions, 4),
            "child_transitions": child_transitions,
            "lambda_invocations": {k: round(v, 4) for k, v in sorted(invocations.items())},
            "lambda_ms_estimate": round(duration_ms, 2),
            "dynamodb_write_units": round(write_units, 3),
            "dynamodb_read_units": round(read_units, 3),
            "sqs_requests": round(sqs, 4),
        },
    }


def waiting_costs(
    prices: dict[str, Any], transitions_per_round: int, read_units_per_round: float = 0.5
) -> list[dict[str, Any]]:
    """What one parent pays while it waits, by design, wait and poll interval."""
    transition = price(prices, "stepfunctions_standard_per_transition")
    read = price(prices, "dynamodb_on_demand_per_read_unit")
    rows = []
    for label, seconds in WAITS.items():
        row: dict[str, Any] = {"wait": label, "seconds": seconds, "callback_usd": 0.0}
        for interval in POLL_INTERVALS:
            rounds = seconds / interval
            row[f"poll_{interval}s_transitions"] = round(rounds * transitions_per_round, 1)
            row[f"poll_{interval}s_usd"] = round(
                rounds * (transitions_per_round * transition + read_units_per_round * read), 6
            )
        rows.append(row)
    return rows


def ten_minute_wait(
    summary: list[dict[str, Any]], transitions_per_round: int, interval: int
) -> list[dict[str, Any]]:
    """Transitions of a parent whose dependencies take 10 minutes, per design and n."""
    by_key = {(row["pattern"], row["n"]): row for row in summary}
    rounds = math.ceil(TEN_MINUTES / interval)
    rows = []
    for n in sorted({row["n"] for row in summary}):
        poll = by_key.get((POLL, n))
        if poll is None:
            continue
        base = poll["transitions_without_polling"]
        polling = base + transitions_per_round * rounds
        entry: dict[str, Any] = {"n": n, "poll_interval_s": interval, "poll": polling}
        for pattern in (MAP, JOIN):
            row = by_key.get((pattern, n))
            if row is not None:
                entry[pattern] = row["transitions"]
                entry[f"{pattern}_fewer_by"] = round(polling / row["transitions"], 2)
                # The longest poll interval at which the callback design is still 10x cheaper.
                needed = math.ceil((10 * row["transitions"] - base) / transitions_per_round)
                entry[f"{pattern}_10x_up_to_interval_s"] = (
                    None if needed <= 0 else round(TEN_MINUTES / needed, 1)
                )
        rows.append(entry)
    return rows


def minimum_per_edge(prices: dict[str, Any], n: int) -> dict[str, Any]:
    """The least any non-polling design must spend per edge (see docs/performance.md)."""
    transition = price(prices, "stepfunctions_standard_per_transition")
    write = price(prices, "dynamodb_on_demand_per_write_unit")
    read = price(prices, "dynamodb_on_demand_per_read_unit")
    # Register the edge durably (1 write), read the dependency's state after it
    # (1 consistent read: the ordering rule), mark it resolved (1 write); the
    # parent enters at least one state per token it waits on.
    storage = 2 * write + read
    return {
        "writes": 2,
        "reads": 1,
        "per_token_transitions": 1,
        "one_token_transitions_per_edge": round(1 / n, 4),
        "usd_per_million_edges": {
            "one_token_per_edge": round((storage + transition) * MILLION, 2),
            "one_token_per_parent": round((storage + transition / n) * MILLION, 2),
        },
    }


def model(patterns: dict[str, Any], prices: dict[str, Any] | None = None) -> dict[str, Any]:
    """The whole cost model from the patterns section's results."""
    prices = prices or load_prices()
    settings = template_settings(prices)
    summary = patterns["summary"]
    per_round = int(patterns["transitions_per_poll_round"])
    reference = int(patterns["scale"]["poll_seconds_reference"])
    sizes = sorted({row["n"] for row in summary})
    return {
        "region": prices["region"],
        "prices_checked_on": prices["checked_on"],
        "prices": {name: entry["usd"] for name, entry in prices["prices"].items()},
        "sources": sorted({entry["source"] for entry in prices["prices"].values()}),
        "template": settings,
        "per_million_edges": [edge_costs(row, prices, settings) for row in summary],
        "waiting": waiting_costs(prices, per_round),
        "ten_minute_wait_transitions": ten_minute_wait(summary, per_round, reference),
        "minimum": {str(n): minimum_per_edge(prices, n) for n in sizes},
    }
