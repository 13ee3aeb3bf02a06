"""A join's picture over time: steps per end, the recent rate, and when it is decided."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from dependency_tracker.core.enums import PayloadState
from dependency_tracker.joins.outputs import MemberOutcome
from dependency_tracker.joins.rows import JoinItem
from dependency_tracker_cli.ui.joins import JoinProgress
from dependency_tracker_cli.ui.timeline import timeline

START = datetime(2026, 11, 28, 6, 0, tzinfo=UTC)
OK, BAD = PayloadState.SUCCEEDED, PayloadState.FAILED


def row(**fields: object) -> JoinItem:
    return JoinItem.model_validate(
        {
            "payload_id": "join#j",
            "waiter_id": "join",
            "join_id": "j",
            "task_token": "t",
            "quorum": 6,
            "total": 10,
            "registered": 10,
            "created_at": START,
            "updated_at": START,
        }
        | fields
    )


def ended(minutes: float, state: PayloadState) -> MemberOutcome:
    at = START + timedelta(minutes=minutes)
    return MemberOutcome(payload_id=f"m-{minutes}-{state}", state=state, ended_at=at)


def progress(succeeded: int, failed: int, state: str = "PROCESSING") -> JoinProgress:
    return JoinProgress("j", state, succeeded, failed, 10, 6, 10, None, quorum=6)


def test_the_rate_of_the_last_ten_minutes_says_when_the_quorum_is_reached() -> None:
    # GIVEN a 6-of-10 join, 4 members succeeded 1 to 4 minutes after it began, 1 failed
    members = [ended(m, OK) for m in (1, 2, 3, 4)] + [
        ended(2.5, BAD),
        MemberOutcome(payload_id="p"),
    ]
    now = START + timedelta(minutes=5)
    # WHEN its timeline is read at minute 5
    line = timeline(row(), progress(4, 1), members, now)
    # THEN it steps up once per end, and the rate is the last 5 minutes' (the join's age)
    assert (len(line.succeeded), len(line.failed)) == (4, 1)
    assert line.steps(line.succeeded).count(" ") == 2 + 2 * 4 - 1
    assert line.per_minute == 1.0
    # AND at 0.8 successes a minute the 2 still needed come in 2.5 minutes
    assert line.eta == now + timedelta(minutes=2.5)
    assert line.summary == (
        "1.0 members/min over the last 5 min; decided at this rate in ~3 min (06:07 UTC)"
    )


def test_a_deadline_before_the_eta_is_what_decides_it() -> None:
    members = [ended(1, OK)]
    now = START + timedelta(minutes=5)
    line = timeline(row(deadline_at=START + timedelta(minutes=6)), progress(1, 0), members, now)
    assert line.summary.endswith("its deadline decides it at 2026-11-28 06:06 UTC")


def test_nothing_ended_lately_says_so_and_a_decided_join_says_when() -> None:
    now = START + timedelta(hours=2)
    quiet = timeline(row(), progress(1, 0), [ended(1, OK)], now)
    assert quiet.per_minute == 0.0
    assert quiet.summary.endswith("no decision in sight at this rate")
    decided = timeline(
        row(workflow_state="SUCCEEDED", resolved_at=START + timedelta(minutes=3)),
        progress(6, 0, "SUCCEEDED"),
        [ended(m, OK) for m in range(6)],
        now,
    )
    assert decided.end == START + timedelta(minutes=5)  # the last end, after the decision
    assert decided.summary.endswith("decided 2026-11-28 06:03:00 UTC")
