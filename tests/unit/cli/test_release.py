"""``release``: fail a waiting parent with ``DependencyReleased``, once, and mark its row told.

Every token is a real one: a parent execution on moto waits on it with
``.waitForTaskToken``, and the outcome is read back from Step Functions (the
parent's status, error, cause and history) and from the dependency table.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import pytest
from botocore.stub import ANY, Stubber
from typer.testing import CliRunner

from dependency_tracker.answers.actions import CallbackAction
from dependency_tracker.core.enums import DependencyError, PayloadState
from dependency_tracker.core.errors import PayloadNotFoundError
from dependency_tracker.core.limits import SFN_MAX_CAUSE_CHARS
from dependency_tracker.core.tokens import redact_token
from dependency_tracker.joins.rows import JoinItem
from dependency_tracker.payloads.model import ProcessPayload
from dependency_tracker.table.items import Resolution, WaiterItem, waiter_id_for
from dependency_tracker.waits.process import ProcessAction
from dependency_tracker_cli.__main__ import app
from dependency_tracker_cli.commands.release import NOTHING_RELEASED_EXIT, AmbiguousWaiterError
from dependency_tracker_cli.target import Target
from tests.conftest import ROLE_ARN, payload, payload_id, wait_until
from tests.harness import create_parent, parent_definition, queue_bodies, start_parent
from tests.unit.cli.rows import join, waiter

if TYPE_CHECKING:
    from collections.abc import Callable

    from typer.testing import Result

    from tests.conftest import Aws

OTHER = "arn:aws:states:us-east-1:123456789012:execution:deptrack-wait-for-dependencies:p-2"
DEP = payload_id("dep")
SEND_TASK_FAILURE = "SendTaskFailure"

Row = TypeVar("Row", WaiterItem, JoinItem)


@dataclass(frozen=True)
class Wait:
    """A real parent execution waiting on a real task token."""

    execution: str
    token: str


class Parents:
    """Parent executions on moto that publish their task token to the process queue."""

    def __init__(self, aws: Aws) -> None:
        self.aws = aws
        self.machine = create_parent(aws)

    def create(self, name: str, definition: dict[str, Any]) -> str:
        """Register another parent state machine; returns its ARN."""
        created = self.aws.sfn.create_state_machine(
            name=name, roleArn=ROLE_ARN, definition=json.dumps(definition)
        )
        return str(created["stateMachineArn"])

    def start(self, name: str, *, machine: str | None = None, tokens: int = 1) -> list[Wait]:
        """Start a parent and return its waits once all ``tokens`` of them are published."""
        execution = start_parent(self.aws, machine or self.machine, payload(name), name)
        found: list[str] = []

        def published() -> bool:
            found.extend(
                body["callback"]["task_token"]
                for body in queue_bodies(self.aws)
                if body["callback"]["parent_execution"] == execution
            )
            return len(found) >= tokens

        wait_until(published, timeout=10)
        return [Wait(execution, token) for token in found]

    def wait(self, name: str) -> Wait:
        """One parent waiting with one token."""
        (only,) = self.start(name)
        return only

    def status(self, wait: Wait) -> str:
        """The parent's status now (a parent nobody answered is still ``RUNNING``)."""
        return str(self.aws.sfn.describe_execution(executionArn=wait.execution)["status"])

    def ended(self, wait: Wait) -> dict[str, Any]:
        """``DescribeExecution`` of the parent once it has stopped."""
        return self.aws.wait_for_execution(wait.execution, timeout=10)

    def task_failures(self, wait: Wait) -> list[dict[str, Any]]:
        """The ``TaskFailed`` details of the parent's history: the failures it accepted."""
        events = self.aws.sfn.get_execution_history(executionArn=wait.execution)["events"]
        return [e["taskFailedEventDetails"] for e in events if e["type"] == "TaskFailed"]

    def released(self, wait: Wait) -> dict[str, Any]:
        """The parent ended FAILED by one ``DependencyReleased``; returns its parsed cause."""
        described = self.ended(wait)
        assert (described["status"], described["error"]) == ("FAILED", "DependencyReleased")
        (failure,) = self.task_failures(wait)
        assert (failure["error"], failure["cause"]) == ("DependencyReleased", described["cause"])
        cause: dict[str, Any] = json.loads(described["cause"])
        return cause


@dataclass
class CliSfn:
    """The CLI's own Step Functions client (real, on moto), watched through botocore's events."""

    # Every SendTaskFailure the CLI asked for, whatever Step Functions answered.
    requests: list[dict[str, Any]] = field(default_factory=list)
    # Run with the token after each SendTaskFailure that Step Functions accepted.
    after_send: Callable[[str], None] | None = None
    # Configures a Stubber on the client (one test only: see its comment).
    stub: Callable[[Stubber], None] | None = None
    stubbers: list[Stubber] = field(default_factory=list)
    _clients: list[Any] = field(default_factory=list)

    @property
    def tokens(self) -> list[str]:
        """The tokens the CLI sent a failure to, in order."""
        return [request["taskToken"] for request in self.requests]

    def attach(self, client: Any) -> None:
        """Watch ``client`` (once): record requests, run ``after_send`` after accepted ones."""
        if any(seen is client for seen in self._clients):
            return
        self._clients.append(client)

        def record(params: dict[str, Any], **_: Any) -> None:
            self.requests.append(dict(params))

        def answered(http_response: Any, **_: Any) -> None:
            if self.after_send is not None and http_response.status_code < 300:
                self.after_send(self.requests[-1]["taskToken"])

        client.meta.events.register(f"provide-client-params.states.{SEND_TASK_FAILURE}", record)
        client.meta.events.register(f"after-call.states.{SEND_TASK_FAILURE}", answered)
        if self.stub is not None:
            stubber = Stubber(client)
            self.stub(stubber)
            stubber.activate()
            self.stubbers.append(stubber)


@pytest.fixture
def sfn(monkeypatch: pytest.MonkeyPatch) -> CliSfn:
    """Every client the CLI makes is real (moto); its Step Functions client is watched."""
    watched = CliSfn()
    real = Target.client

    def client(self: Target, service: str) -> Any:
        made = real(self, service)
        if service == "stepfunctions":
            watched.attach(made)
        return made

    monkeypatch.setattr(Target, "client", client)
    return watched


@pytest.fixture
def parents(aws: Aws) -> Parents:
    """Real waiting parents on this test's moto account."""
    return Parents(aws)


def release(*args: str) -> Result:
    return CliRunner().invoke(app, ["release", *args])


def holding(row: Row, wait: Wait) -> Row:
    """``row`` with the real token and execution of ``wait``."""
    update: dict[str, Any] = {"task_token": wait.token, "parent_execution": wait.execution}
    if isinstance(row, WaiterItem):
        update["waiter_id"] = waiter_id_for(wait.token)
    return row.model_copy(update=update)


def stored(aws: Aws, row: WaiterItem | JoinItem) -> WaiterItem | JoinItem:
    current = aws.dependencies.get_row(row.payload_id, row.waiter_id)
    assert isinstance(current, WaiterItem | JoinItem)
    return current


def test_a_payload_s_one_waiter_is_failed_with_the_reason_and_marked_told(
    aws: Aws, sfn: CliSfn, parents: Parents
) -> None:
    # GIVEN one parent waiting on a payload
    wait = parents.wait("p-1")
    row = holding(waiter(DEP, "t1", parent="mosaic-1"), wait)
    assert aws.dependencies.register(row)
    # WHEN an operator releases it
    result = release(DEP, "--reason", "tile is never coming", "--yes", "--json")
    # THEN the parent fails with DependencyReleased and a JSON cause naming the payload
    assert result.exit_code == 0, result.output
    assert sfn.tokens == [wait.token]
    cause = parents.released(wait)
    assert cause["payload_id"] == DEP
    assert cause["reason"] == "tile is never coming"
    assert cause["released_by"].startswith("arn:aws:")
    assert "released_at" in cause
    # AND the row is marked as the callback flow marks a told row, released, no longer waiting
    after = stored(aws, row)
    assert after.notified_at is not None
    assert after.notify_outcome == "RELEASED:tile is never coming"
    assert after.workflow_state is PayloadState.ABORTED
    assert after.error == "DependencyReleased"
    assert after.cause is not None
    assert json.loads(after.cause) == cause
    assert isinstance(after, WaiterItem)
    assert after.error_name is DependencyError.RELEASED
    # AND the output says so, naming the waiter by its hash only
    shown = json.loads(result.stdout)
    assert shown["released"] == 1
    assert [(w["waiter"], w["outcome"]) for w in shown["waiters"]] == [
        (redact_token(wait.token), "released")
    ]
    assert wait.token not in result.output
    # AND the payload ending later leaves the row as the release left it (nothing to send)
    resolution = Resolution(state=PayloadState.SUCCEEDED, execution_arn="arn:done")
    assert aws.dependencies.resolve(DEP, row.waiter_id, resolution) is False
    app_ = aws.app()
    assert app_.callback.handle(stored(aws, row)) is CallbackAction.ALREADY_NOTIFIED


def test_several_waiters_need_waiter_and_it_picks_one(
    aws: Aws, sfn: CliSfn, parents: Parents
) -> None:
    # GIVEN two parents waiting on one payload
    one, two = parents.wait("p-1"), parents.wait("p-2")
    first, second = holding(waiter(DEP, "t1"), one), holding(waiter(DEP, "t2"), two)
    assert aws.dependencies.register(first)
    assert aws.dependencies.register(second)
    # WHEN released without --waiter
    refused = release(DEP, "--reason", "r", "--yes")
    # THEN it is refused with exit 2, listing both, and nothing is sent
    assert refused.exit_code == AmbiguousWaiterError.exit_code == 2
    assert str(redact_token(one.token)) in refused.stderr
    assert str(redact_token(two.token)) in refused.stderr
    assert sfn.requests == []
    assert (parents.status(one), parents.status(two)) == ("RUNNING", "RUNNING")
    # WHEN one is named as `waiters` names it
    picked = release(DEP, "--waiter", str(redact_token(two.token)), "--reason", "r", "--yes")
    # THEN only that one is released
    assert picked.exit_code == 0, picked.output
    assert sfn.tokens == [two.token]
    parents.released(two)
    assert parents.status(one) == "RUNNING"
    assert stored(aws, first).notified_at is None


def _branches(aws: Aws, count: int) -> dict[str, Any]:
    """A parent whose ``count`` parallel branches each wait on a token (as Map iterations do)."""
    wait = {**parent_definition(aws.queue_url)["States"]["Wait"], "Catch": [], "End": True}
    branch = {"StartAt": "Wait", "States": {"Wait": wait}}
    return {
        "StartAt": "Each",
        "States": {"Each": {"Type": "Parallel", "Branches": [branch] * count, "End": True}},
    }


def test_a_parent_arn_releases_every_wait_of_that_parent_only(
    aws: Aws, sfn: CliSfn, parents: Parents
) -> None:
    # GIVEN a parent waiting on three payloads in parallel branches, the third already told
    machine = parents.create("test-parent-branches", _branches(aws, 3))
    a, b, c = parents.start("p-1", machine=machine, tokens=3)
    aws.sfn.send_task_success(taskToken=c.token, output="{}")
    mine = [holding(waiter(payload_id("d1"), "t1"), a), holding(waiter(payload_id("d2"), "t2"), b)]
    told = holding(waiter(payload_id("d3"), "t3", notified=True), c)
    # AND another parent waiting on one of them
    other = parents.wait("p-2")
    theirs = holding(waiter(payload_id("d1"), "x1"), other)
    for row in (*mine, told, theirs):
        assert aws.dependencies.register(row)

    # AND the first failure ends the parent before the next send (on AWS the failed branch
    # cancels the others soon after; waiting for it makes the order certain here)
    def parent_ends(_: str) -> None:
        parents.ended(a)

    sfn.after_send = parent_ends
    # WHEN the parent execution is released
    result = release(a.execution, "--reason", "giving up", "--yes", "--json")
    # THEN its open waits are released (the closed one with its parent), the told one is not
    assert result.exit_code == 0, result.output
    shown = {w["payload_id"]: w for w in json.loads(result.stdout)["waiters"]}
    assert {pid: w["outcome"] for pid, w in shown.items()} == {
        payload_id("d1"): "released",
        payload_id("d2"): "released",
        payload_id("d3"): "already_answered",
    }
    assert shown[payload_id("d2")]["detail"] == "its parent had already failed (TaskTimedOut)"
    # AND Step Functions took one failure: the second token had closed with its parent
    assert sfn.tokens == [a.token, b.token]
    assert parents.released(a)["payload_id"] == payload_id("d1")
    assert all(stored(aws, row).notify_outcome == "RELEASED:giving up" for row in mine)
    assert stored(aws, told).notify_outcome == "SENT:PROCESSING"
    # AND the other parent's wait is untouched
    assert stored(aws, theirs).notified_at is None
    assert parents.status(other) == "RUNNING"


def test_a_wait_already_answered_is_reported_and_exits_3(
    aws: Aws, sfn: CliSfn, parents: Parents
) -> None:
    # GIVEN a waiter the tracker already told (its parent resumed)
    wait = parents.wait("p-1")
    aws.sfn.send_task_success(taskToken=wait.token, output="{}")
    row = holding(waiter(DEP, "t1", state=PayloadState.SUCCEEDED, notified=True), wait)
    assert aws.dependencies.register(row)
    # WHEN it is released
    result = release(DEP, "--reason", "r", "--yes")
    # THEN nothing is sent, the row is as it was, and the exit code says nothing was released
    assert result.exit_code == NOTHING_RELEASED_EXIT == 3
    assert "already answered" in result.stdout
    assert sfn.requests == []
    assert stored(aws, row).notify_outcome == "SENT:SUCCEEDED"
    assert parents.ended(wait)["status"] == "SUCCEEDED"
    assert parents.task_failures(wait) == []


def _timed_out(aws: Aws, parents: Parents) -> Wait:
    """The parent's ``TimeoutSeconds`` ran out: the task closed with it."""
    machine = parents.create("test-parent-1s", parent_definition(aws.queue_url, timeout_seconds=1))
    wait = parents.start("p-1", machine=machine)[0]
    ended = parents.ended(wait)
    assert (ended["status"], ended["error"]) == ("FAILED", "States.Timeout")
    return wait


def _answered(aws: Aws, parents: Parents) -> Wait:
    """Someone else answered the task first: it is closed."""
    wait = parents.wait("p-1")
    aws.sfn.send_task_success(taskToken=wait.token, output="{}")
    assert parents.ended(wait)["status"] == "SUCCEEDED"
    return wait


def _unreadable(aws: Aws, parents: Parents) -> Wait:
    """A real token cut short (as a damaged row would hold it): Step Functions cannot read it."""
    del aws
    wait = parents.wait("p-1")
    return Wait(wait.execution, wait.token[:-4])


@pytest.mark.parametrize(
    ("close", "code"),
    [(_timed_out, "TaskTimedOut"), (_answered, "TaskTimedOut"), (_unreadable, "InvalidToken")],
    ids=["timed-out", "answered", "unreadable"],
)
def test_a_closed_token_is_reported_not_a_crash(
    aws: Aws,
    sfn: CliSfn,
    parents: Parents,
    close: Callable[[Aws, Parents], Wait],
    code: str,
) -> None:
    # GIVEN a waiter whose token Step Functions refuses
    closed = close(aws, parents)
    row = holding(waiter(DEP, "t1"), closed)
    assert aws.dependencies.register(row)
    # WHEN it is released
    result = release(DEP, "--reason", "r", "--yes", "--json")
    # THEN that is the outcome, the row is left for the tracker, exit 3
    assert result.exit_code == NOTHING_RELEASED_EXIT, result.output
    assert sfn.tokens == [closed.token]
    (shown,) = json.loads(result.stdout)["waiters"]
    assert (shown["outcome"], shown["detail"]) == ("token_closed", code)
    assert stored(aws, row).notified_at is None


def test_a_task_that_no_longer_exists_is_reported_as_closed(
    aws: Aws, sfn: CliSfn, parents: Parents
) -> None:
    # GIVEN a waiter whose task Step Functions no longer has. AWS lists TaskDoesNotExist
    # among SendTaskFailure's errors; moto cannot give it: it raises it only for a consumer
    # error other than a timeout, which nothing in moto sets, and the strict layer answers
    # every closed task with TaskTimedOut. So botocore's Stubber answers this one call.
    wait = parents.wait("p-1")
    row = holding(waiter(DEP, "t1"), wait)
    assert aws.dependencies.register(row)

    def refuse(stubber: Stubber) -> None:
        stubber.add_client_error(
            "send_task_failure",
            service_error_code="TaskDoesNotExist",
            service_message="Task does not exist",
            expected_params={
                "taskToken": wait.token,
                "error": "DependencyReleased",
                "cause": ANY,
            },
        )

    sfn.stub = refuse
    # WHEN it is released
    result = release(DEP, "--reason", "r", "--yes", "--json")
    # THEN the task is reported closed, the row left for the tracker, exit 3
    assert result.exit_code == NOTHING_RELEASED_EXIT, result.output
    (stubber,) = sfn.stubbers
    stubber.assert_no_pending_responses()
    (shown,) = json.loads(result.stdout)["waiters"]
    assert (shown["outcome"], shown["detail"]) == ("token_closed", "TaskDoesNotExist")
    assert stored(aws, row).notified_at is None


def test_the_tracker_answering_meanwhile_is_reported_already_answered(
    aws: Aws, sfn: CliSfn, parents: Parents
) -> None:
    # GIVEN a waiter the tracker marks told between the release's send and its mark
    wait = parents.wait("p-1")
    row = holding(waiter(DEP, "t1"), wait)
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
    # AND the failure the release sent did reach the parent
    parents.released(wait)


def test_the_tracker_s_refused_answer_after_the_release_is_replaced_by_it(
    aws: Aws, sfn: CliSfn, parents: Parents
) -> None:
    # GIVEN the dependency ending right after the release's send, and the tracker's callback
    # flow answering the parent then: refused, since the release closed the token
    wait = parents.wait("p-1")
    row = holding(waiter(DEP, "t1"), wait)
    assert aws.dependencies.register(row)
    actions: list[CallbackAction] = []

    def tracker_answers(_: str) -> None:
        ended = Resolution(state=PayloadState.FAILED, execution_arn="arn:done")
        assert aws.dependencies.resolve(DEP, row.waiter_id, ended)
        actions.append(aws.app().callback.handle(stored(aws, row)))

    sfn.after_send = tracker_answers
    # WHEN it is released
    result = release(DEP, "--reason", "r", "--yes")
    # THEN the tracker found the parent gone, and the release it was is recorded
    assert result.exit_code == 0, result.output
    assert actions == [CallbackAction.PARENT_GONE]
    assert stored(aws, row).notify_outcome == "RELEASED:r"
    parents.released(wait)


def test_a_join_is_released_once_by_its_join_row(aws: Aws, sfn: CliSfn, parents: Parents) -> None:
    # GIVEN a join on two members, its parent waiting with one token
    wait = parents.wait("p-1")
    row, members = join("j1", [payload_id("m1"), payload_id("m2")])
    row = holding(row, wait)
    assert aws.dependencies.register(row)
    for member in members:
        assert aws.dependencies.register(member)
    # WHEN one member's waiter is released
    result = release(payload_id("m1"), "--reason", "r", "--yes", "--json")
    # THEN the join's token gets one failure, and the join row is marked told
    assert result.exit_code == 0, result.output
    assert sfn.tokens == [wait.token]
    cause = parents.released(wait)
    assert (cause["payload_id"], cause["join_id"]) == ("join#j1", "j1")
    after = stored(aws, row)
    assert after.notify_outcome == "RELEASED:r"
    assert isinstance(after, JoinItem)
    assert list(after.answered.values()) == ["RELEASED:r"]
    assert after.released_at is not None
    assert not after.waiting
    # AND the join stays PROCESSING (a retried parent may take it over), members untouched
    assert after.workflow_state is PayloadState.PROCESSING
    assert all(aws.dependencies.get_row(m.payload_id, m.waiter_id) == m for m in members)
    # WHEN its parent is released too
    again = release(wait.execution, "--reason", "r", "--yes")
    # THEN nothing more is sent
    assert again.exit_code == NOTHING_RELEASED_EXIT
    assert sfn.tokens == [wait.token]


def test_dry_run_shows_what_would_be_released_and_changes_nothing(
    aws: Aws, sfn: CliSfn, parents: Parents
) -> None:
    # GIVEN a waiter
    wait = parents.wait("p-1")
    row = holding(waiter(DEP, "t1"), wait)
    assert aws.dependencies.register(row)
    # WHEN released with --dry-run (no --yes needed)
    result = release(wait.execution, "--reason", "r", "--dry-run")
    # THEN it is listed, nothing is sent, the row is unchanged, the parent still waits
    assert result.exit_code == 0, result.output
    assert "would release 1 wait(s)" in result.stdout
    assert sfn.requests == []
    assert stored(aws, row) == row
    assert parents.status(wait) == "RUNNING"


def test_a_huge_reason_still_gives_a_cause_within_the_limit(
    aws: Aws, sfn: CliSfn, parents: Parents
) -> None:
    wait = parents.wait("p-1")
    assert aws.dependencies.register(holding(waiter(DEP, "t1"), wait))
    result = release(DEP, "--reason", "x" * 100_000, "--yes")
    assert result.exit_code == 0, result.output
    assert len(sfn.requests[0]["cause"]) <= SFN_MAX_CAUSE_CHARS
    assert parents.released(wait)["reason"].endswith("...[truncated]")


def test_unknown_targets_exit_5_and_no_terminal_needs_yes(
    aws: Aws, sfn: CliSfn, parents: Parents
) -> None:
    # GIVEN nothing waits on anything
    # WHEN a payload or a parent nobody waits on is released
    # THEN exit 5, as `waiters` for an unknown id
    assert release("no/such/id", "--reason", "r", "--yes").exit_code == 5
    assert release(OTHER, "--reason", "r", "--yes").exit_code == PayloadNotFoundError.exit_code
    # AND without --yes and no terminal to ask on, nothing is sent (exit 2)
    wait = parents.wait("p-1")
    assert aws.dependencies.register(holding(waiter(DEP, "t1"), wait))
    unconfirmed = release(DEP, "--reason", "r")
    assert unconfirmed.exit_code == 2
    assert "--yes" in unconfirmed.output
    assert sfn.requests == []
    assert parents.status(wait) == "RUNNING"


@pytest.mark.parametrize(
    ("reason", "refused"),
    [
        ("tile \u202eevil\u202c 🛰️ 東京 \u0000 nul and\nnewline", False),  # bidi, emoji, NUL
        # Bytes that are not UTF-8 in argv (a Latin-1 terminal) reach Python as lone surrogates
        ("caf\udce9 lone surrogate", True),
    ],
)
def test_an_odd_unicode_reason_gives_a_valid_json_cause_or_a_usage_error(
    aws: Aws, sfn: CliSfn, parents: Parents, reason: str, refused: bool
) -> None:
    wait = parents.wait("p-1")
    assert aws.dependencies.register(holding(waiter(DEP, "t1"), wait))
    result = release(DEP, "--reason", reason, "--yes")
    if refused:
        # a one-line usage error before anything is sent: the parent still waits
        assert result.exit_code == 2, result.output
        assert "not valid UTF-8" in result.output
        assert sfn.requests == []
        assert parents.status(wait) == "RUNNING"
        return
    assert result.exit_code == 0, result.output
    cause = json.loads(sfn.requests[0]["cause"])
    assert (cause["payload_id"], cause["reason"]) == (DEP, reason)
    # moto ends the parent on its execution's thread, after release returned: wait for it
    assert parents.released(wait) == cause


def test_an_empty_reason_is_refused_and_nothing_is_sent(
    aws: Aws, sfn: CliSfn, parents: Parents
) -> None:
    wait = parents.wait("p-1")
    assert aws.dependencies.register(holding(waiter(DEP, "t1"), wait))
    result = release(DEP, "--reason", "   ", "--yes")
    assert result.exit_code == 2, result.output
    assert sfn.requests == []


def test_a_token_a_retried_send_adds_during_a_release_keeps_waiting_and_is_answered(
    aws: Aws, sfn: CliSfn, parents: Parents
) -> None:
    # GIVEN a join held by its parent's first token
    first, retried = parents.wait("p-1"), parents.wait("p-2")
    row, members = join("j1", [payload_id("m1"), payload_id("m2")])
    row = holding(row, first)
    assert aws.dependencies.register(row)
    for member in members:
        assert aws.dependencies.register(member)
    joins = aws.app().joins

    def retry_adds_its_token(token: str) -> None:
        if token == first.token:  # between the release's send and its mark
            assert joins.add_token("j1", retried.token)

    sfn.after_send = retry_adds_its_token
    # WHEN the join is released while the parent's retried send adds its token
    result = release(first.execution, "--reason", "r", "--yes")
    # THEN the first token is failed and marked; the new one is neither
    assert result.exit_code == 0, result.output
    assert sfn.tokens == [first.token]
    parents.released(first)
    after = stored(aws, row)
    assert isinstance(after, JoinItem)
    assert list(after.answered.values()) == ["RELEASED:r"]
    assert list(after.unanswered().values()) == [retried.token]
    assert after.released_at is None  # it waits again: it counts for cycles, stuck, the page
    assert after.waiting
    # AND once the join is decided, the tracker answers the new token with its outcome
    assert joins.decide_join("j1", PayloadState.SUCCEEDED)
    decided = stored(aws, row)
    assert aws.app().callback.handle(decided) is CallbackAction.SENT
    assert parents.ended(retried)["status"] == "SUCCEEDED"
    told = stored(aws, row)
    assert told.notified_at is not None


@pytest.mark.usefixtures("workflows")
def test_a_released_join_is_no_longer_a_wait_for_the_cycle_check(
    aws: Aws, sfn: CliSfn, parents: Parents
) -> None:
    # GIVEN payload X (running) whose parent joins on {m1, m2}, the join then released
    wait = parents.wait("p-1")
    x = payload_id("x")
    aws.states.claim(ProcessPayload.model_validate(payload("x")), None)
    spec = {"task_token": wait.token, "waiter_payload_id": x, "parent_execution": wait.execution}
    process = aws.app().process
    body = json.dumps({"join": spec, "payloads": [payload("m1"), payload("m2")]})
    assert process.handle(process.parse(body, message_id="m-join")) is ProcessAction.JOINED
    assert release(wait.execution, "--reason", "r", "--yes").exit_code == 0
    # WHEN member m1 (running) waits on X
    callback = {"task_token": "token-m1", "waiter_payload_id": payload_id("m1")}
    body = json.dumps({**payload("x"), "callback": callback})
    action = process.handle(process.parse(body, message_id="m-wait"))
    # THEN it is no cycle: nothing waits on m1 any more
    assert action is not ProcessAction.REFUSED
    waiter_row = aws.dependencies.get(x, waiter_id_for("token-m1"))
    assert waiter_row is not None
    assert waiter_row.error_name is not DependencyError.CYCLE
