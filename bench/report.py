"""Markdown tables of a results dict (what ``make bench`` prints)."""

from __future__ import annotations

from typing import Any

NAMES = {
    "map": "Map (token per dependency)",
    "join": "join (one token)",
    "poll": "polling baseline",
}


def _table(header: list[str], rows: list[list[Any]]) -> str:
    def cell(value: Any) -> str:
        if value is None:
            return "-"
        if isinstance(value, float):
            return f"{value:,.3f}".rstrip("0").rstrip(".") if abs(value) < 1000 else f"{value:,.0f}"
        return str(value)

    lines = ["| " + " | ".join(header) + " |"]
    lines.append("|" + "|".join("---:" if i else "---" for i in range(len(header))) + "|")
    lines.extend("| " + " | ".join(cell(value) for value in row) + " |" for row in rows)
    return "\n".join(lines)


def _calls(calls: dict[str, float]) -> float:
    return round(sum(calls.values()), 3)


def patterns(results: dict[str, Any]) -> str:
    """Per-parent figures of the three designs."""
    section = results["patterns"]
    rows = []
    for row in section["summary"]:
        latency = row["resume_latency_s"]
        per_edge = row["calls_per_edge"]
        rows.append(
            [
                NAMES[row["pattern"]],
                row["n"],
                row["samples"],
                int(row["history_events"]),
                int(row["transitions"]),
                row["transitions_per_edge"],
                latency["from_child_stop"]["p50"],
                latency["from_child_stop"]["p95"],
                latency["from_state_recorded"]["p50"],
                _calls(per_edge["tracker"]),
                _calls(per_edge["state_machine"]),
            ]
        )
    scale = section["scale"]
    note = (
        f"Time scale {scale['factor']:g}: the polling baseline waits "
        f"{scale['poll_seconds_local']} s locally for {scale['poll_seconds_reference']} s "
        f"in AWS; each child runs {scale['child_seconds_local']} s "
        f"({scale['child_seconds_reference']:g} s at scale)."
    )
    header = [
        "design",
        "n",
        "parents",
        "history events",
        "transitions",
        "per edge",
        "resume p50 (s)",
        "resume p95 (s)",
        "p50 from state recorded (s)",
        "tracker calls / edge",
        "state machine calls / edge",
    ]
    return _table(header, rows) + "\n\n" + note


def calls_per_edge(results: dict[str, Any], n: int) -> str:
    """AWS calls per edge by service and operation, for one n."""
    summary = [row for row in results["patterns"]["summary"] if row["n"] == n]
    names: set[tuple[str, str]] = set()
    for row in summary:
        for group in ("tracker", "state_machine", "plumbing_data"):
            names.update((group, name) for name in row["calls_per_edge"][group])
    header = ["caller", "call", *[NAMES[row["pattern"]] for row in summary]]
    rows = [
        [
            group.replace("_", " "),
            name,
            *[row["calls_per_edge"][group].get(name) for row in summary],
        ]
        for group, name in sorted(names)
    ]
    lambdas = sorted({name for row in summary for name in row["lambda_per_edge"]})
    rows.extend(
        [
            "Lambda (local batching)",
            f"{name} invocations",
            *[row["lambda_per_edge"].get(name, {}).get("invocations") for row in summary],
        ]
        for name in lambdas
    )
    return _table(header, rows)


def throughput(results: dict[str, Any]) -> str:
    """The pipeline's throughput at each scale against the engine bound."""
    section = results["throughput"]
    rows = []
    for scale in section["scales"]:
        if "error" in scale:
            rows.append([scale["label"], "-", "-", f"failed: {scale['error']}", *["-"] * 6])
            continue
        cpu = scale["cpu"]
        rows.append(
            [
                scale["label"],
                scale["edges"],
                scale["overlap"],
                scale["edges_per_s"],
                scale["span_s"],
                scale["peak_rss_mib"],
                cpu["cpu_per_wall"],
                scale["queue_depth_mean"],
                scale["parent_transitions_per_edge"],
                scale["pump_errors"],
            ]
        )
    header = [
        "scale",
        "edges",
        "overlap",
        "edges/s",
        "span (s)",
        "peak RSS (MiB)",
        "CPU/wall",
        "mean queue depth",
        "transitions / edge",
        "pump errors",
    ]
    bound = section.get("bound") or {}
    lines = [_table(header, rows)]
    if bound:
        lines.append(
            "\n"
            + _table(
                ["bound", "ms per edge", "edges/s", "achieved / bound"],
                [
                    [
                        "moto calls one edge needs",
                        bound["ms_per_edge"]["calls"],
                        bound["edges_per_s"]["calls"],
                        section["ratio"]["calls"],
                    ],
                    [
                        "… plus the interpreter's own work",
                        bound["ms_per_edge"]["engine"],
                        bound["edges_per_s"]["engine"],
                        section["ratio"]["engine"],
                    ],
                ],
            )
        )
    return "\n".join(lines)


def bound_breakdown(results: dict[str, Any], top: int = 12) -> str:
    """Where the engine bound's time per edge goes, with the same call under load."""
    section = results["throughput"]
    bound = section.get("bound")
    if not bound:
        return "(no bound)"
    per_call = results["calibration"]["per_call_ms"]
    largest = section["largest"]
    in_situ: dict[str, Any] = {}
    for group in ("tracker", "plumbing_data"):
        for name, stats in largest["calls"].get(group, {}).items():
            in_situ[name] = stats["in_situ_ms"]
    rows = []
    for name, ms in list(bound["ms_per_edge_by_call"].items())[:top]:
        rows.append([name, per_call.get(name), in_situ.get(name), ms])
    return _table(["call", "isolated ms/call", "in the run ms/call", "ms per edge"], rows)


def cpu(results: dict[str, Any]) -> str:
    """CPU by thread group in the largest throughput run."""
    largest = results["throughput"].get("largest")
    if not largest:
        return "(no throughput run)"
    profile = largest["cpu"]
    total = profile["process_cpu_s"] or 1.0
    rows = [
        [group, seconds, round(100 * seconds / total, 1)]
        for group, seconds in list(profile["by_thread_group_s"].items())[:8]
    ]
    rows.append(["unattributed (threads ended between samples)", profile["unattributed_s"], None])
    return _table(["thread group", "CPU s", "% of process CPU"], rows)


def idle_polling(results: dict[str, Any]) -> str:
    """The pumps' polling that carries no event, in the largest run."""
    largest = results["throughput"].get("largest")
    if not largest:
        return "(no throughput run)"
    rows = [
        [name, stats["count"], stats["in_situ_ms"], stats["total_s"]]
        for name, stats in sorted(largest["calls"].get("plumbing_idle", {}).items())
    ]
    return _table(["idle call", "count", "ms/call", "total s"], rows)


def handlers(results: dict[str, Any]) -> str:
    """Handler costs."""
    section = results["handlers"]
    rows = [
        [
            f"update-state, {row['waiters']} waiters",
            row["seconds"]["p50"],
            row["seconds"]["max"],
            row["dynamodb_calls_total"],
            ", ".join(f"{k} {v}" for k, v in row["dynamodb_calls"].items()),
        ]
        for row in section["update_state"]
    ]
    rows.extend(
        [
            f"resolve_all, {row['waiters']} waiters, {row['concurrency']} thread(s)",
            row["seconds"]["p50"],
            row["seconds"]["max"],
            None,
            "",
        ]
        for row in section["resolve_all"]
    )
    rows.extend(
        [
            f"process, batch of {row['batch']}, payloads {row['case']}",
            row["seconds"]["p50"],
            row["seconds"]["max"],
            row["dynamodb_calls_total"],
            ", ".join(
                f"{k} {v}" for k, v in {**row["dynamodb_calls"], **row["other_calls"]}.items()
            ),
        ]
        for row in section["process_batch"]
    )
    return _table(["invocation", "p50 s", "max s", "DynamoDB calls", "calls"], rows)


def costs(results: dict[str, Any]) -> str:
    """Dollars per million edges by design and n."""
    rows = []
    for row in results["costs"]["per_million_edges"]:
        usd = row["per_million_edges_usd"]
        rows.append(
            [
                NAMES[row["pattern"]],
                row["n"],
                usd["stepfunctions_parent"],
                usd["lambda_requests"] + usd["lambda_duration"],
                usd["dynamodb_writes"] + usd["dynamodb_reads"],
                usd["sqs"],
                usd["total_waiting"],
                usd["child_workflow"],
            ]
        )
    header = [
        "design",
        "n",
        "Step Functions (parent)",
        "Lambda",
        "DynamoDB",
        "SQS",
        "total",
        "child workflow (same for all)",
    ]
    return _table(header, rows)


def waiting(results: dict[str, Any]) -> str:
    """What one parent pays while it waits."""
    rows = []
    for row in results["costs"]["waiting"]:
        rows.append(
            [
                row["wait"],
                row["callback_usd"],
                *[
                    f"${row[f'poll_{i}s_usd']:.4f} ({row[f'poll_{i}s_transitions']:,.0f} tr.)"
                    for i in (10, 60, 300)
                ],
            ]
        )
    header = ["wait", "callback (Map or join)", "poll every 10 s", "every 60 s", "every 5 min"]
    return _table(header, rows)


def ten_minutes(results: dict[str, Any]) -> str:
    """Transitions of a parent that waits 10 minutes."""
    rows = [
        [
            row["n"],
            row["poll_interval_s"],
            row["poll"],
            row.get("map"),
            row.get("map_fewer_by"),
            _interval(row, "map"),
            row.get("join"),
            row.get("join_fewer_by"),
            _interval(row, "join"),
        ]
        for row in results["costs"]["ten_minute_wait_transitions"]
    ]
    header = [
        "n",
        "poll interval (s)",
        "polling",
        "Map",
        "Map: fewer by",
        "Map: 10x while polls <= (s)",
        "join",
        "join: fewer by",
        "join: 10x while polls <= (s)",
    ]
    return _table(header, rows)


def _interval(row: dict[str, Any], pattern: str) -> Any:
    if pattern not in row:
        return None
    value = row.get(f"{pattern}_10x_up_to_interval_s")
    return "any" if value is None else value


def joins(results: dict[str, Any]) -> str:
    """One all-of join per n: wall time against the bound, calls and units per member."""
    section = results["joins"]
    rows = []
    for row in section["sizes"]:
        if "error" in row:
            rows.append([row["n"], f"failed: {row['error']}", *["-"] * 10])
            continue
        per = row["per_member"]
        process = row["per_invocation"].get("process", {})
        bound = row.get("bound", {}).get("edges_per_s", {})
        rows.append(
            [
                row["n"],
                row["members_by"].split(" ")[0],
                row["wall_s"],
                row["members_per_s"],
                bound.get("calls"),
                row.get("ratio", {}).get("calls"),
                per["tracker_calls"],
                per["write_units"],
                per["read_units"],
                process.get("max_calls"),
                row["per_invocation"].get("decision", {}).get("calls"),
                row["peak_rss_mib"],
            ]
        )
    header = [
        "n",
        "members by",
        "wall (s)",
        "members/s",
        "bound (members/s)",
        "achieved / bound",
        "tracker calls / member",
        "write units / member",
        "read units / member",
        "most calls, one process invocation",
        "calls of the deciding invocation",
        "peak RSS (MiB)",
    ]
    return _table(header, rows)


def join_calls(results: dict[str, Any]) -> str:
    """Tracker calls per member by function and operation, at every n."""
    done = [row for row in results["joins"]["sizes"] if "error" not in row]
    names = sorted(
        {
            (f, name)
            for row in done
            for f, calls in row["calls_by_function"].items()
            for name in calls
        }
    )
    rows = [
        [
            function,
            name,
            *[
                round(row["calls_by_function"].get(function, {}).get(name, 0) / row["n"], 4)
                for row in done
            ],
        ]
        for function, name in names
    ]
    return _table(["function", "call", *[f"n = {row['n']:,}" for row in done]], rows)


def join_registration(results: dict[str, Any]) -> str:
    """Each join's registration on the embedded stack, and what the platform model saw."""
    rows = []
    for row in results["joins"]["sizes"]:
        registered = row.get("registration")
        if "error" in row or not registered:
            continue
        runs, platform = row["runs_per_member"], row["platform"]
        fan_out = registered["fan_out_calls"]
        rows.append(
            [
                row["n"],
                registered["seconds"],
                registered["members_per_s"],
                registered["process_invocations"],
                sum(fan_out.values()),
                fan_out.get("sqs.SendMessageBatch", 0),
                registered["chunk_calls_mean"],
                registered["chunk_calls_max"],
                f"{runs['min']}-{runs['max']} ({runs['other_executions']} other)",
                platform["stopped_by_loop_detection"] if platform["modelled"] else "model off",
                platform["join_peak_concurrency"],
            ]
        )
    header = [
        "n",
        "registration (s)",
        "members/s",
        "process invocations",
        "join message's calls",
        "its SendMessageBatch",
        "calls per chunk invocation (mean)",
        "(max)",
        "runs per member",
        "stopped by loop detection",
        "chunks at once (peak)",
    ]
    return _table(header, rows)


def registration_on_aws(results: dict[str, Any]) -> str:
    """The modelled registration time of a large join on AWS, per JoinMaxConcurrency."""
    model = results["joins"].get("model", {}).get("registration_on_aws") or {}
    if not model:
        return "(no chunk invocations measured)"
    rows = []
    for row in model["rows"]:
        large, other = row["large_regions"], row["other_regions"]
        rows.append(
            [
                row["join_max_concurrency"],
                row["case"],
                row["members_per_s"],
                round(large["seconds"] / 60, 1),
                "throttled" if large["throttled"] else ("yes" if large["meets_goal"] else "no"),
                round(other["seconds"] / 60, 1),
                "throttled" if other["throttled"] else ("yes" if other["meets_goal"] else "no"),
            ]
        )
    header = [
        "JoinMaxConcurrency",
        "latencies",
        "members/s started",
        "minutes (1,300 / 300 a s)",
        "<= goal",
        "minutes (800 / 150 a s)",
        "<= goal",
    ]
    cases = "; ".join(
        f"{case}: {c['chunk_s']} s a chunk, {c['members_per_s_per_invocation']} members/s an "
        f"invocation, fan-out {c['fan_out_s']} s, goal met with JoinMaxConcurrency "
        f"{c['large_regions']['least_meeting_goal']} to {c['large_regions']['most_unthrottled']}"
        for case, c in model["cases"].items()
    )
    return (
        _table(header, rows) + f"\n\nn = {model['n']:,} in {model['chunks']:,} chunks, "
        f"{model['chunk_calls_total']} calls a chunk (counted at n = {model['counted_at_n']:,}), "
        f"{model['send_message_batch_calls']} SendMessageBatch calls; goal "
        f"{model['goal_s'] / 60:g} minutes. {cases}."
    )


def join_model(results: dict[str, Any]) -> str:
    """Derived counts at large n, and the hot-partition ceiling."""
    model = results["joins"]["model"]
    derived = model["derived"]
    sizes = sorted(derived["totals"]["tracker_calls"], key=int)
    rows = [[key, *[derived["totals"][key][n] for n in sizes]] for key in sorted(derived["totals"])]
    rows.extend(
        [f"most calls, one {function} invocation", *[by_n[n] for n in sizes]]
        for function, by_n in sorted(derived["max_calls_per_invocation"].items())
    )
    rows.append(
        [
            "calls of the join message's invocation",
            *[derived.get("join_message_invocation_calls", {}).get(n) for n in sizes],
        ]
    )
    rows.append(
        [
            "calls of the deciding invocation",
            *[derived["decision_invocation_calls"][n] for n in sizes],
        ]
    )
    lines = [
        _table(["per join (derived)", *[f"n = {int(n):,}" for n in sizes]], rows),
        f"\n{derived['method']} (n = {', '.join(str(n) for n in derived['from_n'])}).",
    ]
    hot = model["hot_partitions"]
    rows = [
        [
            row["partition"],
            row["write_units_per_member"],
            row["read_units_per_member"],
            row["members_per_s_by_writes"],
            row["members_per_s_by_reads"],
        ]
        for row in hot["partitions"]
    ]
    lines.append(
        "\n"
        + _table(
            [
                f"partition (n = {hot['n']:,})",
                "write units / member",
                "read units / member",
                "members/s (1,000 WCU/s)",
                "members/s (3,000 RCU/s)",
            ],
            rows,
        )
    )
    lines.append(
        f"\nPer-join ceiling on AWS: {hot['members_per_s_per_join']} members/s "
        f"({hot['hottest']}; hottest of this run: {hot['hottest_in_run']}, "
        f"{hot['members_per_s_hottest_in_run']}/s). StartExecution refills at "
        f"{hot['start_execution_per_s']}/s (bucket {hot['start_execution_bucket']:,})."
    )
    return "\n".join(lines)


def join_costs(results: dict[str, Any]) -> str:
    """Dollars per million edges of the join, measured and derived n."""
    rows = []
    for row in results["joins"].get("costs", []):
        usd = row["per_million_edges_usd"]
        rows.append(
            [
                f"{row['n']:,}" + (" (derived)" if row.get("derived") else ""),
                usd["stepfunctions_parent"],
                usd["lambda_requests"] + usd["lambda_duration"],
                usd["dynamodb_writes"],
                usd["dynamodb_reads"],
                usd["sqs"],
                usd["total_waiting"],
            ]
        )
    header = ["n", "Step Functions (parent)", "Lambda", "DynamoDB writes", "reads", "SQS", "total"]
    return _table(header, rows)


def targets(results: dict[str, Any]) -> str:
    """The issue's targets, met or not."""
    rows = [
        [row["target"], row["measured"], "met" if row["met"] else "NOT met"]
        for row in results["targets"]
    ]
    return _table(["target", "measured", "verdict"], rows)


def render(results: dict[str, Any]) -> str:
    """Every table of the sections that ran, in order."""
    meta = results["meta"]
    parts = [
        f"# Benchmark ({meta['config']['name']}), {meta['generated_at']}",
        f"{meta['cpu_count']} CPUs, Python {meta['python']}, "
        + ", ".join(f"{k} {v}" for k, v in meta["versions"].items())
        + f"; {meta['duration_s']:.0f} s",
    ]
    merged = meta.get("merged") or {}
    if merged:
        parts.append(
            "Sections run again later (--merge): "
            + ", ".join(f"{name} ({later['generated_at']})" for name, later in merged.items())
        )
    if "patterns" in results:
        largest_n = max(
            row["n"] for row in results["patterns"]["summary"] if row["pattern"] == "map"
        )
        parts += [
            "## Waiting on n dependencies, per parent",
            patterns(results),
            f"## Calls per edge at n = {largest_n}",
            calls_per_edge(results, largest_n),
        ]
    if "handlers" in results:
        parts += ["## Handler costs", handlers(results)]
    if "costs" in results:
        parts += [
            (
                f"## Cost per million edges (USD, {results['costs']['region']}, "
                f"prices checked {results['costs']['prices_checked_on']})"
            ),
            costs(results),
            "## Cost of waiting, one parent",
            waiting(results),
            "## Transitions over a 10-minute wait",
            ten_minutes(results),
        ]
    if "joins" in results and any("error" not in r for r in results["joins"]["sizes"]):
        parts += [
            "## Joins at scale",
            joins(results),
            "### Tracker calls per member",
            join_calls(results),
            "### Registration (embedded stack, platform model on)",
            join_registration(results),
        ]
        if "model" in results["joins"]:
            parts += [
                "### Registration time on AWS (model)",
                registration_on_aws(results),
                "### Derived per join, and the hot partition",
                join_model(results),
                "### Join cost per million edges (USD)",
                join_costs(results),
            ]
    parts += ["## Targets", targets(results)]
    return "\n\n".join(parts) + "\n"


def join_bounds(results: dict[str, Any]) -> str:
    """Each timed join's wall time against the engine bound."""
    rows = []
    for row in results["joins"]["sizes"]:
        if "error" in row:
            rows.append([row["n"], f"failed: {row['error']}", *["-"] * 5])
            continue
        bound = row.get("bound", {}).get("edges_per_s", {})
        rows.append(
            [
                row["n"],
                row["wall_s"],
                row["members_per_s"],
                bound.get("calls"),
                row.get("ratio", {}).get("calls"),
                row.get("ratio_cpu", {}).get("calls"),
                row.get("cpu", {}).get("cpu_per_wall"),
            ]
        )
    header = [
        "n",
        "wall (s)",
        "members/s",
        "bound (members/s)",
        "achieved / bound",
        "by CPU / bound",
        "CPU/wall",
    ]
    return _table(header, rows)


def render_timing(results: dict[str, Any]) -> str:
    """The tables of ``python -m bench.timing``: this machine's wall-clock figures."""
    meta = results["meta"]
    parts = [
        f"# Timing ({meta['config']['name']}), {meta['generated_at']}",
        f"{meta['cpu_count']} CPUs, Python {meta['python']}; {meta['duration_s']:.0f} s",
    ]
    if results["throughput"].get("largest"):
        parts += [
            "## Throughput of the local pipeline",
            throughput(results),
            "### Engine bound by call (largest scale)",
            bound_breakdown(results),
            "### CPU by thread (largest scale)",
            cpu(results),
            "### Idle polling by the pumps (largest scale)",
            idle_polling(results),
        ]
    if results["joins"].get("sizes"):
        parts += ["## Joins against the engine bound", join_bounds(results)]
    parts += ["## Targets", targets(results)]
    return "\n\n".join(parts) + "\n"
