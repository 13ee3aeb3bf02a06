"""Join messages, join rows (header, count shards, chunks) and the summary."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from dependency_tracker.core.enums import PayloadState
from dependency_tracker.core.errors import InvalidMessageError
from dependency_tracker.core.tokens import token_hash
from dependency_tracker.intake.parse import read_message
from dependency_tracker.joins.messages import JoinMessage, read_members
from dependency_tracker.joins.outputs import JoinSummary, MemberOutcome
from dependency_tracker.joins.rows import (
    JOIN_COUNT_SHARDS,
    ChunkItem,
    CountShardItem,
    JoinItem,
    count_partition_for,
    shard_of,
)
from dependency_tracker.table.keys import partition_key
from dependency_tracker.table.rows import is_bookkeeping_item, row_from_plain
from dependency_tracker.waits.messages import ProcessMessage
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
    # quorum None: every member must succeed; n is known from an inline list
    assert (message.quorum, message.total) == (None, 3)
    assert message.join_id == token_hash("tok")
    assert [p.id for p in message.payloads] == [payload_id("a"), payload_id("b"), payload_id("c")]


def test_join_with_quorum_id_and_url_members() -> None:
    body = json.dumps(
        {
            "join": {"task_token": "tok", "quorum": 1, "join_id": "run-1/join"},
            "payloads": [payload("a"), {"url": "s3://bkt/b.json"}],
        }
    )
    loaded: list[str] = []

    def load(url: str) -> str:
        loaded.append(url)
        return json.dumps(payload("b"))

    message = read_message(body, load_url=load)
    assert isinstance(message, JoinMessage)
    # a reference is read when its chunk is registered, not when the message is parsed:
    # n is not known yet
    assert (message.quorum, message.total, message.join_id) == (1, None, "run-1/join")
    assert loaded == []
    assert message.entries[1] == {"url": "s3://bkt/b.json"}
    assert [p.id for p in message.payloads] == [payload_id("a")]
    # registration reads the entries, references included
    members = read_members(
        message.entries, first_index=0, where="payloads", load_url=load, task_token="tok"
    )
    assert [p.id for p in members] == [payload_id("a"), payload_id("b")]
    assert loaded == ["s3://bkt/b.json"]


def test_join_from_a_manifest_url() -> None:
    body = json.dumps(
        {"join": {"task_token": "tok", "quorum": 2}, "payloads_url": "s3://b/m.jsonl"}
    )
    message = read_message(body)
    assert isinstance(message, JoinMessage)
    assert (message.quorum, message.total, message.payloads_url) == (2, None, "s3://b/m.jsonl")
    assert (message.entries, message.payloads) == ([], [])


def test_duplicates_are_counted_once_and_reported() -> None:
    message = read_message(join_body("a", "b", "a", quorum=2))
    assert isinstance(message, JoinMessage)
    assert message.total == 2
    assert message.duplicates == [payload_id("a")]


@pytest.mark.parametrize(
    ("body", "match"),
    [
        pytest.param(join_body("a", "b", quorum=0), "quorum must be at least 1", id="k=0"),
        pytest.param(join_body("a", "b", quorum=3), "quorum must be between 1 and", id="k>n"),
        pytest.param(
            join_body("a", "a", quorum=2), "quorum must be between 1 and the 1", id="k>n-dedup"
        ),
        pytest.param(
            json.dumps(
                {
                    "join": {"task_token": "tok", "quorum": 3},
                    "payloads": [payload("a"), {"url": "s3://b/x.json"}],
                }
            ),
            "quorum 3 is more than the 2 payloads listed",
            id="k>entries",
        ),
        pytest.param(
            json.dumps({"join": {"task_token": "tok"}, "payloads": []}), "non-empty", id="n=0"
        ),
        pytest.param(json.dumps({"join": {"task_token": "tok"}}), "non-empty", id="no-payloads"),
        pytest.param(
            json.dumps(
                {"join": {"task_token": "tok"}, "payloads": [payload()], "payloads_url": "s3://b/k"}
            ),
            "not both",
            id="payloads-and-url",
        ),
        pytest.param(
            json.dumps({"join": {"task_token": "tok"}, "payloads_url": "https://b/k"}),
            "s3:// url",
            id="url-not-s3",
        ),
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


def test_an_invalid_referenced_member_is_invalid_join_naming_its_position() -> None:
    with pytest.raises(InvalidMessageError, match=r"m\.jsonl\[7\]") as caught:
        read_members(
            [{"url": "s3://b/x.json"}],
            first_index=7,
            where="s3://b/m.jsonl",
            load_url=lambda _: json.dumps({"process": [{"workflow": "w"}]}),
            task_token="tok",
        )
    assert (caught.value.error_name, caught.value.task_token) == ("InvalidJoin", "tok")


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


def join_row(quorum: int | None, total: int | None, **fields: object) -> JoinItem:
    return JoinItem.model_validate(
        {
            "payload_id": "join#j",
            "waiter_id": "join",
            "join_id": "j",
            "task_token": "tok",
            "quorum": quorum,
            "total": total,
            "registered": total or 0,
            "created_at": NOW,
            "updated_at": NOW,
            **fields,
        }
    )


SUCCEEDED = (PayloadState.SUCCEEDED, None)
UNREACHABLE = (PayloadState.FAILED, "QuorumUnreachable")


@pytest.mark.parametrize(
    ("quorum", "succeeded", "failed", "expected"),
    [
        (2, 0, 0, None),
        (2, 1, 0, None),
        (2, 2, 0, SUCCEEDED),
        (2, 0, 1, None),
        (2, 0, 2, UNREACHABLE),
        (1, 1, 2, SUCCEEDED),
        (1, 0, 2, None),
        (1, 0, 3, UNREACHABLE),
        (3, 2, 1, UNREACHABLE),
        # all-of (no quorum given): n must succeed, one failure settles it
        (None, 2, 0, None),
        (None, 3, 0, SUCCEEDED),
        (None, 2, 1, UNREACHABLE),
    ],
)
def test_decision(
    quorum: int | None, succeeded: int, failed: int, expected: tuple[PayloadState, str] | None
) -> None:
    row = join_row(quorum, 3)
    assert row.decision(succeeded, failed) == expected


def test_decision_while_members_are_still_registered() -> None:
    # n unknown (a manifest being read): only what later members cannot change decides
    reading = join_row(2, None, registered=100, registered_chunks=1)
    assert reading.known_total is None
    assert reading.decision(2, 0) == SUCCEEDED
    assert reading.decision(0, 99) is None  # more members may still come
    all_of = join_row(None, None, registered=100, registered_chunks=1)
    assert all_of.needed is None
    assert all_of.decision(100, 0) is None  # not every member is known
    assert all_of.decision(5, 1) == UNREACHABLE
    # once the last chunk is registered n is known, even before total is written
    read = join_row(None, None, registered=150, registered_chunks=2, chunks=2)
    assert (read.known_total, read.needed) == (150, 150)
    assert read.decision(150, 0) == SUCCEEDED


def test_a_quorum_over_the_distinct_members_is_invalid_join() -> None:
    row = join_row(5, None, registered=4, registered_chunks=1, chunks=1)
    assert row.decision(0, 0) == (PayloadState.FAILED, "InvalidJoin")


def test_counts_count_pending_from_the_members_known() -> None:
    assert join_row(2, 5).counts(1, 1).model_dump() == {"succeeded": 1, "failed": 1, "pending": 3}
    reading = join_row(None, None, registered=4)
    assert reading.counts(1, 0).model_dump() == {"succeeded": 1, "failed": 0, "pending": 3}


def test_summary_keeps_member_order_and_names_the_winner() -> None:
    row = join_row(1, 3, winner="m2")
    members = [
        MemberOutcome(payload_id="m0", state=PayloadState.INVALID, error="InvalidInput"),
        MemberOutcome(payload_id="m1"),
        MemberOutcome(payload_id="m2", state=PayloadState.SUCCEEDED),
    ]
    summary = json.loads(JoinSummary.of(row, row.counts(1, 1), members).to_json())
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
    all_of = join_row(None, 3)
    plain = json.loads(JoinSummary.of(all_of, all_of.counts(0, 0), [], ["m0"]).to_json())
    assert "winner" not in plain
    assert (plain["quorum"], plain["total"], plain["duplicates"]) == (3, 3, ["m0"])


def test_rows_round_trip_and_are_typed_by_key() -> None:
    row = join_row(2, 3, registered_chunks=1, chunks=1, duplicates=1, source="s3://b/m.jsonl")
    raw = row.to_item()
    # the join row holds counts, never member lists
    assert not {"members", "succeeded", "failed", "failures"} & set(raw)
    assert JoinItem.from_item(raw) == row
    plain = {k: v for k, v in row.model_dump(mode="json").items() if v is not None}
    assert isinstance(row_from_plain(plain), JoinItem)
    membership = row_from_plain(
        {
            "payload_id": "p",
            "waiter_id": "join#j",
            "join_id": "j",
            "chunk": 0,
            "created_at": NOW,
            "updated_at": NOW,
        }
    )
    assert type(membership).__name__ == "MembershipItem"
    assert not is_bookkeeping_item(raw)


def test_count_shards_and_chunks_are_bookkeeping_rows() -> None:
    long_member = "c/workflow-w/" + "m" * 3_000
    chunk = ChunkItem.of("j", 3, ["a", long_member], ["a"], NOW)
    item = chunk.to_item()
    assert item["waiter_id"] == {"S": "chunk#00000003"}
    # members are kept in their key form: a chunk row names each in at most 2,048 bytes
    assert chunk.members == ["a", partition_key(long_member)]
    assert ChunkItem.from_item(item) == chunk
    shard = CountShardItem(payload_id=count_partition_for("j", 2), join_id="j", succeeded=4)
    assert shard.to_item()["payload_id"] == {"S": "join#j#counts#2"}
    assert is_bookkeeping_item(item)
    assert is_bookkeeping_item(shard.to_item())
    assert is_bookkeeping_item(shard.model_dump())


def test_members_spread_over_every_count_shard_and_stay_on_theirs() -> None:
    shards = [shard_of(f"m{index}") for index in range(200)]
    assert set(shards) == set(range(JOIN_COUNT_SHARDS))
    assert shards == [shard_of(f"m{index}") for index in range(200)]


def join_with(spec: dict[str, object], *members: dict[str, object]) -> str:
    return json.dumps({"join": {"task_token": "tok", **spec}, "payloads": list(members)})


@pytest.mark.parametrize(
    ("quorum", "got"),
    [
        pytest.param(True, "true", id="true"),
        pytest.param("2", "a string", id="string"),
        pytest.param(2.0, "a number", id="float"),
    ],
)
def test_quorum_is_an_integer_and_nothing_else(quorum: object, got: str) -> None:
    with pytest.raises(InvalidMessageError) as caught:
        read_message(join_with({"quorum": quorum}, payload("a"), payload("b")))
    assert caught.value.reason == f"join.quorum: Input should be a valid integer, got {got}"
    assert (caught.value.error_name, caught.value.task_token) == ("InvalidJoin", "tok")
    # AND the integer is read
    message = read_message(join_with({"quorum": 2}, payload("a"), payload("b")))
    assert isinstance(message, JoinMessage)
    assert message.quorum == 2


@pytest.mark.parametrize(
    ("body", "where"),
    [
        pytest.param(
            join_with({}, payload("a"), payload("b\ud800")),
            "payloads[1].features[0].id",
            id="inline-member-id",
        ),
        pytest.param(
            join_with({"waiter_payload_id": "w\ud800"}, payload("a")),
            "join.waiter_payload_id",
            id="waiter-payload-id",
        ),
        pytest.param(
            json.dumps({"join": {"task_token": "tok"}, "payloads_url": "s3://b/\ud800"}),
            "payloads_url",
            id="manifest-url",
        ),
    ],
)
def test_a_lone_surrogate_in_a_join_is_invalid_join_naming_the_field(body: str, where: str) -> None:
    with pytest.raises(InvalidMessageError) as caught:
        read_message(body)
    assert caught.value.reason.startswith(f"{where} is not encodable as UTF-8")
    assert (caught.value.error_name, caught.value.task_token) == ("InvalidJoin", "tok")


def test_a_replace_that_is_not_a_boolean_is_invalid_join_naming_the_member() -> None:
    member = payload("a")
    member["process"][0]["replace"] = "yes"
    with pytest.raises(InvalidMessageError) as caught:
        read_message(join_with({}, member))
    assert caught.value.reason == (
        "payloads[0].process.0.replace: Input should be a valid boolean, got a string"
    )
    assert caught.value.error_name == "InvalidJoin"


def test_a_manifest_member_with_a_lone_surrogate_is_invalid_join() -> None:
    with pytest.raises(InvalidMessageError, match=r"m\.jsonl\[3\]: .*properties\.t is not encod"):
        read_members(
            [{"url": "s3://b/x.json"}],
            first_index=3,
            where="s3://b/m.jsonl",
            load_url=lambda _: json.dumps(payload(properties={"t": "\ud800"})),
            task_token="tok",
        )
