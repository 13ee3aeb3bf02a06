"""Join messages, join rows and the summary."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from dependency_tracker.errors import InvalidMessageError
from dependency_tracker.models import (
    JoinItem,
    JoinMessage,
    JoinSummary,
    MemberFailure,
    PayloadState,
    ProcessMessage,
    read_message,
    row_from_plain,
)
from dependency_tracker.tokens import token_hash
from tests.conftest import payload, payload_id

NOW = datetime(2026, 11, 1, tzinfo=UTC)


def join_body(*items: str, quorum: int | None = None, **join: object) -> str:
    spec: dict[str, object] = {"task_token": "tok", **join}
    if quorum is not None:
        spec["quorum"] = quorum
    return json.dumps({"join": spec, "payloads": [payload(item) for item in items]})


def test_join_defaults_to_all_and_keys_by_token_hash() -> None:
    message = read_message(join_body("a", "b", "c"))
    assert isinstance(message, JoinMessage)
    assert (message.quorum, message.total) == (3, 3)
    assert message.join_id == token_hash("tok")
    assert [p.id for p in message.payloads] == [payload_id("a"), payload_id("b"), payload_id("c")]


def test_join_with_quorum_id_and_url_members() -> None:
    body = json.dumps(
        {
            "join": {"task_token": "tok", "quorum": 1, "join_id": "run-1/join"},
            "payloads": [payload("a"), {"url": "s3://bkt/b.json"}],
        }
    )
    message = read_message(body, load_url=lambda url: json.dumps(payload("b")))
    assert isinstance(message, JoinMessage)
    assert (message.quorum, message.total, message.join_id) == (1, 2, "run-1/join")


def test_duplicates_are_counted_once_and_reported() -> None:
    message = read_message(join_body("a", "b", "a", quorum=2))
    assert isinstance(message, JoinMessage)
    assert message.total == 2
    assert message.duplicates == [payload_id("a")]


@pytest.mark.parametrize(
    ("body", "match"),
    [
        pytest.param(join_body("a", "b", quorum=0), "quorum must be between 1 and", id="k=0"),
        pytest.param(join_body("a", "b", quorum=3), "quorum must be between 1 and", id="k>n"),
        pytest.param(
            join_body("a", "a", quorum=2), "quorum must be between 1 and the 1", id="k>n-dedup"
        ),
        pytest.param(
            json.dumps({"join": {"task_token": "tok"}, "payloads": []}), "non-empty", id="n=0"
        ),
        pytest.param(json.dumps({"join": {"task_token": "tok"}}), "non-empty", id="no-payloads"),
        pytest.param(
            json.dumps(
                {"join": {"task_token": "tok"}, "payloads": [{"process": [{"workflow": "w"}]}]}
            ),
            r"payloads\[0\]",
            id="bad-member",
        ),
        pytest.param(
            json.dumps(
                {"join": {"task_token": "tok", "join_id": "bad id!"}, "payloads": [payload()]}
            ),
            "join.join_id",
            id="bad-join-id",
        ),
    ],
)
def test_invalid_joins_name_invalid_join_and_keep_the_token(body: str, match: str) -> None:
    with pytest.raises(InvalidMessageError, match=match) as caught:
        read_message(body)
    assert caught.value.error_name == "InvalidJoin"
    assert caught.value.task_token == "tok"
    assert caught.value.retryable is False


def test_join_without_a_token_is_invalid_without_one() -> None:
    with pytest.raises(InvalidMessageError, match="task_token") as caught:
        read_message(json.dumps({"join": {"quorum": 1}, "payloads": [payload()]}))
    assert caught.value.task_token is None


def test_a_join_is_not_a_single_payload() -> None:
    with pytest.raises(InvalidMessageError, match="got a join"):
        ProcessMessage.from_body(join_body("a"))


def test_reserved_ids_are_refused() -> None:
    with pytest.raises(InvalidMessageError, match="may not start with"):
        read_message(json.dumps({"id": "join#x", "process": [{"workflow": "w"}]}))


def join_row(quorum: int, members: int, **fields: object) -> JoinItem:
    names = [f"m{index}" for index in range(members)]
    return JoinItem.model_validate(
        {
            "payload_id": "join#j",
            "waiter_id": "join",
            "join_id": "j",
            "task_token": "tok",
            "quorum": quorum,
            "total": members,
            "members": names,
            "created_at": NOW,
            "updated_at": NOW,
            **fields,
        }
    )


@pytest.mark.parametrize(
    ("quorum", "succeeded", "failed", "expected"),
    [
        (2, [], [], None),
        (2, ["m0"], [], None),
        (2, ["m0", "m1"], [], (PayloadState.SUCCEEDED, None)),
        (2, [], ["m0"], None),
        (2, [], ["m0", "m1"], (PayloadState.FAILED, "QuorumUnreachable")),
        (1, ["m2"], ["m0", "m1"], (PayloadState.SUCCEEDED, None)),
        (1, [], ["m0", "m1"], None),
        (1, [], ["m0", "m1", "m2"], (PayloadState.FAILED, "QuorumUnreachable")),
        (3, ["m0", "m1"], ["m2"], (PayloadState.FAILED, "QuorumUnreachable")),
    ],
)
def test_decision(
    quorum: int, succeeded: list[str], failed: list[str], expected: tuple[PayloadState, str] | None
) -> None:
    row = join_row(quorum, 3, succeeded=succeeded, failed=failed)
    assert row.decision() == expected


def test_summary_keeps_member_order_and_names_the_winner() -> None:
    row = join_row(
        1,
        3,
        succeeded={"m2"},
        failed={"m0"},
        failures={"m0": {"state": "INVALID", "error": "InvalidInput"}},
        winner="m2",
    )
    summary = json.loads(JoinSummary.of(row).to_json())
    assert summary == {
        "join_id": "j",
        "quorum": 1,
        "total": 3,
        "counts": {"succeeded": 1, "failed": 1, "pending": 1},
        "succeeded": ["m2"],
        "failed": [{"payload_id": "m0", "state": "INVALID", "error": "InvalidInput"}],
        "pending": ["m1"],
        "winner": "m2",
    }
    assert "winner" not in json.loads(JoinSummary.of(join_row(2, 3)).to_json())


def test_rows_round_trip_and_are_typed_by_key() -> None:
    row = join_row(
        2, 3, succeeded=["m1"], failures={"m0": MemberFailure(state=PayloadState.FAILED)}
    )
    raw = row.to_item()
    assert raw["succeeded"] == {"SS": ["m1"]}
    assert "failed" not in raw
    plain = {k: v for k, v in row.model_dump(mode="json").items() if v is not None}
    assert isinstance(row_from_plain(plain), JoinItem)
    membership = row_from_plain(
        {
            "payload_id": "p",
            "waiter_id": "join#j",
            "join_id": "j",
            "created_at": NOW,
            "updated_at": NOW,
        }
    )
    assert type(membership).__name__ == "MembershipItem"
