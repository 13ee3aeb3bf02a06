"""``why``: what holds a join, a parent execution or a payload, paged, on moto."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from typer.testing import CliRunner, Result

from dependency_tracker.core.enums import PayloadState
from dependency_tracker.core.errors import PayloadNotFoundError
from dependency_tracker.payloads.model import ProcessPayload
from dependency_tracker_cli.__main__ import app
from tests.conftest import payload, payload_id
from tests.unit.cli.rows import TOKEN_PREFIX, waiter
from tests.unit.cli.rows import register_join as make_join

if TYPE_CHECKING:
    from tests.conftest import Aws

ARN = "arn:aws:states:us-east-1:123456789012:execution:deptrack-wait-for-join:m1"
FAILED = PayloadState.FAILED


def why(*args: str) -> Result:
    return CliRunner().invoke(app, ["why", *args])


def shown(*args: str) -> dict[str, Any]:
    result = why(*args, "--json")
    assert result.exit_code == 0, result.output
    return dict(json.loads(result.stdout))


def running(aws: Aws, body: dict[str, Any]) -> str:
    """A payload claimed (its run starting): CLAIMED."""
    model = ProcessPayload.model_validate(body)
    aws.states.claim(model, None)
    return model.id


def five_holding(aws: Aws) -> list[str]:
    """Join j1 of 6 (quorum 4): 1 succeeded, 2 failed, 1 running, 2 never started."""
    ids = [payload_id(f"m{index}") for index in range(6)]
    aws.finished_payload(payload("m0"), PayloadState.SUCCEEDED)
    for name in ("m1", "m2"):
        aws.finished_payload(
            payload(name), FAILED, error="States.TaskFailed", cause=f"{name} broke"
        )
    running(aws, payload("m3"))
    make_join(
        aws,
        "j1",
        ids,
        quorum=4,
        outcomes={ids[0]: PayloadState.SUCCEEDED, ids[1]: FAILED, ids[2]: FAILED},
        execution=ARN,
        parent="s2/mosaic-1",
    )
    return ids


def test_a_join_lists_its_pending_and_failed_members_page_by_page(aws: Aws) -> None:
    # GIVEN a join of 6: one succeeded, two failed, one running, two never started
    ids = five_holding(aws)
    # WHEN what holds it is asked for, 2 at a time
    first = why("j1", "--limit", "2")
    # THEN the header says the quorum, the counts and that it is undecided
    assert first.exit_code == 0, first.output
    assert "join j1: 4 of 6 needed, 1 succeeded, 2 failed, 3 pending; undecided" in first.stdout
    assert "parent deptrack-wait-for-join:m1 (waiting payload s2/mosaic-1)" in first.stdout
    # AND the first 2 of the 5 holding members are listed, failed ones with their error
    assert "2 of 5 holding dependencies" in first.stdout
    assert ids[1] in first.stdout
    assert ids[2] in first.stdout
    assert "States.TaskFailed: m1 broke" in first.stdout
    assert ids[0] not in first.stdout  # succeeded: it holds nothing
    assert ids[3] not in first.stdout
    token_line = first.stdout.strip().splitlines()[-1]
    assert token_line.startswith("more remain: --next-token ")
    next_token = token_line.split()[-1]
    # AND the next page goes on after them: the running one, then one never started
    second = shown("j1", "--limit", "2", "--next-token", next_token)
    assert [(h["payload_id"], h["state"]) for h in second["holds"]] == [
        (ids[3], "CLAIMED"),
        (ids[4], "not started"),
    ]
    assert second["total_holds"] == 5
    # AND the last page ends the listing
    last = shown("j1", "--limit", "2", "--next-token", second["next_token"])
    assert [h["payload_id"] for h in last["holds"]] == [ids[5]]
    assert last["next_token"] is None


def test_json_shape_of_a_join(aws: Aws) -> None:
    # GIVEN the join of 6
    ids = five_holding(aws)
    # WHEN it is asked for as JSON, by the name `waiters` prints (join:ID)
    data = shown("join:j1")
    # THEN one document says what the target is, the wait and each hold
    assert list(data) == [
        "target",
        "kind",
        "found",
        "payload",
        "waited_on_by",
        "waits",
        "holds",
        "total_holds",
        "next_token",
    ]
    assert (data["kind"], data["found"], data["payload"], data["next_token"]) == (
        "join",
        True,
        None,
        None,
    )
    (wait,) = data["waits"]
    assert {k: wait[k] for k in ("kind", "join_id", "quorum", "total", "state", "answered")} == {
        "kind": "join",
        "join_id": "j1",
        "quorum": 4,
        "total": 6,
        "state": "PROCESSING",
        "answered": False,
    }
    assert (wait["succeeded"], wait["failed"], wait["pending"]) == (1, 2, 3)
    failed = data["holds"][0]
    assert failed["payload_id"] == ids[1]
    assert {k: failed[k] for k in ("state", "row_state", "wait", "error", "cause")} == {
        "state": "FAILED",
        "row_state": "FAILED",
        "wait": "join:j1",
        "error": "States.TaskFailed",
        "cause": "m1 broke",
    }
    assert failed["error_source"] == "payload"
    assert failed["age_seconds"] >= 0
    # AND a member never started has no state, its age from its membership row
    never = data["holds"][3]
    assert (never["state"], never["row_state"], never["error"]) == (
        "not started",
        "PROCESSING",
        None,
    )
    assert never["since"] is not None


def test_a_parent_execution_lists_its_plain_wait_and_its_join_s_members(aws: Aws) -> None:
    # GIVEN a parent waiting on one payload with its own token, and on a join of 2
    dependency = running(aws, payload("dep"))
    assert aws.dependencies.register(waiter(dependency, "t1", execution=ARN))
    members = [payload_id("a"), payload_id("b")]
    make_join(aws, "j2", members, quorum=2, outcomes={members[0]: FAILED}, execution=ARN)
    # AND another parent's wait, which is not this parent's
    assert aws.dependencies.register(waiter(payload_id("other"), "t2", execution=ARN + "x"))
    # WHEN what holds the parent is asked for
    data = shown(ARN)
    # THEN both waits are there, and what holds each
    assert data["kind"] == "parent"
    assert sorted(wait["kind"] for wait in data["waits"]) == ["join", "token"]
    holds = {(h["payload_id"], h["wait"], h["state"]) for h in data["holds"]}
    assert holds == {
        (dependency, "token", "CLAIMED"),
        (members[0], "join:j2", "not started"),
        (members[1], "join:j2", "not started"),
    }
    failed = next(h for h in data["holds"] if h["payload_id"] == members[0])
    assert (failed["error"], failed["cause"], failed["error_source"]) == (
        "TaskFailed",
        "row cause",
        "row",
    )
    # AND the table names the parent and each wait, never a task token
    human = why(ARN)
    assert human.exit_code == 0, human.output
    assert "parent deptrack-wait-for-join:m1: 2 wait(s)" in human.stdout
    assert f"token wait on {dependency}: PROCESSING" in human.stdout
    assert "3 of 3 holding dependencies" in human.stdout
    assert TOKEN_PREFIX not in human.output


def test_a_payload_says_its_own_state_who_waits_on_it_and_what_it_waits_on(aws: Aws) -> None:
    # GIVEN a payload that failed, member of join j3, and itself waiting on another payload
    me = payload_id("me")
    aws.finished_payload(payload("me"), FAILED, error="States.TaskFailed", cause="boom")
    make_join(aws, "j3", [me, payload_id("x")], quorum=1, outcomes={me: FAILED}, execution=ARN)
    dependency = running(aws, payload("dep"))
    assert aws.dependencies.register(waiter(dependency, "t1", parent=me))
    # WHEN what holds it is asked for
    data = shown(me)
    # THEN its state, the join waiting on it, and what it waits on are there
    assert data["kind"] == "payload"
    assert (data["payload"]["state"], data["payload"]["last_error"]) == (
        "FAILED",
        "States.TaskFailed",
    )
    assert [(w["kind"], w["join_id"]) for w in data["waited_on_by"]] == [("join", "j3")]
    assert [(h["payload_id"], h["wait"]) for h in data["holds"]] == [(dependency, "token")]
    human = why(me)
    assert human.exit_code == 0, human.output
    assert f"payload {me}: FAILED, attempt 1, last error States.TaskFailed: boom" in human.stdout
    assert "waited on by join j3: 1 of 2 needed, 0 succeeded, 1 failed, 1 pending" in human.stdout


def test_a_waiting_parent_s_own_id_lists_what_it_waits_on(aws: Aws) -> None:
    # GIVEN a parent started with `wait --payload-id s2/mosaic-1` (no state item of its own)
    assert aws.dependencies.register(waiter(payload_id("t"), "t1", parent="s2/mosaic-1"))
    # WHEN asked about that id
    data = shown("s2/mosaic-1")
    # THEN it is known, and what it waits on is listed (never started)
    assert (data["kind"], data["payload"], data["waited_on_by"]) == ("payload", None, [])
    assert [(h["payload_id"], h["state"]) for h in data["holds"]] == [
        (payload_id("t"), "not started")
    ]


def test_an_unknown_target_exits_5(aws: Aws) -> None:
    # GIVEN a join and a payload, and an id that names neither
    five_holding(aws)
    for target in ("no/such/id", "join:nope", ARN + "-typo"):
        # WHEN asked about it
        result = why(target)
        # THEN it is an error naming it, exit 5 as `status` for an unknown payload
        assert result.exit_code == PayloadNotFoundError.exit_code, target
        assert result.stderr.startswith(f"error: nothing known as {target}: "), target
    # AND in JSON too, stdout saying so
    result = why("no/such/id", "--json")
    assert result.exit_code == PayloadNotFoundError.exit_code
    assert json.loads(result.stdout) == {
        "target": "no/such/id",
        "kind": None,
        "found": False,
        "holds": [],
    }


def test_a_next_token_why_did_not_print_is_a_usage_error(aws: Aws) -> None:
    five_holding(aws)
    result = why("j1", "--next-token", "garbage!")
    assert result.exit_code == 2
    assert "--next-token" in result.output


def test_odd_unicode_ids_come_back_whole(aws: Aws) -> None:
    # GIVEN members whose ids hold accents, emoji, markup-like brackets and a right-to-left mark
    odd = [payload_id(name) for name in ("tïlé-ü", "🛰️-[bold]x[/]", "\u202ertl-ب")]
    aws.finished_payload(payload("tïlé-ü"), FAILED, error="Fehler: ü", cause="naïve [red]cause")
    make_join(aws, "jö-🙂", odd, quorum=3, outcomes={odd[0]: FAILED}, execution=ARN)
    # WHEN the join is asked for, as JSON and as a table
    data = shown("jö-🙂")
    human = why("jö-🙂")
    # THEN every id is there as it was written, its error too, markup shown as text
    assert [h["payload_id"] for h in data["holds"]] == odd
    assert data["holds"][0]["cause"] == "naïve [red]cause"
    assert human.exit_code == 0, human.output
    for member in odd:
        assert member in human.stdout
    assert "naïve [red]cause" in human.stdout


def test_a_3000_character_payload_id_is_shown_whole(aws: Aws) -> None:
    # GIVEN a parent waiting on a payload whose id is 3,000 characters long
    long_id = payload_id("x" * (3000 - len(payload_id(""))))
    assert len(long_id) == 3000
    aws.finished_payload(payload(long_id.rsplit("/", 1)[1]), FAILED, error="TaskFailed")
    assert aws.dependencies.register(waiter(long_id, "t1", execution=ARN))
    # WHEN the parent and the payload are asked about
    data = shown(ARN)
    human = why(ARN, "--limit", "1")
    mine = shown(long_id)
    # THEN the id comes back whole, in JSON and on one line of the human output
    assert [h["payload_id"] for h in data["holds"]] == [long_id]
    assert human.exit_code == 0, human.output
    assert any(long_id in line for line in human.stdout.splitlines())
    assert mine["payload"]["payload_id"] == long_id
    assert [w["payload_id"] for w in mine["waited_on_by"]] == [long_id]
