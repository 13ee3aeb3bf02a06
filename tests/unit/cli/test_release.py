"""``release``: fail a waiting parent with ``DependencyReleased``, once, and mark its row told."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest
from botocore.exceptions import ClientError
from typer.testing import CliRunner

from dependency_tracker.core.enums import DependencyError, PayloadState
from dependency_tracker.core.errors import PayloadNotFoundError
from dependency_tracker.core.limits import SFN_MAX_CAUSE_CHARS
from dependency_tracker.core.tokens import redact_token
from dependency_tracker.table.items import Resolution, WaiterItem
from dependency_tracker.table.join_items import JoinItem
from dependency_tracker_cli.__main__ import app
from dependency_tracker_cli.commands.release import NOTHING_RELEASED_EXIT, AmbiguousWaiterError
from dependency_tracker_cli.target import Target
from tests.conftest import payload_id
from tests.unit.cli.rows import TOKEN_PREFIX, join, token, waiter

if TYPE_CHECKING:
    from collections.abc import Callable

    from typer.testing import Result

    from tests.conftest import Aws

PARENT = "arn:aws:states:us-east-1:123456789012:execution:deptrack-wait-for-dependencies:p-1"
OTHER = "arn:aws:states:us-east-1:123456789012:execution:deptrack-wait-for-dependencies:p-2"
DEP = payload_id("dep")


class FakeSfn:
    """Records ``SendTaskFailure`` calls; refuses the tokens in ``closed`` as AWS does."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.closed: dict[str, str] = {}
        self.after_send: Callable[[str], None] | None = None

    def send_task_failure(self, **request: Any) -> dict[str, Any]:
        code = self.closed.get(request["taskToken"])
        if code is not None:
            error = {"Error": {"Code": code, "Message": "Task Timed Out"}}
            raise ClientError(error, "SendTaskFailure")  # type: ignore[arg-type]
        self.sent.append(request)
        if self.after_send is not None:
            self.after_send(request["taskToken"])
        return {}


@pytest.fixture
def sfn(monkeypatch: pytest.MonkeyPatch) -> FakeSfn:
    """Step Functions as the CLI sees it: the fake; every other service: moto."""
    fake = FakeSfn()
    real = Target.client

    def client(self: Target, service: str) -> Any:
        return fake if service == "stepfunctions" else real(self, service)

    monkeypatch.setattr(Target, "client", client)
    return fake


def release(*args: str) -> Result:
    return CliRunner().invoke(app, ["release", *args])


def stored(aws: Aws, row: WaiterItem | JoinItem) -> WaiterItem | JoinItem:
    current = aws.dependencies.get_row(row.payload_id, row.waiter_id)
    assert isinstance(current, WaiterItem | JoinItem)
    return current


def test_a_payload_s_one_waiter_is_failed_with_the_reason_and_marked_told(
    aws: Aws, sfn: FakeSfn
) -> None:
    # GIVEN one parent waiting on a payload
    row = waiter(DEP, "t1", parent="mosaic-1", execution=PARENT)
    assert aws.dependencies.register(row)
    # WHEN an operator releases it
    result = release(DEP, "--reason", "tile is never coming", "--yes", "--json")
    # THEN the parent's token gets DependencyReleased with a JSON cause naming the payload
    assert result.exit_code == 0, result.output
    (sent,) = sfn.sent
    assert (sent["taskToken"], sent["error"]) == (token("t1"), "DependencyReleased")
    cause = json.loads(sent["cause"])
    assert cause["payload_id"] == DEP
    assert cause["reason"] == "tile is never coming"
    assert cause["released_by"].startswith("arn:aws:")
    assert "released_at" in cause
    # AND the row is marked as the callback flow marks a told row, released, no longer waiting
    after = stored(aws, row)
    assert after.notified_at is not None
    assert after.notify_outcome == "RELEASED:tile is never coming"
    assert after.workflow_state is PayloadState.ABORTED
    assert (after.error, after.cause) == ("DependencyReleased", sent["cause"])
    assert isinstance(after, WaiterItem)
    assert after.error_name is DependencyError.RELEASED
    # AND the output says so, naming the waiter by its hash only
    shown = json.loads(result.stdout)
    assert shown["released"] == 1
    assert [(w["waiter"], w["outcome"]) for w in shown["waiters"]] == [
        (redact_token(token("t1")), "released")
    ]
    assert TOKEN_PREFIX not in result.output
    # AND the payload ending later leaves the row as the release left it (nothing to send)
    resolution = Resolution(state=PayloadState.SUCCEEDED, execution_arn="arn:done")
    assert aws.dependencies.resolve(DEP, row.waiter_id, resolution) is False
    app_ = aws.app()
    assert app_.callback.handle(stored(aws, row)).value == "already_notified"


def test_several_waiters_need_waiter_and_it_picks_one(aws: Aws, sfn: FakeSfn) -> None:
    # GIVEN two parents waiting on one payload
    first, second = waiter(DEP, "t1", execution=PARENT), waiter(DEP, "t2", execution=OTHER)
    assert aws.dependencies.register(first)
    assert aws.dependencies.register(second)
    # WHEN released without --waiter
    refused = release(DEP, "--reason", "r", "--yes")
    # THEN it is refused with exit 2, listing both, and nothing is sent
    assert refused.exit_code == AmbiguousWaiterError.exit_code == 2
    assert str(redact_token(token("t1"))) in refused.stderr
    assert str(redact_token(token("t2"))) in refused.stderr
    assert sfn.sent == []
    # WHEN one is named as `waiters` names it
    picked = release(DEP, "--waiter", str(redact_token(token("t2"))), "--reason", "r", "--yes")
    # THEN only that one is released
    assert picked.exit_code == 0, picked.output
    assert [request["taskToken"] for request in sfn.sent] == [token("t2")]
    assert stored(aws, first).notified_at is None


def test_a_parent_arn_releases_every_wait_of_that_parent_only(aws: Aws, sfn: FakeSfn) -> None:
    # GIVEN a Map parent waiting on two payloads (one already told), and another parent
    mine = [waiter(payload_id(f"d{n}"), f"t{n}", execution=PARENT) for n in (1, 2)]
    told = waiter(payload_id("d3"), "t3", execution=PARENT, notified=True)
    theirs = waiter(payload_id("d1"), "x1", execution=OTHER)
    for row in (*mine, told, theirs):
        assert aws.dependencies.register(row)
    # AND the second token closes when the first fails the parent (as a Map iteration's does)
    sfn.after_send = lambda sent: sfn.closed.update({token("t2"): "TaskTimedOut"})
    # WHEN the parent execution is released
    result = release(PARENT, "--reason", "giving up", "--yes", "--json")
    # THEN its open waits are released (the closed one with its parent), the told one is not
    assert result.exit_code == 0, result.output
    outcomes = {w["payload_id"]: w["outcome"] for w in json.loads(result.stdout)["waiters"]}
    assert outcomes == {
        payload_id("d1"): "released",
        payload_id("d2"): "released",
        payload_id("d3"): "already_answered",
    }
    assert [request["taskToken"] for request in sfn.sent] == [token("t1")]
    assert all(stored(aws, row).notify_outcome == "RELEASED:giving up" for row in mine)
    assert stored(aws, told).notify_outcome == "SENT:PROCESSING"
    # AND the other parent's wait is untouched
    assert stored(aws, theirs).notified_at is None


def test_a_wait_already_answered_is_reported_and_exits_3(aws: Aws, sfn: FakeSfn) -> None:
    # GIVEN a waiter the tracker already told
    row = waiter(DEP, "t1", state=PayloadState.SUCCEEDED, notified=True)
    assert aws.dependencies.register(row)
    # WHEN it is released
    result = release(DEP, "--reason", "r", "--yes")
    # THEN nothing is sent, the row is as it was, and the exit code says nothing was released
    assert result.exit_code == NOTHING_RELEASED_EXIT == 3
    assert "already answered" in result.stdout
    assert sfn.sent == []
    assert stored(aws, row).notify_outcome == "SENT:SUCCEEDED"


def test_a_closed_token_is_reported_not_a_crash(aws: Aws, sfn: FakeSfn) -> None:
    # GIVEN a waiter whose parent timed out (Step Functions refuses its token)
    row = waiter(DEP, "t1", execution=PARENT)
    assert aws.dependencies.register(row)
    sfn.closed[token("t1")] = "TaskTimedOut"
    # WHEN it is released
    result = release(DEP, "--reason", "r", "--yes", "--json")
    # THEN that is the outcome, the row is left for the tracker, exit 3
    assert result.exit_code == NOTHING_RELEASED_EXIT, result.output
    (shown,) = json.loads(result.stdout)["waiters"]
    assert (shown["outcome"], shown["detail"]) == ("token_closed", "TaskTimedOut")
    assert stored(aws, row).notified_at is None


def test_the_tracker_answering_meanwhile_is_reported_already_answered(
    aws: Aws, sfn: FakeSfn
) -> None:
    # GIVEN a waiter the tracker tells between the operator's read and mark
    row = waiter(DEP, "t1")
    assert aws.dependencies.register(row)

    def tracker_answers(_: str) -> None:
        aws.dependencies.mark_notified(DEP, row.waiter_id, outcome="SENT:FAILED", retention_days=1)

    sfn.after_send = tracker_answers
    # WHEN it is released
    result = release(DEP, "--reason", "r", "--yes", "--json")
    # THEN the conditional mark loses and says so; the tracker's mark stays
    assert result.exit_code == NOTHING_RELEASED_EXIT, result.output
    (shown,) = json.loads(result.stdout)["waiters"]
    assert (shown["outcome"], shown["detail"]) == ("already_answered", "SENT:FAILED")
    assert stored(aws, row).notify_outcome == "SENT:FAILED"


def test_the_tracker_s_refused_answer_after_the_release_is_replaced_by_it(
    aws: Aws, sfn: FakeSfn
) -> None:
    # GIVEN the tracker answering right after the release, refused (the token is closed)
    row = waiter(DEP, "t1")
    assert aws.dependencies.register(row)

    def tracker_refused(_: str) -> None:
        aws.dependencies.mark_notified(
            DEP, row.waiter_id, outcome="PARENT_GONE:TaskTimedOut", retention_days=1
        )

    sfn.after_send = tracker_refused
    # WHEN it is released
    result = release(DEP, "--reason", "r", "--yes")
    # THEN the release it was is recorded
    assert result.exit_code == 0, result.output
    assert stored(aws, row).notify_outcome == "RELEASED:r"


def test_a_join_is_released_once_by_its_join_row(aws: Aws, sfn: FakeSfn) -> None:
    # GIVEN a join on two members, its parent waiting with one token
    row, members = join("j1", [payload_id("m1"), payload_id("m2")], execution=PARENT)
    assert aws.dependencies.register(row)
    for member in members:
        assert aws.dependencies.register(member)
    # WHEN one member's waiter is released
    result = release(payload_id("m1"), "--reason", "r", "--yes", "--json")
    # THEN the join's token gets one failure, and the join row is marked told
    assert result.exit_code == 0, result.output
    assert [request["taskToken"] for request in sfn.sent] == [token("j1")]
    cause = json.loads(sfn.sent[0]["cause"])
    assert (cause["payload_id"], cause["join_id"]) == ("join#j1", "j1")
    after = stored(aws, row)
    assert after.notify_outcome == "RELEASED:r"
    # AND the join stays PROCESSING (a retried parent may take it over), members untouched
    assert after.workflow_state is PayloadState.PROCESSING
    assert all(aws.dependencies.get_row(m.payload_id, m.waiter_id) == m for m in members)
    # WHEN its parent is released too
    again = release(PARENT, "--reason", "r", "--yes")
    # THEN nothing more is sent
    assert again.exit_code == NOTHING_RELEASED_EXIT
    assert len(sfn.sent) == 1


def test_dry_run_shows_what_would_be_released_and_changes_nothing(aws: Aws, sfn: FakeSfn) -> None:
    # GIVEN a waiter
    row = waiter(DEP, "t1", execution=PARENT)
    assert aws.dependencies.register(row)
    # WHEN released with --dry-run (no --yes needed)
    result = release(PARENT, "--reason", "r", "--dry-run")
    # THEN it is listed, nothing is sent, the row is unchanged
    assert result.exit_code == 0, result.output
    assert "would release 1 wait(s)" in result.stdout
    assert sfn.sent == []
    assert stored(aws, row) == row


def test_a_huge_reason_still_gives_a_cause_within_the_limit(aws: Aws, sfn: FakeSfn) -> None:
    assert aws.dependencies.register(waiter(DEP, "t1"))
    result = release(DEP, "--reason", "x" * 100_000, "--yes")
    assert result.exit_code == 0, result.output
    cause = sfn.sent[0]["cause"]
    assert len(cause) <= SFN_MAX_CAUSE_CHARS
    assert json.loads(cause)["reason"].endswith("...[truncated]")


def test_unknown_targets_exit_5_and_no_terminal_needs_yes(aws: Aws, sfn: FakeSfn) -> None:
    # GIVEN nothing waits on anything
    # WHEN a payload or a parent nobody waits on is released
    # THEN exit 5, as `waiters` for an unknown id
    assert release("no/such/id", "--reason", "r", "--yes").exit_code == 5
    assert release(OTHER, "--reason", "r", "--yes").exit_code == PayloadNotFoundError.exit_code
    # AND without --yes and no terminal to ask on, nothing is sent (exit 2)
    assert aws.dependencies.register(waiter(DEP, "t1"))
    unconfirmed = release(DEP, "--reason", "r")
    assert unconfirmed.exit_code == 2
    assert "--yes" in unconfirmed.output
    assert sfn.sent == []
