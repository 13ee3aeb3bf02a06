"""Cirrus mode: a cirrus-geo v2 deployment runs the payloads, the tracker keeps the waits.

Two halves, one rule each (docs/cirrus.md):

* **Process side** (:class:`CirrusRuns`, called by the process flow after the
  waiter row is written): read cirrus's state table with a strongly
  consistent read; replay a payload that ended (``SUCCEEDED``/``INVALID``,
  unless ``replace``), leave one that is ``PROCESSING``, and send anything else
  to cirrus's process queue. cirrus's own claim makes a second send harmless.
* **Event side** (:class:`CirrusEvents`, fed by cirrus's workflow-event topic):
  an event only says when to look; the state table says what happened. A
  payload found ended resolves its waiters, as update-state does.

The ordering rule holds across the two systems: the tracker writes the waiter
row and then reads cirrus's table; cirrus writes its table and then publishes
the event, and the event side reads the waiter rows after that. Whichever
happens second sees the other's write.

A waiter that arrived after its payload failed (or asked for ``replace``) is
marked to wait for a run *after* the one it saw (``rerun_after``), so a late or
repeated event about the old run does not answer it.
"""

from __future__ import annotations

import json
from enum import StrEnum, unique
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.metrics import MetricUnit

from dependency_tracker.cirrus.models import (
    CirrusStateItem,
    WorkflowEvent,
    cirrus_id_problem,
    is_cirrus_id,
)
from dependency_tracker.core.enums import PayloadState
from dependency_tracker.core.errors import InvalidMessageError
from dependency_tracker.core.observability import logger, metrics
from dependency_tracker.core.text import clip
from dependency_tracker.payloads.actions import ProcessAction, count
from dependency_tracker.payloads.results import INLINE_RESULT_BYTES
from dependency_tracker.table.items import Resolution

if TYPE_CHECKING:
    from dependency_tracker.cirrus.store import CirrusQueue, CirrusStateTable
    from dependency_tracker.payloads.model import ProcessPayload
    from dependency_tracker.table.dependency_table import DependencyTable


@unique
class CirrusAction(StrEnum):
    """What cirrus mode's event side did with an event (the process side answers ProcessAction)."""

    RESOLVED = "resolved"  # an event: cirrus's state says the payload ended
    NOT_ENDED = "not_ended"  # an event, but cirrus's state says it has not ended (yet)
    PROGRESS = "progress"  # an event about a claim or a start: nothing to do
    REFUSED = "refused"  # cirrus refused the payload itself: waiters told INVALID
    UNKNOWN = "unknown"  # an event type this version does not know
    NO_PAYLOAD = "no_payload"  # an event about no payload a waiter could wait on

    @property
    def metric_name(self) -> str:
        """CloudWatch metric counting this action, e.g. ``CirrusResolved``."""
        return "Cirrus" + self.value.title().replace("_", "")


def resolution_of(
    item: CirrusStateItem, *, replayed: bool, executions_url: str | None
) -> Resolution:
    """What a waiter learns from cirrus's item of an ended payload."""
    state = item.state
    if state.is_success:
        return Resolution(
            state=state,
            execution_arn=item.last_execution,
            replayed=replayed,
            result_json=_result_json(item, executions_url),
        )
    error = (item.last_error or "").partition(": ")[0] or None
    return Resolution(
        state=state,
        execution_arn=item.last_execution,
        error=clip(error, 256),
        cause=clip(item.last_error),
        replayed=replayed,
    )


def _result_json(item: CirrusStateItem, executions_url: str | None) -> str:
    """``{"items": [{"href"}...], "output_url": ...}``: cirrus's outputs, bounded.

    cirrus keeps each run's output payload in its bucket
    (``{root}/executions/{payload_id}/{execution id}/output.json``) and may
    record the output items' URLs (``outputs``; cirrus-geo 2.0.0's Lambdas do not).
    """
    output_url = None
    if executions_url and item.last_execution:
        execution_id = item.last_execution.rpartition(":")[2]
        output_url = f"{executions_url}/{item.payload_id}/{execution_id}/output.json"
    hrefs = list(item.outputs or [])
    result: dict[str, Any] = {"items": [{"href": href} for href in hrefs], "output_url": output_url}
    text = json.dumps(result, sort_keys=True)
    while len(text.encode("utf-8")) > INLINE_RESULT_BYTES and result["items"]:
        # The output payload (output_url) names every item; the inline list is a courtesy.
        result["items"] = result["items"][: len(result["items"]) // 2]
        result.update(item_count=len(hrefs), truncated=True)
        text = json.dumps(result, sort_keys=True)
    return text


class CirrusRuns:
    """The process side: replay, leave or forward one payload whose waiter row is written."""

    def __init__(
        self,
        *,
        states: CirrusStateTable,
        queue: CirrusQueue,
        dependencies: DependencyTable,
        executions_url: str | None = None,
    ) -> None:
        self.states = states
        self.queue = queue
        self.dependencies = dependencies
        self.executions_url = executions_url

    @staticmethod
    def check_startable(payload: ProcessPayload, task_token: str | None) -> None:
        """Refuse, before anything is written, a payload cirrus would refuse.

        Raises:
            InvalidMessageError: cirrus cannot run this payload id or workflow.
        """
        problem = cirrus_id_problem(payload.id, payload.workflow)
        if problem is not None:
            raise InvalidMessageError(problem, task_token=task_token, payload_id=payload.id)

    def settle(
        self,
        payload: ProcessPayload,
        row_id: str | None,
        *,
        message_id: str | None = None,
        seen: object = None,
    ) -> ProcessAction:
        """Replay, leave or forward ``payload``; ``row_id`` is its waiter's row, if any.

        cirrus claims and runs it; its own conditional claim settles the races, so
        ``message_id`` is not needed, and its table is read here (``seen``, the
        tracker's state, says nothing about cirrus's runs).

        Raises:
            InvalidMessageError: Too large to forward (no cirrus payload bucket).
        """
        del message_id, seen
        return count(self._settle(payload, row_id), payload.id)

    def _settle(self, payload: ProcessPayload, row_id: str | None) -> ProcessAction:
        seen = self.states.get(payload.id)
        ended = seen is not None and seen.state.is_terminal
        replace = self._replaces(payload, seen)
        if seen is not None and ended and not seen.state.reruns and not replace:
            if row_id is not None:
                resolution = resolution_of(seen, replayed=True, executions_url=self.executions_url)
                self.dependencies.resolve(payload.id, row_id, resolution)
            return ProcessAction.REPLAYED
        if seen is not None and seen.state is PayloadState.PROCESSING and not replace:
            return ProcessAction.WAITING
        rerun_of = seen.last_execution if seen is not None and ended else None
        # The outcome on record is the run this waiter asks to repeat. When the row has its
        # answer already, this message is a redelivery (its first delivery's run ended
        # meanwhile), or that run's event came first: a new run would answer no one.
        if (
            rerun_of is not None
            and row_id is not None
            and not self.dependencies.wait_after(payload.id, row_id, rerun_of)
        ):
            return ProcessAction.ANSWERED
        # Absent, FAILED, ABORTED, a claim (whose claimer may have died: cirrus takes
        # it over), or replace: cirrus decides, and its claim keeps it to one run.
        self._forward(payload, replace=replace)
        return ProcessAction.FORWARDED

    @staticmethod
    def _replaces(payload: ProcessPayload, seen: CirrusStateItem | None) -> bool:
        """Whether ``replace`` applies: a rerun's only over the state its sender saw.

        cirrus counts no attempts, so only ``replace_if.state`` is compared, and
        cirrus's own claim (not this read) settles two reruns sent at once.
        """
        expected = payload.replace_if
        if expected is None or not payload.replace:
            return payload.replace
        return seen is not None and expected.holds(seen.state, None)

    def wait_only(self, payload_id: str, row_id: str | None) -> ProcessAction:
        """A wait-only waiter: resolve it if cirrus's payload ended; never forward."""
        seen = self.states.get(payload_id)
        if row_id is None or seen is None or not seen.state.is_terminal:
            return count(ProcessAction.WAITING, payload_id)
        resolution = resolution_of(seen, replayed=True, executions_url=self.executions_url)
        self.dependencies.resolve(payload_id, row_id, resolution)
        return count(ProcessAction.REPLAYED, payload_id)

    def _forward(self, payload: ProcessPayload, *, replace: bool) -> None:
        # The id travels with the payload: cirrus keeps an id it is given, so both
        # systems name the payload alike whatever their id rules.
        body = payload.model_dump(mode="json", exclude_none=True)
        body["id"] = payload.id
        if not replace and payload.replace:
            # A superseded rerun: cirrus must not replace what another run recorded since.
            step = body["process"][0]
            step["replace"] = False
            step.pop("replace_if", None)
        try:
            how = self.queue.send(body)
        except ValueError as exc:
            raise InvalidMessageError(str(exc), payload_id=payload.id) from exc
        logger.info("sent to cirrus", extra={"payload_id": payload.id, "how": how})


class CirrusEvents:
    """The event side: cirrus's workflow events, checked against cirrus's state table."""

    def __init__(
        self,
        *,
        states: CirrusStateTable,
        dependencies: DependencyTable,
        executions_url: str | None = None,
    ) -> None:
        self.states = states
        self.dependencies = dependencies
        self.executions_url = executions_url

    def handle(self, event: WorkflowEvent) -> CirrusAction:
        """Act on one workflow event (any number of times: the outcome is the same)."""
        kind = event.kind
        if kind is None:
            action, resolved = CirrusAction.UNKNOWN, 0
        elif not is_cirrus_id(event.payload_id):
            # "unknown" (a body cirrus could not read) or an id no waiter can hold.
            action, resolved = CirrusAction.NO_PAYLOAD, 0
        elif kind.refused:
            action, resolved = self._refused(event)
        elif kind.may_end:
            action, resolved = self.reconcile(event.payload_id)
        else:
            action, resolved = CirrusAction.PROGRESS, 0
        logger.info(
            "cirrus event handled",
            extra={
                "event_type": event.event_type,
                "payload_id": event.payload_id,
                "action": action.value,
                "resolved": resolved,
            },
        )
        metrics.add_metric(name=action.metric_name, unit=MetricUnit.Count, value=1)
        if resolved:
            metrics.add_metric(name="WaitersResolved", unit=MetricUnit.Count, value=resolved)
        return action

    def reconcile(self, payload_id: str) -> tuple[CirrusAction, int]:
        """Resolve the payload's waiters if cirrus's state table says it ended."""
        return self._settle(payload_id, self.states.get(payload_id))

    def _settle(self, payload_id: str, seen: CirrusStateItem | None) -> tuple[CirrusAction, int]:
        if seen is None or not seen.state.is_terminal:
            # A late event about a run cirrus has since replaced, or a state not yet
            # visible to this reader: the next event (or the sweeper) looks again.
            return CirrusAction.NOT_ENDED, 0
        resolution = resolution_of(seen, replayed=False, executions_url=self.executions_url)
        resolved = self.dependencies.resolve_all(
            payload_id, resolution, ended_run=seen.last_execution
        )
        return CirrusAction.RESOLVED, resolved

    def _refused(self, event: WorkflowEvent) -> tuple[CirrusAction, int]:
        """The payload cirrus could not read: tell its waiters, or they wait to the end."""
        seen = self.states.get(event.payload_id)
        if seen is not None:
            # cirrus knows the payload: whatever was refused, its state is the truth.
            return self._settle(event.payload_id, seen)
        resolution = Resolution(
            state=PayloadState.INVALID,
            error=event.event_type,
            cause=clip(event.error or "cirrus refused the payload"),
        )
        return CirrusAction.REFUSED, self.dependencies.resolve_all(event.payload_id, resolution)
