"""Sweeper flow: what the stream left behind is sent, what is stuck is reported.

The dependency table's stream is the only thing that tells parents, and its
event source mapping gives up on a record after its retries (only metadata
reaches the failure queue). Such a row stays terminal with no ``notified_at``:
exactly what this flow looks for, on a schedule. Each row found is handed to
:meth:`CallbackFlow.handle`, the stream's own code path, so the rules hold as
they do there: the row is read again (strongly consistent), sent first and
marked second, a parent already gone is recorded, a join member is counted
once. A sweep racing the stream sends at most twice, and Step Functions
refuses the second send of a token.

It also reports payloads held ``CLAIMED``/``PROCESSING`` past the claim lease
(a log line each and the ``SweeperStuckPayloads`` metric). It starts nothing:
the next message for such a payload takes the lease over.

In cirrus mode cirrus holds the payloads' states; instead of that report, each
payload whose rows still wait after ``sweeper_min_age_seconds`` is checked
against cirrus's state table (:meth:`CirrusEvents.reconcile`, the event
handler's own path): a workflow event that was lost resolves nothing, this does.

Each run is bounded (pages per table and a time budget) and continues where the
last one stopped (:class:`~dependency_tracker.sweeper.store.CursorStore`).
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from aws_lambda_powertools.metrics import MetricUnit
from pydantic import BaseModel, Field

from dependency_tracker.answers.actions import CallbackAction
from dependency_tracker.cirrus.flow import CirrusAction, CirrusEvents
from dependency_tracker.core import naming
from dependency_tracker.core.enums import utcnow
from dependency_tracker.core.errors import CallbackDeliveryError
from dependency_tracker.core.observability import drop_log_keys, logger, metrics
from dependency_tracker.payloads.runs import lease_seconds
from dependency_tracker.sweeper.store import CursorStore, ScanPage, SweepCursor, SweepStore

if TYPE_CHECKING:
    from collections.abc import Callable
    from datetime import datetime

    from dependency_tracker.callbacks.flow import CallbackFlow
    from dependency_tracker.core.settings import Settings
    from dependency_tracker.joins.rows import Row
    from dependency_tracker.table.items import PayloadStateItem

# Share of the run's time the waiter sweep may take; the stuck-payload report gets
# the rest (and all of it when the waiter sweep ends early).
WAITER_SHARE = 0.75
# Stuck payloads named in the report (every one is logged and counted).
MAX_STUCK_EXAMPLES = 20
DEPENDENCIES, STATES, WAITING = "dependencies", "states", "waiting"
_Item = TypeVar("_Item")


class SweepReport(BaseModel):
    """What one sweeper run read, sent and found (also its Lambda response)."""

    pages: dict[str, int] = Field(default_factory=lambda: {DEPENDENCIES: 0, STATES: 0})
    scanned: dict[str, int] = Field(default_factory=lambda: {DEPENDENCIES: 0, STATES: 0})
    read_units: float = 0.0
    found: int = 0  # terminal, un-notified rows older than the threshold
    sent: int = 0  # parents told now
    parents_gone: int = 0  # parents that no longer waited (recorded)
    recorded: int = 0  # join members counted on their joins
    skipped: int = 0  # notified meanwhile (the stream or another sweep)
    failed: int = 0  # still refused (a grant still missing too): left for the next run
    stuck_payloads: int = 0
    stuck_examples: list[str] = Field(default_factory=list)
    reconciled: int = 0  # cirrus mode: payloads found ended in cirrus's state table
    reconciled_waiters: int = 0  # ... and the rows that resolved
    passes_completed: list[str] = Field(default_factory=list)
    budget_exhausted: bool = False
    seconds: float = 0.0

    @property
    def recovered(self) -> int:
        """Rows the stream had left behind that this run settled."""
        return self.sent + self.parents_gone + self.recorded


class SweeperFlow:
    """One bounded sweep of the dependency table (send) and the state table (report)."""

    def __init__(
        self,
        *,
        settings: Settings,
        sweeps: SweepStore,
        callback: CallbackFlow,
        cursors: CursorStore | None = None,
        cirrus: CirrusEvents | None = None,
        clock: Callable[[], datetime] = utcnow,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.cirrus = cirrus
        self.sweeps = sweeps
        self.callback = callback
        self.cursors = cursors
        self._clock = clock
        self._monotonic = monotonic

    def run(self, *, deadline: float | None = None) -> SweepReport:
        """Sweep once within the settings' budget (and ``deadline``, monotonic seconds)."""
        started = self._monotonic()
        end = started + self.settings.sweeper_time_budget_seconds
        if deadline is not None:
            end = min(end, deadline)
        now = self._clock()
        report = SweepReport()
        cursor = self._load_cursor()
        started_at_top = cursor.at_top
        cursor.dependencies = self._sweep_waiters(
            cursor.dependencies,
            resolved_before=now - timedelta(seconds=self.settings.sweeper_min_age_seconds),
            end=started + (end - started) * WAITER_SHARE,
            report=report,
        )
        if self.cirrus is None:
            cursor.states = self._report_stuck(cursor.states, now=now, end=end, report=report)
        else:
            cursor.waiting = self._reconcile(
                self.cirrus,
                cursor.waiting,
                registered_before=now - timedelta(seconds=self.settings.sweeper_min_age_seconds),
                end=end,
                report=report,
            )
        self._save_cursor(cursor, unchanged=started_at_top and cursor.at_top)
        report.seconds = round(self._monotonic() - started, 3)
        _publish(report)
        return report

    # ------------------------------------------------------------ waiter rows

    def _sweep_waiters(
        self,
        start_key: dict[str, Any] | None,
        *,
        resolved_before: datetime,
        end: float,
        report: SweepReport,
    ) -> dict[str, Any] | None:
        """Send every row found from ``start_key`` on; the key the next run starts at."""

        def settle(rows: list[Row]) -> bool:
            report.found += len(rows)
            for row in rows:
                if self._monotonic() >= end:
                    return False  # this page again next run: what was sent, its filter skips
                self._settle(row, end, report)
            return True

        return self._walk(
            DEPENDENCIES,
            start_key,
            lambda key: self.sweeps.unnotified_page(resolved_before=resolved_before, start_key=key),
            settle,
            end=end,
            report=report,
        )

    def _walk(
        self,
        name: str,
        start_key: dict[str, Any] | None,
        read: Callable[[dict[str, Any] | None], tuple[list[_Item], ScanPage]],
        handle: Callable[[list[_Item]], bool],
        *,
        end: float,
        report: SweepReport,
    ) -> dict[str, Any] | None:
        """Read pages from ``start_key`` and ``handle`` each; the key the next run starts at.

        Bounded by ``sweeper_max_pages`` and the deadline; ``handle`` returns False when
        the deadline came in the middle of its page (then that page is read again next run).
        A pass that reaches the table's end is named in ``passes_completed``.
        """
        table = STATES if name == STATES else DEPENDENCIES
        key = start_key
        for _ in range(self.settings.sweeper_max_pages):
            if self._monotonic() >= end:
                report.budget_exhausted = True
                return key
            items, page = read(key)
            self._count_page(table, page.scanned, page.read_units, report)
            if not handle(items):
                report.budget_exhausted = True
                return key
            if page.next_key is None:
                report.passes_completed.append(name)
                return None
            key = page.next_key
        report.budget_exhausted = True
        return key

    def _settle(self, row: Row, end: float, report: SweepReport) -> None:
        """Hand one row to the callback flow, as the stream would have; tally the outcome."""
        try:
            action = self.callback.handle(row, deadline=end)
        except CallbackDeliveryError as exc:
            logger.warning("sweeper could not send: next run retries", extra={"code": exc.code})
            report.failed += 1
            return
        except Exception:  # noqa: BLE001  (one bad row must not end the sweep of the others)
            logger.exception("sweeper failed on a row: next run retries")
            report.failed += 1
            return
        finally:
            # handle() tags the logger per row; the next row is another one.
            drop_log_keys("token_hash", "join_id")
        if action is CallbackAction.SENT:
            report.sent += 1
            logger.warning("sweeper sent a callback the stream had not")
        elif action is CallbackAction.PARENT_GONE:
            report.parents_gone += 1
        elif action is CallbackAction.RECORDED:
            report.recorded += 1
        elif action is CallbackAction.REFUSED:
            report.failed += 1  # the parent may not be answered yet: the next run sends again
        else:
            report.skipped += 1

    # ------------------------------------------------------------ cirrus mode

    def _reconcile(
        self,
        cirrus: CirrusEvents,
        start_key: dict[str, Any] | None,
        *,
        registered_before: datetime,
        end: float,
        report: SweepReport,
    ) -> dict[str, Any] | None:
        """Check each payload still waited on against cirrus's state table; the next key."""

        def reconcile(payload_ids: list[str]) -> bool:
            for payload_id in payload_ids:
                self._reconcile_one(cirrus, payload_id, report)
            return True

        return self._walk(
            WAITING,
            start_key,
            lambda key: self.sweeps.waiting_page(
                registered_before=registered_before, start_key=key
            ),
            reconcile,
            end=end,
            report=report,
        )

    @staticmethod
    def _reconcile_one(cirrus: CirrusEvents, payload_id: str, report: SweepReport) -> None:
        try:
            action, resolved = cirrus.reconcile(payload_id)
        except Exception:  # noqa: BLE001  (one payload must not end the sweep)
            logger.exception("sweeper could not reconcile a payload: next run retries")
            report.failed += 1
            return
        if action is CirrusAction.RESOLVED and resolved:
            report.reconciled += 1
            report.reconciled_waiters += resolved
            logger.warning(
                "sweeper resolved waiters whose cirrus event never came",
                extra={"payload_id": payload_id, "resolved": resolved},
            )

    # ------------------------------------------------------------ stuck payloads

    def lease_of(self, payload: PayloadStateItem) -> int:
        """The claim lease of a payload's attempt, as the process flow reckons it.

        An Express run's lease is shorter; a claim whose run has not started is
        judged by the general lease (its type is not on the item).
        """
        express = payload.execution_arn is not None and naming.is_express_arn(payload.execution_arn)
        return lease_seconds(self.settings.claim_lease_seconds, express=express)

    def _report_stuck(
        self,
        start_key: dict[str, Any] | None,
        *,
        now: datetime,
        end: float,
        report: SweepReport,
    ) -> dict[str, Any] | None:
        """Log every payload held past its lease from ``start_key`` on; the next start key."""
        # The page filter uses the shortest lease; each payload is then judged by its own.
        shortest = lease_seconds(self.settings.claim_lease_seconds, express=True)
        claimed_before = now - timedelta(seconds=shortest)

        def judge(stuck: list[PayloadStateItem]) -> bool:
            for payload in stuck:
                held = now - (payload.claimed_at or payload.updated_at)
                if held.total_seconds() > self.lease_of(payload):
                    self._report_one(payload, held, report)
            return True

        return self._walk(
            STATES,
            start_key,
            lambda key: self.sweeps.stuck_page(claimed_before=claimed_before, start_key=key),
            judge,
            end=end,
            report=report,
        )

    def _report_one(self, payload: PayloadStateItem, held: timedelta, report: SweepReport) -> None:
        report.stuck_payloads += 1
        if len(report.stuck_examples) < MAX_STUCK_EXAMPLES:
            report.stuck_examples.append(payload.payload_id)
        logger.warning(
            "payload held past its claim lease",
            extra={
                "stuck_payload_id": payload.payload_id,
                "state": payload.state.value,
                "attempt": payload.attempt,
                "execution_arn": payload.execution_arn,
                "held_seconds": int(held.total_seconds()),
                "lease_seconds": self.lease_of(payload),
            },
        )

    # ------------------------------------------------------------ bookkeeping

    @staticmethod
    def _count_page(table: str, scanned: int, units: float | None, report: SweepReport) -> None:
        report.pages[table] += 1
        report.scanned[table] += scanned
        report.read_units += units or 0.0

    def _load_cursor(self) -> SweepCursor:
        tables = {
            "dependency_table": self.settings.dependency_table,
            "state_table": self.settings.state_table,
        }
        if self.cursors is None:
            return SweepCursor(**tables)
        return self.cursors.load(**tables)

    def _save_cursor(self, cursor: SweepCursor, *, unchanged: bool) -> None:
        if self.cursors is None:
            if not cursor.at_top:
                logger.warning("no payload bucket for a cursor: the next sweep starts at the top")
            return
        # A table within one run's budget ends every run at the top: nothing to write.
        if not unchanged:
            self.cursors.save(cursor)


def _publish(report: SweepReport) -> None:
    """One log line and one set of metrics per run (zeros too, so alarms see data)."""
    logger.info("sweep finished", extra={"report": report.model_dump(mode="json")})
    for name, value in (
        ("SweeperRowsScanned", sum(report.scanned.values())),
        ("SweeperRowsFound", report.found),
        ("SweeperCallbacksSent", report.sent),
        ("SweeperParentsGone", report.parents_gone),
        ("SweeperMembersRecorded", report.recorded),
        ("SweeperCallbacksFailed", report.failed),
        ("SweeperStuckPayloads", report.stuck_payloads),
        ("SweeperCirrusReconciled", report.reconciled),
        ("SweeperPassesCompleted", len(report.passes_completed)),
    ):
        metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)
    metrics.add_metric(name="SweeperReadUnits", unit=MetricUnit.Count, value=report.read_units)
