"""The ordering rule: process and update-state in every interleaving of their AWS calls.

For one payload, a new waiter arrives (process flow) while the payload's
execution ends (update-state flow). Whatever the order of their individual
writes and reads, the waiter must end resolved with the right state: no lost
wake-up, no wrong result.
"""

from __future__ import annotations

import itertools
import random
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

from dependency_tracker.app import App
from dependency_tracker.core import clients, naming
from dependency_tracker.core.enums import PayloadState
from dependency_tracker.joins.messages import JoinMessage
from dependency_tracker.payloads.events import StatusChange
from dependency_tracker.payloads.model import ProcessPayload
from dependency_tracker.payloads.state_table import StateTable
from dependency_tracker.payloads.update_state import UpdateStateFlow
from dependency_tracker.table.dependency_table import DependencyTable
from dependency_tracker.table.items import waiter_id_for
from dependency_tracker.waits.messages import ProcessMessage
from tests.conftest import DEPENDENCY_TABLE, STATE_TABLE, WORKFLOW_ARN_PREFIX, Aws, payload
from tests.interleave import Run, Scheduler, explore

if TYPE_CHECKING:
    from collections.abc import Sequence

    from dependency_tracker.intake.route import Intake

STATUS = {
    PayloadState.SUCCEEDED: ("SUCCEEDED", None),
    PayloadState.FAILED: ("FAILED", "TaskFailed"),
    PayloadState.INVALID: ("FAILED", "InvalidInput"),
}


@dataclass
class Side:
    """One flow's own clients, whose calls the current scheduler gates."""

    dynamodb: Any
    sfn: Any


class Harness:
    """Builds flows on gated clients; one set of clients for all runs (they are slow to make)."""

    def __init__(self, aws: Aws, labels: Sequence[str]) -> None:
        self.aws = aws
        self.scheduler: Scheduler | None = None
        self.sides: dict[str, Side] = {}
        session = clients.session()
        for label in labels:
            side = Side(session.client("dynamodb"), session.client("stepfunctions"))
            for client in (side.dynamodb, side.sfn):
                client.meta.events.register("before-call.*.*", self._gate(label))
            self.sides[label] = side

    def _gate(self, label: str) -> Any:
        def gate(**kwargs: Any) -> None:
            if self.scheduler is not None:
                self.scheduler.hook(label)(**kwargs)

        return gate

    def process_flow(self, label: str) -> Intake:
        side = self.sides[label]
        return App(
            self.aws.settings,
            {
                "dynamodb": side.dynamodb,
                "stepfunctions": side.sfn,
                "s3": self.aws.s3,
                "sqs": self.aws.sqs,
            },
            dependencies=DependencyTable(side.dynamodb, DEPENDENCY_TABLE, resolve_concurrency=1),
        ).process

    def update_flow(self, label: str) -> UpdateStateFlow:
        side = self.sides[label]
        return UpdateStateFlow(
            settings=self.aws.settings,
            states=StateTable(side.dynamodb, STATE_TABLE),
            dependencies=DependencyTable(side.dynamodb, DEPENDENCY_TABLE, resolve_concurrency=1),
            sfn=side.sfn,
        )

    def run(self, flows: dict[str, Any], prefix: Sequence[str], seed: int | None = None) -> Run:
        self.scheduler = Scheduler(prefix, random.Random(seed) if seed is not None else None)
        try:
            return self.scheduler.execute(flows)
        finally:
            self.scheduler = None


_counter = itertools.count()


def prepare(aws: Aws, start: PayloadState) -> tuple[ProcessPayload, StatusChange]:
    """A fresh payload whose attempt 1 is ``start`` (live), and the change that ends it."""
    model = ProcessPayload.model_validate(payload(f"race-{next(_counter)}"))
    aws.states.claim(model, None)
    name = naming.execution_name(model.id, 1)
    arn = naming.execution_arn(f"{WORKFLOW_ARN_PREFIX}pass", name)
    if start is PayloadState.PROCESSING:
        aws.states.set_processing(model.id, 1, arn)
    return model, StatusChange.model_validate(
        {
            "executionArn": arn,
            "stateMachineArn": f"{WORKFLOW_ARN_PREFIX}pass",
            "name": name,
            "status": "SUCCEEDED",
            "input": model.execution_input(),
        }
    )


def ending(change: StatusChange, final: PayloadState) -> StatusChange:
    status, error = STATUS[final]
    return change.model_copy(update={"status": status, "error": error})


def message(model: ProcessPayload, token: str) -> ProcessMessage:
    body = model.model_dump(mode="json", exclude_none=True)
    return ProcessMessage.model_validate({"payload": body, "callback": {"task_token": token}})


def assert_no_lost_wakeup(
    aws: Aws, model: ProcessPayload, tokens: list[str], final: PayloadState
) -> None:
    """Each waiter is resolved with ``final``, or waits on a live newer attempt."""
    item = aws.states.get(model.id)
    assert item is not None
    for token in tokens:
        waiter = aws.dependencies.get(model.id, waiter_id_for(token))
        assert waiter is not None
        if waiter.workflow_state is PayloadState.PROCESSING:
            # only a re-run may leave a waiter waiting, and then the re-run is live
            assert final.reruns
            assert item.attempt == 2
            assert item.state in {PayloadState.CLAIMED, PayloadState.PROCESSING}
        else:
            assert waiter.workflow_state is final
            assert waiter.execution_arn is not None


@pytest.fixture
def harness(aws: Aws, workflows: dict[str, str]) -> Harness:
    return Harness(aws, ["process", "process-2", "update"])


@pytest.mark.parametrize("start", [PayloadState.PROCESSING, PayloadState.CLAIMED])
@pytest.mark.parametrize("final", list(STATUS))
def test_every_interleaving_of_process_and_update_state(
    aws: Aws, harness: Harness, start: PayloadState, final: PayloadState
) -> None:
    outcomes: Counter[str] = Counter()

    def run_one(prefix: Sequence[str]) -> Run:
        model, change = prepare(aws, start)
        flows = {
            "process": lambda: harness.process_flow("process").handle(message(model, "tok")),
            "update": lambda: harness.update_flow("update").handle(ending(change, final)),
        }
        run = harness.run(flows, prefix)
        assert run.errors == {}, (run.calls, run.errors)
        assert_no_lost_wakeup(aws, model, ["tok"], final)
        waiter = aws.dependencies.get(model.id, waiter_id_for("tok"))
        assert waiter is not None
        outcomes[f"{run.results['process']}/{waiter.workflow_state}"] += 1
        return run

    runs = list(explore(run_one))
    # GIVEN ~4 calls a side, the search must have found many orders, both sides first
    assert len(runs) >= 10
    assert {run.trace[0] for run in runs} == {"process", "update"}
    assert {run.trace[-1] for run in runs} == {"process", "update"}
    # both resolution paths happen: update-state resolving, and process replaying/re-running
    if final is PayloadState.SUCCEEDED:
        assert any(key.startswith("replayed/") for key in outcomes), outcomes
        assert any(key.startswith(("waiting/", "resumed_start/")) for key in outcomes), outcomes


@pytest.mark.parametrize("final", list(STATUS))
def test_random_interleavings_of_two_waiters_and_update_state(
    aws: Aws, harness: Harness, final: PayloadState
) -> None:
    # Three flows: exhaustive search is large, so sample seeded random schedules.
    traces = set()
    for seed in range(60):
        model, change = prepare(aws, PayloadState.PROCESSING)
        flows = {
            "process": lambda m=model: harness.process_flow("process").handle(message(m, "a")),
            "process-2": lambda m=model: harness.process_flow("process-2").handle(message(m, "b")),
            "update": lambda c=change: harness.update_flow("update").handle(ending(c, final)),
        }
        run = harness.run(flows, (), seed=seed)
        assert run.errors == {}, (seed, run.calls, run.errors)
        assert_no_lost_wakeup(aws, model, ["a", "b"], final)
        item = aws.states.get(model.id)
        assert item is not None
        assert item.attempt <= 2, "two waiters must not start two re-runs"
        traces.add(tuple(run.trace))
    assert len(traces) > 20


@pytest.mark.parametrize("final", list(STATUS))
def test_every_interleaving_of_a_join_registration_and_update_state(
    aws: Aws, harness: Harness, final: PayloadState
) -> None:
    # The join writes its membership rows before it reads the members' states:
    # the same rule, through BatchGetItem.
    def run_one(prefix: Sequence[str]) -> Run:
        model, change = prepare(aws, PayloadState.PROCESSING)
        body = {
            "join": {"task_token": f"join-{model.id}"},
            "payloads": [model.model_dump(mode="json")],
        }
        joined = JoinMessage.from_document(body, message_id=None, load_url=None)
        flows = {
            "process": lambda: harness.process_flow("process").handle(joined),
            "update": lambda: harness.update_flow("update").handle(ending(change, final)),
        }
        run = harness.run(flows, prefix)
        assert run.errors == {}, (run.calls, run.errors)
        item = aws.states.get(model.id)
        assert item is not None
        (membership,) = [
            r for r in aws.dependencies.rows(model.id) if r.waiter_id.startswith("join#")
        ]
        if membership.workflow_state is PayloadState.PROCESSING:
            assert final.reruns
            assert item.state in {PayloadState.CLAIMED, PayloadState.PROCESSING}
        else:
            assert membership.workflow_state is final
        return run

    runs = list(explore(run_one))
    assert len(runs) >= 10
