"""The settling decision alone: every state, message and fact, and what it decides.

Each row is one rule of docs/idempotency.md ("States and what a new submission does",
"Leases"); no store or AWS call is involved. The runner's behaviour on real stores is held
by tests/unit/handlers/test_process.py and tests/e2e/test_idempotency.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from dependency_tracker.core.enums import PayloadState
from dependency_tracker.payloads.model import ProcessPayload
from dependency_tracker.payloads.settling import (
    AttemptRun,
    Facts,
    Settle,
    after_record,
    decide,
    lease_expired,
)
from dependency_tracker.payloads.update_state import UpdateAction
from dependency_tracker.table.items import PayloadStateItem
from tests.conftest import payload, payload_id

NOW = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)
CLAIM = "m-claim"  # the message that claimed the attempt
OTHER = "m-other"  # any other message

CLAIMED = PayloadState.CLAIMED
PROCESSING = PayloadState.PROCESSING
SUCCEEDED = PayloadState.SUCCEEDED
FAILED = PayloadState.FAILED
INVALID = PayloadState.INVALID
ABORTED = PayloadState.ABORTED

EXPIRED = {"lease_expired": True}
EXPRESS = {"express": True}


def ran(status: str | None) -> dict[str, Any]:
    """Facts of an expired Standard attempt whose run was described (None: no such run)."""
    description = None if status is None else {"executionArn": "arn:run", "status": status}
    return {"lease_expired": True, "run": AttemptRun(description)}


@dataclass(frozen=True)
class Row:
    """One submission: the message, what it finds, what is known, and what it must decide."""

    why: str
    state: PayloadState | None
    expected: Settle
    message: str | None = OTHER
    attempt: int = 1
    facts: dict[str, Any] = field(default_factory=dict)
    process: dict[str, Any] = field(default_factory=dict)  # replace, replace_if
    refused: bool = False  # AWS refused the attempt's StartExecution


def replace_if(state: PayloadState, attempt: int | None) -> dict[str, Any]:
    expected: dict[str, Any] = {"state": state.value}
    if attempt is not None:
        expected["attempt"] = attempt
    return {"replace": True, "replace_if": expected}


REPLACE = {"replace": True}

ROWS = [
    # ---------------------------------------------------------------- no state yet
    Row("unknown payload: first attempt", None, Settle.START),
    Row("unknown payload, a rerun: claimed like any", None, Settle.START, process=REPLACE),
    Row("unknown payload, a guarded rerun", None, Settle.START, process=replace_if(FAILED, 1)),
    # ---------------------------------------------------------------- settled
    Row("succeeded: replayed", SUCCEEDED, Settle.REPLAY),
    Row("invalid: replayed", INVALID, Settle.REPLAY),
    Row("failed: runs again", FAILED, Settle.START),
    Row("aborted: runs again", ABORTED, Settle.START),
    Row("succeeded, replace: runs again", SUCCEEDED, Settle.START, process=REPLACE),
    Row("invalid, replace: runs again", INVALID, Settle.START, process=REPLACE),
    Row("failed, the claim's message again: replayed", FAILED, Settle.REPLAY, message=CLAIM),
    Row("aborted, the claim's message again", ABORTED, Settle.REPLAY, message=CLAIM),
    Row(
        "succeeded, replace, the claim's message again: replayed",
        SUCCEEDED,
        Settle.REPLAY,
        message=CLAIM,
        process=REPLACE,
    ),
    Row("failed, no message id: runs again", FAILED, Settle.START, message=None),
    Row("succeeded, no message id: replayed", SUCCEEDED, Settle.REPLAY, message=None),
    Row(
        "rerun finds the failure it saw",
        FAILED,
        Settle.START,
        process=replace_if(FAILED, 1),
    ),
    Row(
        "rerun finds the success it saw: runs even a success",
        SUCCEEDED,
        Settle.START,
        process=replace_if(SUCCEEDED, 1),
    ),
    Row(
        "rerun of any attempt in the state it saw",
        FAILED,
        Settle.START,
        attempt=3,
        process=replace_if(FAILED, None),
    ),
    Row(
        "rerun finds a later attempt: superseded",
        FAILED,
        Settle.SUPERSEDED,
        attempt=2,
        process=replace_if(FAILED, 1),
    ),
    Row(
        "rerun finds another state: superseded",
        SUCCEEDED,
        Settle.SUPERSEDED,
        attempt=2,
        process=replace_if(FAILED, 1),
    ),
    Row(
        "rerun's own claim message again: replayed, not superseded",
        SUCCEEDED,
        Settle.REPLAY,
        message=CLAIM,
        attempt=2,
        process=replace_if(FAILED, 1),
    ),
    # ---------------------------------------------------------------- CLAIMED, within the lease
    Row("Standard claim: start it again under its name", CLAIMED, Settle.RESUME_START),
    Row(
        "Standard claim, the claim's message again",
        CLAIMED,
        Settle.RESUME_START,
        message=CLAIM,
    ),
    Row(
        "Standard claim, a rerun finds it live",
        CLAIMED,
        Settle.RESUME_START,
        process=replace_if(FAILED, 1),
    ),
    Row("Express claim, another message: waits", CLAIMED, Settle.WAIT, facts=EXPRESS),
    Row("Express claim, no message id: waits", CLAIMED, Settle.WAIT, message=None, facts=EXPRESS),
    Row(
        "Express claim, the claim's message again: unsettled",
        CLAIMED,
        Settle.UNSETTLED,
        message=CLAIM,
        facts=EXPRESS,
    ),
    Row(
        "Express claim whose start AWS refused: restarted",
        CLAIMED,
        Settle.RESTART,
        facts=EXPRESS,
        refused=True,
    ),
    Row(
        "Express claim whose start AWS refused, the claim's message again: restarted",
        CLAIMED,
        Settle.RESTART,
        message=CLAIM,
        facts=EXPRESS,
        refused=True,
    ),
    # ---------------------------------------------------------------- CLAIMED, past the lease
    Row(
        "Express claim past its lease: taken over",
        CLAIMED,
        Settle.TAKE_OVER,
        facts=EXPRESS | EXPIRED,
    ),
    Row(
        "Express claim past its lease, the claim's message again: taken over",
        CLAIMED,
        Settle.TAKE_OVER,
        message=CLAIM,
        facts=EXPRESS | EXPIRED,
    ),
    Row(
        "Express claim refused, past its lease: taken over",
        CLAIMED,
        Settle.TAKE_OVER,
        facts=EXPRESS | EXPIRED,
        refused=True,
    ),
    Row(
        "Standard claim past its lease, never started: started under its name",
        CLAIMED,
        Settle.RESUME_START,
        facts=ran(None),
    ),
    Row(
        "Standard claim past its lease, its run running",
        CLAIMED,
        Settle.RESUME_START,
        facts=ran("RUNNING"),
    ),
    Row(
        "Standard claim past its lease, its run pending a redrive",
        CLAIMED,
        Settle.RESUME_START,
        facts=ran("PENDING_REDRIVE"),
    ),
    Row(
        "Standard claim past its lease, its run succeeded: recorded",
        CLAIMED,
        Settle.RECORD,
        facts=ran("SUCCEEDED"),
    ),
    Row(
        "Standard claim past its lease, its run failed: recorded",
        CLAIMED,
        Settle.RECORD,
        facts=ran("FAILED"),
    ),
    # ---------------------------------------------------------------- PROCESSING
    Row("running: waits", PROCESSING, Settle.WAIT),
    Row("running, the claim's message again: waits", PROCESSING, Settle.WAIT, message=CLAIM),
    Row("running, replace: waits", PROCESSING, Settle.WAIT, process=REPLACE),
    Row(
        "running, a rerun finds its expected attempt live: waits",
        PROCESSING,
        Settle.WAIT,
        process=replace_if(FAILED, 1),
    ),
    Row("running Express: waits", PROCESSING, Settle.WAIT, facts=EXPRESS),
    Row(
        "Express run past its lease: taken over",
        PROCESSING,
        Settle.TAKE_OVER,
        facts=EXPRESS | EXPIRED,
    ),
    Row(
        "Express run past its lease, the claim's message again: taken over",
        PROCESSING,
        Settle.TAKE_OVER,
        message=CLAIM,
        facts=EXPRESS | EXPIRED,
    ),
    Row(
        "Standard run past its lease, still running: waits",
        PROCESSING,
        Settle.WAIT,
        facts=ran("RUNNING"),
    ),
    Row(
        "Standard run past its lease, pending a redrive: waits",
        PROCESSING,
        Settle.WAIT,
        facts=ran("PENDING_REDRIVE"),
    ),
    Row(
        "Standard run past its lease, gone: taken over",
        PROCESSING,
        Settle.TAKE_OVER,
        facts=ran(None),
    ),
    *[
        Row(
            f"Standard run past its lease, {status.lower()}: recorded",
            PROCESSING,
            Settle.RECORD,
            facts=ran(status),
        )
        for status in ("SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED")
    ],
]


def item(row: Row) -> PayloadStateItem | None:
    if row.state is None:
        return None
    return PayloadStateItem(
        payload_id=payload_id(),
        state=row.state,
        workflow="pass",
        attempt=row.attempt,
        created_at=NOW,
        updated_at=NOW,
        claimed_at=NOW,
        claim_message_id=CLAIM,
        start_refused_at=NOW if row.refused else None,
    )


def submission(row: Row) -> ProcessPayload:
    body = payload()
    body["process"][0] |= row.process
    return ProcessPayload.model_validate(body)


@pytest.mark.parametrize("row", ROWS, ids=[row.why for row in ROWS])
def test_each_submission_settles_as_the_rules_say(row: Row) -> None:
    # GIVEN a payload in the row's state, and the facts gathered about it
    seen, facts = item(row), Facts(**row.facts)
    # WHEN the row's message submits it
    settle = decide(submission(row), row.message, seen, facts)
    # THEN the decision is the row's
    assert settle is row.expected


# What recording a run found ended past its lease answers, and what follows: every answer.
AFTER_RECORD = {
    UpdateAction.RECORDED: Settle.RECOVERED,
    UpdateAction.REPEATED: Settle.RECOVERED,
    UpdateAction.STALE: Settle.READ_AGAIN,
    # Its input is no payload of ours (cannot happen for runs the tracker started).
    UpdateAction.NOT_TERMINAL: Settle.TAKE_OVER,
    UpdateAction.NOT_MANAGED: Settle.TAKE_OVER,
    UpdateAction.UNKNOWN_INPUT: Settle.TAKE_OVER,
}


@pytest.mark.parametrize(("recorded", "expected"), AFTER_RECORD.items())
def test_what_recording_an_ended_run_answers_settles_it(
    recorded: UpdateAction, expected: Settle
) -> None:
    # GIVEN a run found ended past its lease, WHEN recording it answers ``recorded``
    # THEN the payload is settled by it, read again, or taken over
    assert after_record(recorded) is expected


def test_the_tables_reach_every_answer_and_every_decision() -> None:
    # GIVEN the rows above and the answers of recording
    decided = {row.expected for row in ROWS} | set(AFTER_RECORD.values())
    # THEN every answer of update-state has a row, and every decision too
    assert set(AFTER_RECORD) == set(UpdateAction)
    assert decided == set(Settle)


def test_an_expired_standard_attempt_is_not_decided_without_its_run() -> None:
    # GIVEN a Standard attempt past its lease whose run was never described
    row = Row("", PROCESSING, Settle.WAIT)
    # WHEN it is decided THEN the missing fact is a mistake, not a guess
    with pytest.raises(ValueError, match="its run unasked"):
        decide(submission(row), OTHER, item(row), Facts(lease_expired=True))


@pytest.mark.parametrize(
    ("state", "age", "expired"),
    [
        (CLAIMED, 61, True),
        (PROCESSING, 61, True),
        (CLAIMED, 60, False),
        (PROCESSING, 59, False),
        (CLAIMED, None, False),
        (PROCESSING, None, False),
        *[(state, 3600, False) for state in (SUCCEEDED, FAILED, INVALID, ABORTED)],
    ],
)
def test_a_live_attempt_expires_past_its_lease_and_a_settled_one_never(
    state: PayloadState, age: int | None, expired: bool
) -> None:
    # GIVEN an attempt claimed ``age`` seconds ago (None: no claim time) under a 60 s lease
    claimed_at = None if age is None else NOW - timedelta(seconds=age)
    seen = PayloadStateItem(
        payload_id=payload_id(),
        state=state,
        workflow="pass",
        attempt=1,
        created_at=NOW,
        updated_at=NOW,
        claimed_at=claimed_at,
    )
    # WHEN its lease is checked now THEN it has expired only if live and older than 60 s
    assert lease_expired(seen, lease_seconds=60, now=NOW) is expired
