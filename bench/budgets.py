"""Call and unit budgets: the counts that carry over to AWS, held to ``bench/budgets.json``.

Four small workloads run on the embedded stack with the bench's own counting
(:mod:`bench.counting`): a single wait and a Map parent of three dependencies
(``wait-for-dependencies``), an all-of join of 12 members and a 9-of-12 quorum
join (``wait-for-join``, by manifest, chunks of 5). Each count is divided by
the waiters or members (state transitions and history events are per parent)
and compared with its budget: a count above it means a change added calls or
units, one below it that the budget is stale (lower it, so it stays tight).
``vary`` gives the few counts that differ from run to run (how the local pumps
happen to batch stream records and SQS messages) their tolerance.

``python -m bench.budgets`` runs the workloads and prints each count beside its
budget (``--json``: the measured counts, in the budget file's shape);
``tests/bench/test_budgets.py`` runs the same in the test suite.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench import costs, joins, patterns
from bench.config import BUDGET_JOIN, BUDGET_PATTERNS, BUDGET_QUORUM

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

BUDGETS_FILE = Path(__file__).resolve().parent / "budgets.json"
WORKLOADS = ("wait", "map", "join", "quorum")
# Counts are rounded to 4 places (per member); equal within this is equal.
EPSILON = 1e-3
# What each group of counts is, in a failure message.
GROUPS = {
    "calls": "AWS calls by the tracker",
    "state_machine_calls": "state machine service integrations",
    "write_units": "DynamoDB write units",
    "read_units": "DynamoDB read units",
    "per_parent": "per parent",
}
SERVICES = {
    "dynamodb": "DynamoDB",
    "stepfunctions": "Step Functions",
    "sqs": "SQS",
    "s3": "S3",
}

# group -> name -> count per waiter or member (per parent for "per_parent")
Counts = dict[str, dict[str, float]]


def _log_nothing(_: str) -> None:
    return None


def measure(
    names: tuple[str, ...] = WORKLOADS, *, log: Callable[[str], None] = _log_nothing
) -> dict[str, Counts]:
    """Run the workloads ``names`` once; their counts per waiter or member, by name."""
    token_chars = int(costs.assumption(costs.load_prices(), "aws_task_token_chars"))
    out: dict[str, Counts] = {}
    single, few = BUDGET_PATTERNS.sizes
    sizes = {"wait": single, "map": few}
    wanted = tuple(n for name, n in sizes.items() if name in names)
    if wanted:
        waits = dataclasses.replace(
            BUDGET_PATTERNS, sizes=wanted, reps=tuple((n, 1) for n in wanted)
        )
        rows = {row["n"]: row for row in patterns.run(waits, token_chars, log=log)["summary"]}
        out.update({name: pattern_counts(rows[n]) for name, n in sizes.items() if n in wanted})
    for name, join in (("join", BUDGET_JOIN), ("quorum", BUDGET_QUORUM)):
        if name in names:
            (members,) = join.sizes
            out[name] = join_counts(joins.run_size(members, join, token_chars, log=log))
    return out


def pattern_counts(row: dict[str, Any]) -> Counts:
    """A ``patterns`` summary row's counts, per edge (one waiter per edge)."""
    units: dict[str, dict[str, float]] = {"write_units": {}, "read_units": {}}
    for key, value in row["capacity_per_edge"].items():
        if key == "state_machine_read_units":
            units["read_units"]["state machine"] = value
            continue
        kind, _, table = key.rpartition("_")
        units[kind][table] = value
    return {
        "calls": dict(row["calls_per_edge"]["tracker"]),
        "state_machine_calls": dict(row["calls_per_edge"]["state_machine"]),
        **units,
        "per_parent": {
            "transitions": row["transitions"],
            "history_events": row["history_events"],
        },
    }


def join_counts(result: dict[str, Any]) -> Counts:
    """A join run's counts, per member."""
    per = result["per_member"]
    return {
        "calls": dict(per["tracker"]),
        "state_machine_calls": dict(per["state_machine"]),
        "write_units": dict(per["write_units_by_table"]),
        "read_units": dict(per["read_units_by_table"]),
        "per_parent": {
            "transitions": float(result["transitions"]),
            "history_events": float(result["history_events"]),
        },
    }


def load(path: Path = BUDGETS_FILE) -> dict[str, Any]:
    """The budget file."""
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def _label(group: str, name: str) -> str:
    if group == "calls":
        service, _, operation = name.partition(".")
        operation, _, table = operation.partition("@")
        where = f" ({table} table)" if table else ""
        return f"{SERVICES.get(service, service)} {operation}{where}"
    if group == "state_machine_calls":
        return f"state machine {name}"
    if group in ("write_units", "read_units"):
        return f"{GROUPS[group]} ({name})"
    return name.replace("_", " ")


def check(name: str, measured: Counts, workload: Mapping[str, Any]) -> list[str]:
    """Every count of ``measured`` off its budget in ``workload``, as a sentence.

    A count the budget does not name has a budget of 0 (a new call); a budget
    the run did not reach is reported too (a stale budget hides a regression).
    """
    budgets: Mapping[str, Mapping[str, float]] = workload["budgets"]
    vary: Mapping[str, Mapping[str, float]] = workload.get("vary", {})
    per = workload["per"]
    failures: list[str] = []
    for group in sorted(set(budgets) | set(measured)):
        values = measured.get(group, {})
        limits = budgets.get(group, {})
        for key in sorted(set(values) | set(limits)):
            value = float(values.get(key, 0.0))
            limit = float(limits.get(key, 0.0))
            allowance = float(vary.get(group, {}).get(key, 0.0)) + EPSILON
            unit = "" if group == "per_parent" else f" per {per}"
            label = _label(group, key) + (" per parent" if group == "per_parent" else "")
            spread = f" (± {allowance - EPSILON:g} run to run)" if allowance > EPSILON else ""
            if value > limit + allowance:
                failures.append(
                    f"{name}: {label}{unit} {value:g} > budget {limit:g}{spread}: a change "
                    f"added {GROUPS[group] if group != 'per_parent' else 'state machine work'} "
                    "(if intended, raise it in bench/budgets.json)"
                )
            elif value < limit - allowance:
                failures.append(
                    f"{name}: {label}{unit} {value:g} < budget {limit:g}{spread}: fewer than "
                    "budgeted; lower the budget in bench/budgets.json so it stays tight"
                )
    return failures


def _stderr(line: str) -> None:
    sys.stderr.write(line + "\n")


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.budgets``: measure, print each count against its budget."""
    parser = argparse.ArgumentParser(prog="python -m bench.budgets", description=__doc__)
    parser.add_argument("--json", action="store_true", help="print the measured counts only")
    args = parser.parse_args(argv)
    measured = measure(log=_stderr)
    if args.json:
        sys.stdout.write(json.dumps(measured, indent=2, sort_keys=True) + "\n")
        return 0
    workloads = load()["workloads"]
    failures: list[str] = []
    for name, counts in measured.items():
        failures += check(name, counts, workloads[name])
    sys.stdout.write("\n".join(failures or ["every count within its budget"]) + "\n")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
