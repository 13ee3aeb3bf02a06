"""``python -m bench.join_cancellation``: how fast a cancelled join stops its members.

Opt-in (not a section of ``python -m bench``). On the embedded stack (platform model on,
no deadlines schedule, as :func:`bench.stack.local_stack`), one ``wait-for-join`` parent
with ``on_parent_gone: "cancel"`` waits on ``--members`` ``simulate`` payloads (10,000 by
default, given as a manifest), each waiting an hour. Once the join row counts at least
``--abort-at`` of them registered, the parent is stopped (``StopExecution``); update-state
reads its link rows and cancels the join (joins/cancellation.py): the join is decided
``ABORTED``, ``join_cancel`` fans out per chunk, and each member's execution is stopped and
its membership row resolved ``ABORTED`` (``JoinParentGone``). Chunks not registered by
then register nothing (joins/chunks.py, ``stopped``).

The bench waits until no member execution runs, no member's state row is ``PROCESSING``
or ``CLAIMED``, and the join queue is empty, and reports: the members registered at the
abort and in the end, the executions started (and how many of them after the abort: a
chunk taken up before the join was decided registers and starts its members, then stops
them), the seconds from the abort to the last member's stop (its execution's
``stopDate``) and the stop rate. It exits 1 when a started member still runs (or its
state row is live) after ``--timeout`` seconds, registration included.

Run: ``.venv/bin/python -m bench.join_cancellation [--members 10000] [--abort-at 0.10]
[--json]``. Wall times are this machine's, on moto: they show the shape, not AWS's.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from bench.stack import CHILD, JOIN_MACHINE, local_stack, payload, payload_id, warm_interpreter
from dependency_tracker.core.enums import PayloadState
from dependency_tracker.joins.cancellation import PARENT_GONE_ERROR
from dependency_tracker.joins.manifest import manifest_text
from dependency_tracker.joins.store import JoinStore

if TYPE_CHECKING:
    from dependency_tracker.joins.rows import JoinItem
    from dependency_tracker_local import EmbeddedStack

DEFAULT_MEMBERS = 10_000
DEFAULT_ABORT_AT = 0.10
DEFAULT_TIMEOUT_SECONDS = 1800.0
# Each member waits this long: none ends on its own while the bench runs.
MEMBER_SECONDS = 3600
# The parent's own wait, past the bench's timeout.
PARENT_TIMEOUT_SECONDS = 7200
POLL_SECONDS = 0.5
# The join row's registered chunks unchanged this long (and the join queue empty): no
# chunk is registering any more.
QUIET_SECONDS = 5.0
LIVE = (PayloadState.PROCESSING, PayloadState.CLAIMED)


class BenchTimeoutError(RuntimeError):
    """A phase did not finish within the bench's ``--timeout``."""


def _join_id(sfn: Any, parent: str) -> str | None:
    """The join id wait-for-join sent (from the parent's history); None before it sent it."""
    history = sfn.get_execution_history(executionArn=parent)
    for event in history["events"]:
        details = event.get("taskScheduledEventDetails")
        if details is not None:
            body = json.loads(details["parameters"])["MessageBody"]
            return str(body["join"]["join_id"])
    return None


def _running(sfn: Any, machine: str) -> bool:
    """Whether an execution of ``machine`` runs: one page of one.

    Not paged: the page token of a ``RUNNING`` list may name an execution stopped
    since, which moto refuses (``InvalidToken``).
    """
    page = sfn.list_executions(stateMachineArn=machine, statusFilter="RUNNING", maxResults=1)
    return bool(page["executions"])


def _executions(sfn: Any, machine: str) -> list[dict[str, Any]]:
    """Every execution of ``machine``."""
    found: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {"stateMachineArn": machine, "maxResults": 1000}
    while True:
        page = sfn.list_executions(**kwargs)
        found.extend(page["executions"])
        token = page.get("nextToken")
        if token is None:
            return found
        kwargs["nextToken"] = token


def _queued(sqs: Any, queue_url: str) -> int:
    """Messages on a queue, visible or in flight."""
    names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    attributes = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=names)["Attributes"]
    return sum(int(attributes[name]) for name in names)


def _live_states(dynamodb: Any, table: str, ids: set[str]) -> tuple[int, int]:
    """Members with a state row, and those of them still ``PROCESSING`` or ``CLAIMED``.

    A ``Scan`` of two attributes: the rows are those of the members started (a
    ``BatchGetItem`` of every member, most never started, would slow the stack measured).
    """
    found, live = 0, 0
    kwargs: dict[str, Any] = {
        "TableName": table,
        "ProjectionExpression": "payload_id, #state",
        "ExpressionAttributeNames": {"#state": "state"},
        "ConsistentRead": True,
    }
    while True:
        page = dynamodb.scan(**kwargs)
        for item in page["Items"]:
            if item["payload_id"]["S"] in ids:
                found += 1
                live += PayloadState(item["state"]["S"]) in LIVE
        if "LastEvaluatedKey" not in page:
            return found, live
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def _join_row(store: JoinStore, join_id: str) -> JoinItem:
    row = store.get(join_id)
    if row is None:
        msg = f"join {join_id} has no row"
        raise RuntimeError(msg)
    return row


def _check(deadline: float, what: str) -> None:
    if time.monotonic() > deadline:
        msg = f"timed out waiting for {what}"
        raise BenchTimeoutError(msg)


def _start(stack: EmbeddedStack, members: int) -> tuple[str, list[str]]:
    """Put the members' manifest and start the cancelling join; its ARN and member ids."""
    documents = [payload(f"cancel-{i:05d}", seconds=MEMBER_SECONDS) for i in range(members)]
    bucket = str(stack.outputs["PayloadBucketName"])
    key = "manifests/join-cancellation.jsonl"
    stack.client("s3").put_object(Bucket=bucket, Key=key, Body=manifest_text(documents))
    body = {
        "dependencies_url": f"s3://{bucket}/{key}",
        "timeout_seconds": PARENT_TIMEOUT_SECONDS,
        "on_parent_gone": "cancel",
    }
    started = stack.client("stepfunctions").start_execution(
        stateMachineArn=stack.outputs["StateMachines"][JOIN_MACHINE],
        name="join-cancellation",
        input=json.dumps(body),
    )
    return str(started["executionArn"]), [payload_id(document) for document in documents]


def run(members: int, abort_at: float, timeout: float) -> dict[str, Any]:
    """Start the join, abort its parent at ``abort_at``, wait for the stops; the figures."""
    threshold = max(1, math.ceil(abort_at * members))
    figures: dict[str, Any] = {"members": members, "abort_at": abort_at, "finished": False}
    with local_stack() as stack:
        warm_interpreter(stack)
        sfn, sqs = stack.client("stepfunctions"), stack.client("sqs")
        store = JoinStore(stack.client("dynamodb"), stack.outputs["DependencyTableName"])
        dynamodb, state_table = stack.client("dynamodb"), str(stack.outputs["StateTableName"])
        child = stack.outputs["StateMachines"][CHILD]
        join_queue = str(stack.outputs["JoinQueueUrl"])
        deadline = time.monotonic() + timeout
        began = time.monotonic()
        parent, ids = _start(stack, members)
        # Registration, until the join row counts the threshold.
        join_id = None
        while join_id is None:
            _check(deadline, "the join message")
            time.sleep(POLL_SECONDS)
            join_id = _join_id(sfn, parent)
        while (row := store.get(join_id)) is None or row.registered < threshold:
            _check(deadline, f"{threshold} members registered")
            time.sleep(POLL_SECONDS)
        figures["registration_s"] = round(time.monotonic() - began, 1)
        # The abort.
        figures["registered_at_abort"] = row.registered
        figures["chunks_registered_at_abort"] = row.registered_chunks
        figures["join_queue_at_abort"] = _queued(sqs, join_queue)
        aborted_at = datetime.now(UTC)
        aborted = time.monotonic()
        sfn.stop_execution(executionArn=parent, error="Cancelled", cause="bench: parent aborted")
        probe = _Probe(sfn, sqs, store, dynamodb, state_table, child, join_queue, join_id, set(ids))
        try:
            figures |= probe.wait_stopped(aborted, deadline)
            figures["finished"] = True
        except BenchTimeoutError as exc:
            figures |= probe.phases | {"error": str(exc)}
        figures |= probe.tally(aborted_at)
        figures["pump_errors"] = stack.pump_errors
        # Stopping the stack with members still running makes the pumps log undelivered
        # events: expected on a timeout, and nothing to do with what was measured.
        logging.getLogger("dependency_tracker_local").setLevel(logging.CRITICAL)
    return figures


@dataclass
class _Probe:
    """What the bench reads while the join is cancelled: the stack's clients and names."""

    sfn: Any
    sqs: Any
    store: JoinStore
    dynamodb: Any
    state_table: str
    child: str
    join_queue: str
    join_id: str
    ids: set[str]
    # The phases timed so far (kept when the wait times out).
    phases: dict[str, Any] = field(default_factory=dict)

    def wait_stopped(self, aborted: float, deadline: float) -> dict[str, Any]:
        """Poll until no member runs, no state row is live, no chunk registers; the phases.

        Each phase is the seconds after the abort from which its condition held to the
        end (a condition that stopped holding, e.g. a late chunk's members starting, is
        timed again).
        """
        phases = self.phases
        since: dict[str, float | None] = {"running": None, "queue": None, "states": None}
        chunks, quiet_since = -1, time.monotonic()
        while True:
            _check(deadline, "every started member stopped and the join queue drained")
            time.sleep(POLL_SECONDS)
            now = time.monotonic()
            row = _join_row(self.store, self.join_id)
            if row.workflow_state is PayloadState.ABORTED:
                phases.setdefault("join_decided_after_abort_s", round(now - aborted, 2))
            if row.registered_chunks != chunks:
                chunks, quiet_since = row.registered_chunks, now
            running = _running(self.sfn, self.child)
            drained = _queued(self.sqs, self.join_queue) == 0
            # The state rows are read only once nothing runs.
            held = {
                "running": not running,
                "queue": drained,
                "states": not running and self._live()[1] == 0,
            }
            for name, holds in held.items():
                since[name] = (since[name] or now) if holds else None
            if all(held.values()) and now - quiet_since >= QUIET_SECONDS:
                names = {
                    "running": "no_member_running_after_abort_s",
                    "queue": "join_queue_drained_after_abort_s",
                    "states": "state_rows_settled_after_abort_s",
                }
                for name, key in names.items():
                    phases[key] = round((since[name] or now) - aborted, 2)
                phases["settled_after_abort_s"] = round(now - aborted, 2)
                return phases

    def _live(self) -> tuple[int, int]:
        """The members' state rows, and those of them live (:func:`_live_states`)."""
        return _live_states(self.dynamodb, self.state_table, self.ids)

    def tally(self, aborted_at: datetime) -> dict[str, Any]:
        """What the run left: registrations, executions, stops, membership outcomes."""
        row = _join_row(self.store, self.join_id)
        runs = _executions(self.sfn, self.child)
        statuses = Counter(str(run["status"]) for run in runs)
        after = [run for run in runs if run["startDate"] > aborted_at]
        stops = [r["stopDate"] for r in runs if r["status"] == "ABORTED" and "stopDate" in r]
        with_state, live = self._live()
        outcomes, _ = self.store.members(self.join_id)
        resolved = Counter(
            "pending" if o.state is None else f"{o.state.value}/{o.error}" for o in outcomes
        )
        figures: dict[str, Any] = {
            "join_state": row.workflow_state.value,
            "decided_by": row.decided_by,
            "registered_total": row.registered,
            "chunks_registered_total": row.registered_chunks,
            "chunks_total": row.chunks,
            "executions_started": len(runs),
            "state_rows": with_state,
            "state_rows_live": live,
            "started_after_abort": len(after),
            "executions_by_status": dict(sorted(statuses.items())),
            "memberships_by_outcome": dict(sorted(resolved.items())),
            "members_stopped_by_cancel": resolved.get(
                f"{PayloadState.ABORTED.value}/{PARENT_GONE_ERROR}", 0
            ),
        }
        if stops:
            first = (min(stops) - aborted_at).total_seconds()
            last = (max(stops) - aborted_at).total_seconds()
            figures["first_stop_after_abort_s"] = round(first, 2)
            figures["last_stop_after_abort_s"] = round(last, 2)
            figures["stops_per_s"] = round(len(stops) / last, 1) if last > 0 else None
            # From the first stop to the last: the cancellation's own pace, its start-up
            # (the parent's end event, update-state, the join_cancel fan-out) left out.
            spread = last - first
            figures["stops_per_s_first_to_last"] = (
                round(len(stops) / spread, 1) if spread > 0 else None
            )
        return figures


def table(figures: dict[str, Any]) -> str:
    """The figures as a two-column text table."""
    rows = [
        ("members", figures["members"]),
        ("abort at", f"{figures['abort_at']:.0%} ({figures.get('registration_s', '-')} s)"),
        ("registered at abort", figures.get("registered_at_abort", "-")),
        ("registered in total", figures.get("registered_total", "-")),
        (
            "chunks registered (of total)",
            (
                f"{figures.get('chunks_registered_total', '-')}"
                f" of {figures.get('chunks_total') or 'not known'}"
            ),
        ),
        ("executions started", figures.get("executions_started", "-")),
        ("started after the abort", figures.get("started_after_abort", "-")),
        ("executions by status", figures.get("executions_by_status", "-")),
        ("memberships by outcome", figures.get("memberships_by_outcome", "-")),
        ("join queue at abort (messages)", figures.get("join_queue_at_abort", "-")),
        ("join decided after abort (s)", figures.get("join_decided_after_abort_s", "-")),
        ("first stop after abort (s)", figures.get("first_stop_after_abort_s", "-")),
        ("last stop after abort (s)", figures.get("last_stop_after_abort_s", "-")),
        ("stop rate, from the abort (members/s)", figures.get("stops_per_s", "-")),
        ("stop rate, first to last stop", figures.get("stops_per_s_first_to_last", "-")),
        ("none running, polled (s)", figures.get("no_member_running_after_abort_s", "-")),
        ("state rows settled (s)", figures.get("state_rows_settled_after_abort_s", "-")),
        ("join queue drained (s)", figures.get("join_queue_drained_after_abort_s", "-")),
        ("settled after abort (s)", figures.get("settled_after_abort_s", "-")),
        ("state rows still live", figures.get("state_rows_live", "-")),
        ("pump errors", figures.get("pump_errors", "-")),
        ("finished", figures["finished"] if "error" not in figures else figures["error"]),
    ]
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)


def main(argv: list[str] | None = None) -> int:
    """Run the bench and print its figures (a table, or JSON); 1 if members still ran."""
    parser = argparse.ArgumentParser(prog="python -m bench.join_cancellation", description=__doc__)
    parser.add_argument("--members", type=int, default=DEFAULT_MEMBERS)
    parser.add_argument(
        "--abort-at", type=float, default=DEFAULT_ABORT_AT, help="fraction registered"
    )
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_SECONDS, help="seconds")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    figures = run(args.members, args.abort_at, args.timeout)
    if args.json:
        json.dump(figures, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(table(figures) + "\n")
    running = figures.get("executions_by_status", {}).get("RUNNING", 0)
    if not figures["finished"] or running or figures.get("state_rows_live"):
        sys.stderr.write(
            f"FAILED: {running} member executions still running,"
            f" {figures.get('state_rows_live')} state rows live"
            f" ({figures.get('error', 'after the run')})\n"
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
