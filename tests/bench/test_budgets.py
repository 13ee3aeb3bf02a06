"""The counts that carry over to AWS stay within ``bench/budgets.json``.

Four small workloads (a single wait, a Map parent of 3, an all-of join of 12, a
9-of-12 quorum join) run once on the embedded stack with the bench's counting
(:mod:`bench.budgets`); every count per waiter or member (tracker calls by
service, operation and table, state machine integrations, DynamoDB units) and
per parent (state transitions, history events) must equal its budget, within
the tolerance its ``vary`` entry gives the counts that change run to run.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

import pytest

from bench import budgets
from dependency_tracker.payloads.state_table import StateTable

if TYPE_CHECKING:
    from bench.budgets import Counts

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def measured() -> dict[str, Counts]:
    return budgets.measure()


@pytest.fixture(scope="module")
def workloads() -> dict[str, Any]:
    data: dict[str, Any] = budgets.load()["workloads"]
    return data


def test_every_workload_has_a_budget(workloads):
    assert set(workloads) == set(budgets.WORKLOADS)
    for workload in workloads.values():
        assert workload["per"] in ("waiter", "member")
        assert workload["budgets"]["calls"]
        assert workload["budgets"]["per_parent"]["transitions"] > 0


@pytest.mark.parametrize("name", budgets.WORKLOADS)
def test_counts_stay_within_their_budget(measured, workloads, name):
    failures = budgets.check(name, measured[name], workloads[name])
    assert not failures, "\n".join(failures)


def test_one_more_call_per_member_fails_with_a_sentence(workloads):
    join = workloads["join"]
    counts = copy.deepcopy(join["budgets"])
    counts["calls"]["dynamodb.UpdateItem@dependency"] += 1
    counts["calls"]["sqs.ChangeMessageVisibility"] = 0.25

    failures = budgets.check("join", counts, join)

    assert len(failures) == 2
    limit = join["budgets"]["calls"]["dynamodb.UpdateItem@dependency"]
    assert failures[0].startswith(
        f"join: DynamoDB UpdateItem (dependency table) per member {limit + 1:g} > budget {limit:g}"
    )
    assert "a change added AWS calls by the tracker" in failures[0]
    assert failures[1].startswith("join: SQS ChangeMessageVisibility per member 0.25 > budget 0:")


def test_a_count_under_its_budget_asks_for_a_tighter_budget(workloads):
    wait = workloads["wait"]
    counts = copy.deepcopy(wait["budgets"])
    counts["per_parent"]["transitions"] -= 1

    (failure,) = budgets.check("wait", counts, wait)

    assert "transitions per parent" in failure
    assert "lower the budget" in failure


def test_a_store_that_calls_twice_fails_the_wait_budget(monkeypatch, workloads):
    """The test of the test: process reads each dependency's state once more."""
    read = StateTable.get

    def twice(self: StateTable, payload_id: str) -> Any:
        read(self, payload_id)
        return read(self, payload_id)

    monkeypatch.setattr(StateTable, "get", twice)

    counts = budgets.measure(("wait",))["wait"]

    failures = budgets.check("wait", counts, workloads["wait"])
    assert any(
        failure.startswith("wait: DynamoDB GetItem per waiter 3 > budget 2") for failure in failures
    ), failures
