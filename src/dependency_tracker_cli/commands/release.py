"""``dependency-tracker release``: fail a waiting parent with ``DependencyReleased`` and a cause.

An operator ends a wait the tracker would otherwise hold until its dependency
ends (or the parent's callback timeout): ``SendTaskFailure`` on the row's task
token, then the row is marked the way the callback flow marks a row it told
(``notified_at``, ``notify_outcome``), so neither the stream handler nor the
sweeper answers it again. Send first, mark second, as the callback flow does:
a crash in between leaves a row the tracker later answers, which Step Functions
refuses harmlessly (the token is closed).
"""

# No ``from __future__ import annotations``: Typer reads these annotations at runtime.

import sys
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum, unique
from typing import TYPE_CHECKING, Annotated, Any

import typer
from botocore.exceptions import BotoCoreError, ClientError
from rich.table import Table

from dependency_tracker.app import App
from dependency_tracker.core.backoff import error_code
from dependency_tracker.core.enums import DependencyError, utcnow
from dependency_tracker.core.errors import DependencyTrackerError, PayloadNotFoundError
from dependency_tracker.core.limits import SFN_MAX_CAUSE_CHARS
from dependency_tracker.core.settings import Settings
from dependency_tracker.core.text import clip, fit_json
from dependency_tracker.core.tokens import PARENT_GONE_CODES, PARENT_GONE_OUTCOME, redact_token
from dependency_tracker.joins.cancellation import released_cause
from dependency_tracker.joins.rows import JoinItem, ParentGone, typed_row
from dependency_tracker.joins.store import JoinStore
from dependency_tracker.table.dependency_table import DependencyTable
from dependency_tracker.table.items import MembershipItem, ReleaseMark, WaiterItem
from dependency_tracker_cli import render
from dependency_tracker_cli.options import Json, aws_command
from dependency_tracker_cli.target import Target
from dependency_tracker_cli.waitgraph import execution_label

if TYPE_CHECKING:
    from dependency_tracker.joins.rows import Row

# What ``notify_outcome`` starts with on a released row (the callback flow writes
# ``SENT:<state>`` and ``PARENT_GONE:<code>``).
RELEASED_OUTCOME = "RELEASED"
# The reason as it is kept in ``notify_outcome`` (shown by ``waiters``): one short line.
_OUTCOME_REASON_CHARS = 200
# The reason in the cause: the operator's text, long enough for a ticket and a sentence.
MAX_REASON_CHARS = 4096
# A row that changed between the read and the conditional write is read again, this often.
_MARK_ATTEMPTS = 3
# Exit code when nothing was released: every row had been answered or its token closed
# (as ``rerun`` exits 3 when it sends nothing).
NOTHING_RELEASED_EXIT = 3


class AmbiguousWaiterError(DependencyTrackerError):
    """Several parents wait on the payload and ``--waiter`` names none of them."""

    exit_code = 2


@unique
class Outcome(StrEnum):
    """What ``release`` did with one waiter row."""

    RELEASED = "released"
    WOULD_RELEASE = "would_release"
    ALREADY_ANSWERED = "already_answered"
    TOKEN_CLOSED = "token_closed"  # noqa: S105  (an outcome, not a secret)


@dataclass
class Release:
    """One row to release (a task-token waiter or a join row) and what became of it."""

    row: WaiterItem | JoinItem
    outcome: Outcome | None = None
    detail: str | None = None
    cause: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def waiter(self) -> str:
        """The row as ``waiters`` names it: ``sha256:...`` or ``join:<id>``."""
        if isinstance(self.row, JoinItem):
            return f"join:{self.row.join_id}"
        return redact_token(self.row.task_token) or ""

    def to_json(self) -> dict[str, Any]:
        """``--json`` view of the row and its outcome (never the token)."""
        data: dict[str, Any] = {
            "kind": "join" if isinstance(self.row, JoinItem) else "token",
            "waiter": self.waiter,
            "payload_id": self.row.payload_id,
            "join_id": self.row.join_id if isinstance(self.row, JoinItem) else None,
            "parent_execution": self.row.parent_execution,
            "waiter_payload_id": self.row.waiter_payload_id,
            "state": self.row.workflow_state.value,
            "outcome": None if self.outcome is None else self.outcome.value,
            "detail": self.detail,
            "cause": self.cause,
        }
        return data | self.extra


@aws_command
def release(
    target: Target,
    *,
    what: Annotated[
        str,
        typer.Argument(
            metavar="TARGET",
            help="A parent execution ARN (all its waits), or the payload id it waits on.",
            show_default=False,
        ),
    ],
    reason: Annotated[
        str,
        typer.Option(
            "--reason",
            metavar="TEXT",
            help="Why: goes into the cause the parent fails with, and onto the row.",
            show_default=False,
        ),
    ],
    waiter: Annotated[
        str | None,
        typer.Option(
            "--waiter",
            metavar="WAITER_ID",
            help="With a payload id: the waiter to release, as `waiters` names it "
            "(sha256:... or join:<id>).",
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Show what would be released; change nothing.")
    ] = False,
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask for confirmation.")] = False,
    json_output: Json = False,
) -> None:
    """Fail a waiting parent with DependencyReleased, the operator's reason in the cause.

    TARGET is a parent execution ARN (every wait of that execution: one scan of the
    dependency table) or a payload id (its one waiter; --waiter picks one when several
    wait). Each waiter gets SendTaskFailure(error=DependencyReleased); a join is
    released once, by its join row. The row is then marked told, so the tracker never
    answers it. A wait the tracker answered meanwhile, or whose task had closed, is
    reported and left as it is (exit 3 when nothing was released).

    Examples:
      dependency-tracker release "$PARENT_ARN" --reason "tile-7 is never coming" --yes
      dependency-tracker release sentinel-2-l2a/workflow-simulate/tile-7 --reason INC-42 --dry-run
      dependency-tracker release s2/workflow-cog/tile-1 --waiter join:j1 --reason INC-9 --yes --json
    """
    if not reason.strip():
        raise typer.BadParameter("give a reason", param_hint="'--reason'")
    try:
        # Bytes that are not UTF-8 reach Python's argv as lone surrogates: Step Functions
        # might take them, DynamoDB refuses them, so the parent would fail unmarked.
        reason.encode("utf-8")
    except UnicodeEncodeError:
        msg = "not valid UTF-8 text (check the terminal's encoding)"
        raise typer.BadParameter(msg, param_hint="'--reason'") from None
    if waiter is not None and is_execution_arn(what):
        raise typer.BadParameter("only with a payload id", param_hint="'--waiter'")
    releases = _select(target.dependencies, target.joins, what, waiter)
    pending = [item for item in releases if item.row.notified_at is None]
    if not dry_run and pending and not yes:
        _confirm(what, len(pending))
    now = utcnow()
    released_by = None if dry_run or not pending else _caller(target)
    releaser = Releaser(target, released_by=released_by, now=now)
    for item in releases:
        releaser.run(item, reason=reason, dry_run=dry_run)
    _show(what, releases, reason=reason, dry_run=dry_run, json_output=json_output)
    if not any(item.outcome in (Outcome.RELEASED, Outcome.WOULD_RELEASE) for item in releases):
        raise typer.Exit(NOTHING_RELEASED_EXIT)


def is_execution_arn(text: str) -> bool:
    """True for a Step Functions execution ARN (Standard or Express)."""
    parts = text.split(":")
    return (
        len(parts) >= 8
        and parts[0] == "arn"
        and parts[2] == "states"
        and (parts[5] in {"execution", "express"})
    )


def _select(
    dependencies: DependencyTable, joins: JoinStore, what: str, waiter: str | None
) -> list[Release]:
    """The rows ``what`` names: a parent's waiter and join rows, or a payload's one waiter."""
    if is_execution_arn(what):
        rows = _rows_of_parent(dependencies, what)
        if not rows:
            raise PayloadNotFoundError(f"{what} (no waiter row names this parent execution)")
        return [Release(row) for row in rows]
    releases = _waits_on(dependencies, joins, what)
    if not releases:
        raise PayloadNotFoundError(f"{what} (nothing waits on it)")
    names = ", ".join(item.waiter for item in releases)
    if waiter is not None:
        chosen = [item for item in releases if item.waiter == waiter]
        if not chosen:
            raise PayloadNotFoundError(f"{what}: no waiter {waiter} (waiters: {names})")
        return chosen
    if len(releases) > 1:
        msg = f"{len(releases)} waiters wait on {what}: pick one with --waiter ({names})"
        raise AmbiguousWaiterError(msg)
    return releases


def _waits_on(dependencies: DependencyTable, joins: JoinStore, payload_id: str) -> list[Release]:
    """A payload's task-token waiters, and the join row of each join it is a member of."""
    releases: list[Release] = []
    for row in dependencies.rows(payload_id):
        if isinstance(row, WaiterItem):
            releases.append(Release(row))
        elif isinstance(row, MembershipItem):
            # A join holds one token for all its members: its own row is released.
            join = joins.get(row.join_id)
            if join is not None:
                releases.append(Release(join))
    return releases


def _rows_of_parent(dependencies: DependencyTable, arn: str) -> list[WaiterItem | JoinItem]:
    """Waiter and join rows that name ``arn`` as their parent (a filtered ``Scan``).

    No index reads rows by parent; an operator tool may scan, as ``graph`` does.
    """
    found = [
        row
        for page in dependencies.scan_pages(parent_execution=arn)
        for row in page
        if isinstance(row, WaiterItem | JoinItem)
    ]
    found.sort(key=lambda row: (row.created_at, row.payload_id))
    return found


def _confirm(what: str, count: int) -> None:
    if not sys.stdin.isatty():
        raise typer.BadParameter(
            "no terminal to confirm on: pass --yes (or --dry-run first)", param_hint="'--yes'"
        )
    typer.confirm(
        f"fail the parent of {count} wait(s) on {what} with DependencyReleased?", abort=True
    )


def _caller(target: Target) -> str | None:
    """The caller's ARN for the cause (``GetCallerIdentity`` needs no permission), or None."""
    try:
        return str(target.client("sts").get_caller_identity()["Arn"])
    except (ClientError, BotoCoreError, KeyError):
        return None


def release_cause(
    row: WaiterItem | JoinItem, *, reason: str, released_by: str | None, released_at: datetime
) -> str:
    """The ``SendTaskFailure`` cause: JSON, at most 32,768 characters."""
    fields: dict[str, Any] = {"payload_id": row.payload_id}
    if isinstance(row, JoinItem):
        fields["join_id"] = row.join_id
    if released_by is not None:
        fields["released_by"] = released_by
    fields["reason"] = clip(reason, MAX_REASON_CHARS)
    fields["released_at"] = released_at.isoformat()
    return fit_json(fields, ["reason", "payload_id", "released_by"], SFN_MAX_CAUSE_CHARS, len)


class Releaser:
    """Sends ``DependencyReleased`` to each row's tokens and marks them answered."""

    def __init__(self, target: Target, *, released_by: str | None, now: datetime) -> None:
        self.target = target
        self.dependencies = target.dependencies
        self.joins = target.joins
        self.sfn = target.client("stepfunctions")
        self.released_by = released_by
        self.now = now
        # Parents this run failed: their other tokens closed with them.
        self.failed_parents: set[str] = set()

    def run(self, item: Release, *, reason: str, dry_run: bool) -> None:
        """Release one row (or say what would happen), recording the outcome on ``item``."""
        row = item.row
        if row.notified_at is not None:
            _answered(item, row)
            return
        if isinstance(row, JoinItem) and not row.unanswered():
            _answered(item, row)
            return
        item.cause = release_cause(
            row, reason=reason, released_by=self.released_by, released_at=self.now
        )
        if dry_run:
            item.outcome = Outcome.WOULD_RELEASE
            return
        mark = ReleaseMark(
            reason=clip(reason, MAX_REASON_CHARS) or reason,
            cause=item.cause,
            released_by=self.released_by,
            at=self.now,
        )
        if isinstance(row, JoinItem):
            self._release_join(item, row, mark)
            return
        code = self._fail(row.task_token, item.cause)
        if code is not None:
            self._closed(item, code, mark)
            return
        if row.parent_execution:
            self.failed_parents.add(row.parent_execution)
        self._mark(item, mark)

    def _fail(self, token: str, cause: str) -> str | None:
        """``SendTaskFailure``; the code when the token had closed, else None."""
        try:
            self.sfn.send_task_failure(
                taskToken=token, error=DependencyError.RELEASED.value, cause=cause
            )
        except ClientError as exc:
            code = error_code(exc)
            if code not in PARENT_GONE_CODES:
                raise
            return code
        return None

    def _release_join(self, item: Release, join: JoinItem, mark: ReleaseMark) -> None:
        """Fail each token of the join not answered yet; a token added meanwhile waits on.

        A retried parent's send may add a token at any moment: it is not one this
        release read, so it is neither failed nor marked, and the tracker answers
        it when the join is decided.
        """
        outcome = _outcome_of(mark.reason)
        released, closed = 0, []
        for token in join.unanswered().values():
            code = self._fail(token, mark.cause)
            if code is not None:
                closed.append(code)
                continue
            released += 1
            self.joins.mark_answered(join.join_id, token, outcome, over_gone=True)
        if released and join.parent_execution:
            self.failed_parents.add(join.parent_execution)
        if released:
            self.joins.mark_released(join, mark, outcome=outcome)
            item.outcome = Outcome.RELEASED
            if join.on_parent_gone == ParentGone.CANCEL:
                self._cancel(join, mark)
            return
        current = self.joins.get(join.join_id)
        if current is not None and (current.notified_at is not None or current.answered):
            _answered(item, current)
            return
        item.outcome, item.detail = Outcome.TOKEN_CLOSED, ", ".join(closed)

    def _cancel(self, join: JoinItem, mark: ReleaseMark) -> None:
        """Stop the members of a released join that cancels with its parent.

        The stack's process function does it: one ``join_cancel`` message on the
        process queue (joins/cancellation.py), as when the parent's execution ends.
        """
        bound = self.target.app.settings.model_copy(
            update={"process_queue_url": self.target.process_queue_url}
        )
        cancellation = App(bound, self.target.client).cancellation
        if cancellation is not None:
            cancellation.begin(join.join_id, released_cause(join.parent_execution, mark.reason))

    def _closed(self, item: Release, code: str, mark: ReleaseMark) -> None:
        """The token was closed: answered by the tracker meanwhile, or the parent ended."""
        current = self.dependencies.get_row(item.row.payload_id, item.row.waiter_id)
        if isinstance(current, WaiterItem) and current.notified_at is not None:
            _answered(item, current)
            return
        parent = item.row.parent_execution
        if parent is not None and parent in self.failed_parents:
            # An earlier token of this parent failed it: this wait ended with it.
            self._mark(item, mark, note=f"its parent had already failed ({code})")
            return
        item.outcome, item.detail = Outcome.TOKEN_CLOSED, code

    def _mark(self, item: Release, mark: ReleaseMark, *, note: str | None = None) -> None:
        """Mark the waiter told and released; a row the tracker told meanwhile is reported."""
        row: Row | None = item.row
        retention = Settings.model_fields["waiter_retention_days"].default
        for _ in range(_MARK_ATTEMPTS):
            if not isinstance(row, WaiterItem):
                break
            if row.notified_at is not None and not (row.notify_outcome or "").startswith(
                PARENT_GONE_OUTCOME
            ):
                _answered(item, row)
                return
            if self.dependencies.mark_released(
                row, outcome=_outcome_of(mark.reason), release=mark, retention_days=retention
            ):
                item.outcome, item.detail = Outcome.RELEASED, note
                return
            found = self.dependencies.get_row(item.row.payload_id, item.row.waiter_id)
            row = None if found is None else typed_row(found)
        # Sent, so released; the row could not be marked (changed again and again, or gone).
        item.outcome, item.detail = Outcome.RELEASED, "the row could not be marked"


def _outcome_of(reason: str) -> str:
    """``notify_outcome`` of a released row (``waiters`` shows it): one short line."""
    return f"{RELEASED_OUTCOME}:{render.one_line(reason, _OUTCOME_REASON_CHARS)}"


def _answered(item: Release, row: WaiterItem | JoinItem) -> None:
    item.outcome = Outcome.ALREADY_ANSWERED
    item.detail = row.notify_outcome


_OUTCOME_TEXT = {
    Outcome.RELEASED: "[red]released[/]",
    Outcome.WOULD_RELEASE: "[yellow]would release[/]",
    Outcome.ALREADY_ANSWERED: "already answered",
    Outcome.TOKEN_CLOSED: "token closed",
}


def _show(
    what: str, releases: list[Release], *, reason: str, dry_run: bool, json_output: bool
) -> None:
    released = sum(item.outcome is Outcome.RELEASED for item in releases)
    if json_output:
        render.emit_json(
            {
                "target": what,
                "dry_run": dry_run,
                "error": DependencyError.RELEASED.value,
                "reason": reason,
                "released": released,
                "waiters": [item.to_json() for item in releases],
            }
        )
        return
    shown = sum(item.outcome is Outcome.WOULD_RELEASE for item in releases) if dry_run else released
    verb = "would release" if dry_run else "released"
    table = Table(title=f"{verb} {shown} wait(s) of {render.escape_line(what)}")
    for column in ("waiter", "waiting on", "parent execution", "outcome"):
        table.add_column(column)
    for item in releases:
        parent = item.row.parent_execution
        outcome = _OUTCOME_TEXT[item.outcome] if item.outcome is not None else "—"
        if item.detail:
            outcome += f": {render.clipped(item.detail, 60)}"
        table.add_row(
            render.plain(item.waiter),
            render.plain(item.row.payload_id),
            render.plain(execution_label(parent) if parent else None),
            outcome,
        )
    render.print_table(render.stdout(), table, keys=(0, 1, 2))
