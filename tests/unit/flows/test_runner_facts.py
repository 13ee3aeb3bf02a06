"""The runner gathers facts before it decides, and asks Step Functions only what the state needs.

A settled payload is decided from its item alone; a live one learns its workflow's type (from
the recorded run's ARN when there is one); only a Standard attempt past its lease has its run
described (docs/idempotency.md, "Leases").
"""

from __future__ import annotations

from typing import Any

import pytest

from dependency_tracker import app
from dependency_tracker.core import naming
from dependency_tracker.core.enums import PayloadState
from dependency_tracker.payloads.actions import ProcessAction
from dependency_tracker.payloads.model import ProcessPayload
from tests.conftest import WORKFLOW_ARN_PREFIX, Aws, age_claim, fresh_app, payload, payload_id


def step_functions_calls() -> list[str]:
    """The names of the Step Functions calls the runner makes from now on."""
    calls: list[str] = []

    def record(model: Any, **_: Any) -> None:
        calls.append(model.name)

    app.current().runs._sfn.meta.events.register("before-call.states", record)
    return calls


@pytest.mark.parametrize("state", [PayloadState.SUCCEEDED, PayloadState.INVALID])
def test_a_settled_payload_is_replayed_without_asking_step_functions(
    aws: Aws, state: PayloadState
) -> None:
    # GIVEN a payload that ended
    aws.finished_payload(payload(), state)
    calls = step_functions_calls()
    # WHEN it is submitted again
    action = app.current().runner.settle(ProcessPayload.model_validate(payload()), None)
    # THEN it is replayed from its item: no question to Step Functions
    assert action is ProcessAction.REPLAYED
    assert calls == []


def test_a_running_standard_attempt_within_its_lease_is_not_described(aws: Aws) -> None:
    # GIVEN attempt 1 recorded as running under a Standard run's ARN
    model = ProcessPayload.model_validate(payload())
    claimed = aws.states.claim(model, None)
    arn = naming.execution_arn(
        f"{WORKFLOW_ARN_PREFIX}pass", naming.execution_name(model.id, claimed.attempt)
    )
    aws.states.set_processing(model.id, claimed.attempt, arn)
    calls = step_functions_calls()
    # WHEN another submission arrives within the lease
    action = app.current().runner.settle(model, None)
    # THEN it waits; the ARN told the workflow's type, and the run was not described
    assert action is ProcessAction.WAITING
    assert calls == []


@pytest.mark.usefixtures("workflows")
def test_a_running_standard_attempt_past_its_lease_is_described_once(
    aws: Aws, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN attempt 1 started and recorded as running, claimed two minutes ago, 60 s lease
    monkeypatch.setenv("DEPTRACK_CLAIM_LEASE_SECONDS", "60")
    fresh_app()
    model = ProcessPayload.model_validate(payload())
    claimed = aws.states.claim(model, None)
    app.current().runs.start(model, claimed.attempt)
    age_claim(aws, payload_id(), 120)
    item = aws.states.get(model.id)
    assert item is not None
    assert item.execution_arn is not None
    aws.wait_for_execution(item.execution_arn)
    calls = step_functions_calls()
    # WHEN another submission arrives (its run ended; the status change never came)
    action = app.current().runner.settle(model, None)
    # THEN the run was described once, and its end recorded from that
    assert action is ProcessAction.RECOVERED
    assert calls == ["DescribeExecution"]
