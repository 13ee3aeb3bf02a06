"""``python -m bench``: run every section, print the tables, write the results.

Sections run one after the other, each in a fresh process by default (its own
peak memory, no threads left over from the previous one): the three waiting
designs, the handler costs, then one join per size (``bench/joins.py``). The
cost model and the targets are computed from their results. Everything goes
to ``build/bench/results.json`` (git-ignored); the counts per member and the
cost model, the figures that carry over to AWS, also to the small
``--summary`` file (``make bench``: the committed ``bench/summary.json``,
:mod:`bench.summary`). ``--merge`` reruns some sections into an existing
results file. The wall-clock calibration, the engine bound and the CPU
profile are the optional ``python -m bench.timing``'s.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import multiprocessing
import os
import platform
import resource
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench import costs, handlers, joins, patterns, report
from bench import summary as summary_
from bench.config import FULL, JOIN, MAP, POLL, SMOKE, BenchConfig, TimingConfig
from dependency_tracker.core.limits import SQS_MAX_BATCH_ENTRIES

if TYPE_CHECKING:
    from collections.abc import Callable

DEFAULT_OUTPUT = Path(__file__).resolve().parent.parent / "build" / "bench" / "results.json"
PACKAGES = ("moto", "boto3", "botocore", "aws-lambda-powertools", "pydantic")
SECTIONS = ("patterns", "handlers", "joins")
TARGET_JOIN_N = 100
# The join's targets: write units per edge at these n (measured or derived), equal within 5 %.
JOIN_UNIT_SIZES = (100, 1000, 10_000)
JOIN_FLAT_TOLERANCE = 1.05
# A chunk's process invocation: 4 calls per member (membership row, claim, start, start
# record) and at most 10 for the chunk itself (bench/joins.py; 8 measured). The join
# message's invocation adds one read of the list and one SendMessageBatch per 10 chunks.
JOIN_CALLS_PER_MEMBER = 4
JOIN_CALLS_PER_CHUNK = 10


def emit(message: str) -> None:
    """Progress on stderr (the tables go to stdout)."""
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


def _in_section(function: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
    """Run one section and add this process's peak memory to its result."""
    started = time.perf_counter()
    result = function(*args, log=emit)
    result["section_s"] = round(time.perf_counter() - started, 1)
    result["process_peak_rss_mib"] = round(
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1
    )
    return result


def section(
    config: BenchConfig | TimingConfig,
    name: str,
    function: Callable[..., dict[str, Any]],
    *args: Any,
) -> dict[str, Any]:
    """One section, in a fresh (spawned) process when ``config.isolate``."""
    emit(f"[{name}]")
    if not config.isolate:
        return _in_section(function, *args)
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        return pool.submit(_in_section, function, *args).result()


def _token_chars() -> int:
    return int(costs.assumption(costs.load_prices(), "aws_task_token_chars"))


def collect(config: BenchConfig, only: set[str] | None = None) -> dict[str, Any]:
    """Every section's results, the cost model and the targets."""
    started = time.perf_counter()
    wanted = only or set(SECTIONS)
    results: dict[str, Any] = {"meta": meta(config)}
    if "patterns" in wanted:
        results["patterns"] = section(
            config, "patterns", patterns.run, config.patterns, _token_chars()
        )
    if "handlers" in wanted:
        results["handlers"] = section(config, "handlers", handlers.run, config.handlers)
    if "patterns" in results:
        results["costs"] = costs.model(results["patterns"])
    if "joins" in wanted:
        results["joins"] = run_joins(config, _map_write_units(results))
    results["targets"] = evaluate(results)
    results["meta"]["duration_s"] = round(time.perf_counter() - started, 1)
    return results


def _map_write_units(results: dict[str, Any]) -> float | None:
    """The Map pattern's write units per edge at its largest n, when the patterns ran."""
    rows = [r for r in results.get("patterns", {}).get("summary", []) if r["pattern"] == MAP]
    if not rows:
        return None
    row = max(rows, key=lambda r: r["n"])
    capacity: dict[str, float] = row["capacity_per_edge"]
    return round(sum(v for k, v in capacity.items() if k.startswith("write_units")), 4)


def run_joins(config: BenchConfig, map_write_units: float | None) -> dict[str, Any]:
    """Each join size (a failed size is recorded, not fatal), the model, costs."""
    settings = config.joins
    token_chars = _token_chars()
    sizes: list[dict[str, Any]] = []
    for n in settings.sizes:
        try:
            result = section(config, f"join n={n}", joins.run_size, n, settings, token_chars)
        except Exception as exc:  # noqa: BLE001  (the largest n the engine manages is a result)
            emit(f"  join n={n} failed: {exc!r}")
            sizes.append({"n": n, "error": repr(exc)})
            continue
        sizes.append(result)
    return finish_joins(config, sizes, map_write_units)


def finish_joins(
    config: BenchConfig, sizes: list[dict[str, Any]], map_write_units: float | None
) -> dict[str, Any]:
    """The joins section from its runs: the model and the costs."""
    settings = config.joins
    sizes = sorted(sizes, key=lambda result: result["n"])
    done = [result for result in sizes if "error" not in result]
    out: dict[str, Any] = {"config": dataclasses.asdict(settings), "sizes": sizes}
    if not done:
        return out
    out["model"] = joins.model(
        done, settings.derived_sizes, map_write_units_per_edge=map_write_units
    )
    prices = costs.load_prices()
    largest = max(done, key=lambda result: result["n"])
    out["model"]["registration_on_aws"] = joins.registration_on_aws(
        largest, costs.assumption(prices, "aws_registration")
    )
    template = costs.template_settings(prices)
    measured = [joins.cost_row(result) for result in done]
    derived = joins.derived_cost_rows(done, settings.derived_sizes)
    out["costs"] = [
        {**costs.edge_costs(row, prices, template), "derived": bool(row.get("derived"))}
        for row in measured + derived
    ]
    return out


def meta(config: BenchConfig) -> dict[str, Any]:
    """Where and with what the benchmark ran."""
    versions: dict[str, str | None] = {}
    for package in PACKAGES:
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    return {
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "versions": versions,
        "config": config.as_dict(),
        "peak_memory_source": "resource.getrusage(RUSAGE_SELF).ru_maxrss, per section process",
    }


def evaluate(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's targets, reported (never asserted)."""
    targets: list[dict[str, Any]] = []
    summary = {
        (row["pattern"], row["n"]): row for row in results.get("patterns", {}).get("summary", [])
    }
    common = sorted(n for (pattern, n) in summary if pattern == MAP and (JOIN, n) in summary)
    n = TARGET_JOIN_N if TARGET_JOIN_N in common else (common[-1] if common else None)
    if n is not None:
        join, map_ = summary[(JOIN, n)], summary[(MAP, n)]
        ratio = map_["transitions"] / join["transitions"]
        targets.append(
            {
                "name": "join_transitions",
                "target": f"join uses >= 10x fewer transitions than Map at n = {TARGET_JOIN_N}",
                "measured": f"{ratio:.1f}x at n = {n} "
                f"({map_['transitions']:g} vs {join['transitions']:g})",
                "value": round(ratio, 2),
                "met": ratio >= 10,
            }
        )
    if "costs" in results:
        targets.extend(_callback_targets(summary, results["costs"]["ten_minute_wait_transitions"]))
    targets.extend(_join_targets(results.get("joins", {})))
    rows = results.get("handlers", {}).get("update_state", [])
    largest = max(rows, key=lambda row: row["waiters"], default=None)
    if largest is not None:
        seconds = largest["seconds"]["p50"]
        targets.append(
            {
                "name": "update_state_waiters",
                "target": "update-state resolves 1,000 waiters in < 5 s locally",
                "measured": f"{seconds:.2f} s for {largest['waiters']} waiters",
                "value": seconds,
                "met": largest["waiters"] >= 1000 and seconds < 5,
            }
        )
    return targets


def _join_targets(section: dict[str, Any]) -> list[dict[str, Any]]:
    """The join's targets: constant units per edge, bounded invocations, linear wall time."""
    done = [row for row in section.get("sizes", []) if "error" not in row]
    if not done or "model" not in section:
        return []
    model = section["model"]
    derived = model["derived"]["per_member"]["write_units"]
    units = {row["n"]: row["per_member"]["write_units"] for row in done}
    units.update({int(n): value for n, value in derived.items() if int(n) not in units})
    wanted = [n for n in JOIN_UNIT_SIZES if n in units] or sorted(units)
    values = [units[n] for n in wanted]
    flat = max(values) <= JOIN_FLAT_TOLERANCE * min(values)
    map_units = model.get("map_write_units_per_edge")
    below_map = map_units is not None and max(values) <= map_units
    measured = ", ".join(
        f"{units[n]:.2f} at n = {n:,}" + ("" if n in {r["n"] for r in done} else " (derived)")
        for n in wanted
    )
    targets = [
        {
            "name": "join_write_units",
            "target": "join: DynamoDB write units per edge constant in n (n = 100, 1,000, "
            "10,000) and no more than the Map pattern's",
            "measured": f"{measured}; Map "
            + (f"{map_units:.2f}" if map_units is not None else "not measured in this run"),
            "value": max(values),
            "met": flat and below_map,
        }
    ]
    chunk = max(row["chunk_size"] for row in done)
    full = [row for row in done if row["n"] > chunk] or done
    bound = JOIN_CALLS_PER_MEMBER * chunk + JOIN_CALLS_PER_CHUNK
    peaks, fan_outs, met = [], [], True
    for row in full:
        registered = row.get("registration") or {}
        peak = registered.get("chunk_calls_max") or row["per_invocation"]["process"]["max_calls"]
        fan_out = sum(registered.get("fan_out_calls", {}).values())
        # The join message's invocation registers chunk 0 too, and streams the list once.
        fan_out_bound = bound + 1 + math.ceil((row["chunks"] - 1) / SQS_MAX_BATCH_ENTRIES)
        peaks.append(peak)
        fan_outs.append(f"{fan_out} of at most {fan_out_bound} at n = {row['n']:,}")
        met = met and peak <= bound and fan_out <= fan_out_bound
    targets.append(
        {
            "name": "join_calls_per_invocation",
            "target": "join: AWS calls per chunk invocation bounded by the chunk size, whatever "
            "n (the join message's: one chunk, one read of the list, a send per 10 chunks)",
            "measured": ", ".join(
                f"{peak} at n = {row['n']:,}" for row, peak in zip(full, peaks, strict=True)
            )
            + f" (chunks of {chunk}: at most {bound}); join message: "
            + ", ".join(fan_outs),
            "value": max(peaks),
            "met": met,
        }
    )
    targets.append(_join_platform_target(done))
    return targets


def _join_platform_target(done: list[dict[str, Any]]) -> dict[str, Any]:
    """Every member run once, nothing stopped by Lambda's loop detection (platform model on)."""

    def held(row: dict[str, Any]) -> bool:
        runs, platform = row.get("runs_per_member", {}), row.get("platform", {})
        return (
            bool(platform.get("modelled"))
            and platform.get("stopped_by_loop_detection") == 0
            and runs.get("not_once") == 0
            and runs.get("other_executions") == 0
        )

    def measured(row: dict[str, Any]) -> str:
        runs, platform = row.get("runs_per_member", {}), row.get("platform", {})
        return (
            f"n = {row['n']:,}: runs per member {runs.get('min')} to {runs.get('max')}, "
            f"{platform.get('stopped_by_loop_detection')} stopped"
            + ("" if platform.get("modelled") else " (platform model OFF)")
        )

    return {
        "name": "join_platform",
        "target": "join: with the platform model on, every member runs exactly once and "
        "recursive-loop detection stops nothing, at every n",
        "measured": "; ".join(measured(row) for row in done),
        "value": sum(not held(row) for row in done),
        "met": all(held(row) for row in done),
    }


def _callback_targets(
    summary: dict[tuple[str, int], dict[str, Any]], ten_minutes: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    fewer = {row["n"]: row for row in ten_minutes}
    out = []
    for pattern in (MAP, JOIN):
        details, met = [], True
        for n in sorted(fewer):
            row, poll = summary.get((pattern, n)), summary.get((POLL, n))
            if row is None or poll is None:
                continue
            ours = row["resume_latency_s"]["from_child_stop"]
            theirs = poll["resume_latency_s"]["from_child_stop"]
            fast = ours["p50"] <= theirs["p50"] and ours["p95"] <= theirs["p95"]
            ratio = fewer[n][f"{pattern}_fewer_by"]
            met = met and fast and ratio >= 10
            details.append(
                f"n={n}: p50 {ours['p50']:.2f} vs {theirs['p50']:.2f} s, "
                f"p95 {ours['p95']:.2f} vs {theirs['p95']:.2f} s, {ratio:.1f}x fewer"
            )
        out.append(
            {
                "name": f"{pattern}_vs_polling",
                "target": f"{pattern}: resumes at least as fast as polling (p50 and p95) with "
                ">= 10x fewer transitions over a 10-minute wait",
                "measured": "; ".join(details),
                "met": met,
            }
        )
    return out


def sizes(text: str) -> tuple[int, ...]:
    """A comma-separated list of sizes (``--join-sizes``); empty parts are skipped."""
    return tuple(int(part) for part in text.split(",") if part.strip())


def merge(previous: dict[str, Any], fresh: dict[str, Any]) -> dict[str, Any]:
    """``previous`` with ``fresh``'s sections in place of its own; the model and targets redone.

    ``meta`` stays ``previous``'s; ``meta.merged`` says which sections came from
    which later run.
    """
    merged = dict(previous)
    sections = [key for key in fresh if key not in ("meta", "costs", "targets")]
    for key in sections:
        merged[key] = fresh[key]
    if "patterns" in merged:
        merged["costs"] = costs.model(merged["patterns"])
    if "joins" in fresh and "model" in merged["joins"]:
        merged["joins"]["model"]["map_write_units_per_edge"] = _map_write_units(merged)
    merged["targets"] = evaluate(merged)
    meta_ = dict(previous.get("meta", {}))
    later = dict(meta_.get("merged", {}))
    for key in sections:
        later[key] = {
            name: fresh["meta"][name]
            for name in ("generated_at", "duration_s", "cpu_count", "versions", "config")
        }
    meta_["merged"] = later
    merged["meta"] = meta_
    return merged


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m bench``."""
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one process (CI)")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="results.json path")
    parser.add_argument(
        "--summary",
        type=Path,
        help="also write the counts per member and the cost model here (make bench: "
        "bench/summary.json)",
    )
    parser.add_argument(
        "--only", action="append", choices=SECTIONS, help="run only this section (repeatable)"
    )
    parser.add_argument("--no-isolate", action="store_true", help="run sections in this process")
    parser.add_argument(
        "--merge",
        action="store_true",
        help="keep the other sections of an existing --output (with --only): the sections "
        "run replace theirs, the cost model and targets are recomputed",
    )
    parser.add_argument(
        "--join-sizes",
        type=sizes,
        help="members of the joins at scale, comma-separated (default: "
        + ",".join(str(n) for n in FULL.joins.sizes)
        + ")",
    )
    args = parser.parse_args(argv)
    config = SMOKE if args.smoke else FULL
    if args.no_isolate:
        config = dataclasses.replace(config, isolate=False)
    if args.join_sizes:
        config = dataclasses.replace(
            config, joins=dataclasses.replace(config.joins, sizes=args.join_sizes)
        )
    results = collect(config, set(args.only) if args.only else None)
    if args.merge and args.output.is_file():
        results = merge(json.loads(args.output.read_text(encoding="utf-8")), results)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=2, default=str) + "\n", encoding="utf-8")
    sys.stdout.write(report.render(results))
    emit(f"results written to {args.output}")
    if args.summary is not None:
        summary_.write(summary_.summarize(results), args.summary)
        emit(f"summary written to {args.summary}")
    return 0
