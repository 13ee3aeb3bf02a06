"""The best-effort read of a broken body: whose token to answer, and who the parent is."""

from __future__ import annotations

import json

import pytest

from dependency_tracker.core.enums import DependencyError
from dependency_tracker.intake.invalid import parent_execution_in, token_to_answer


def sns(text: str) -> str:
    return json.dumps({"Type": "Notification", "Message": text})


def test_a_join_token_is_answered_invalid_join_and_a_callback_token_dependency_invalid() -> None:
    # GIVEN bodies the parser refused, one for a join and one for a single wait
    join = json.dumps({"join": {"task_token": "tok-j"}, "payloads": "not a list"})
    wait = json.dumps({"callback": {"task_token": "tok-c"}, "features": 3})
    # WHEN the token to answer is read THEN each parent hears its own error
    assert token_to_answer(join) == ("tok-j", DependencyError.INVALID_JOIN)
    assert token_to_answer(wait) == ("tok-c", DependencyError.INVALID)
    # AND through an SNS envelope too
    assert token_to_answer(sns(join)) == ("tok-j", DependencyError.INVALID_JOIN)


def test_a_join_token_wins_over_a_callback_token() -> None:
    # GIVEN a body with both (refused as two kinds)
    body = json.dumps({"join": {"task_token": "tok-j"}, "callback": {"task_token": "tok-c"}})
    # THEN the join's parent is the one answered
    assert token_to_answer(body) == ("tok-j", DependencyError.INVALID_JOIN)


@pytest.mark.parametrize(
    "body",
    [
        '{"callback": {"task_token": "tok',
        sns('{"callback": {"task_token": "tok'),
        "[" * 100_000 + "]" * 100_000,
        json.dumps(["callback", {"task_token": "tok"}]),
        json.dumps({"callback": "tok"}),
        json.dumps({"callback": {"task_token": ""}}),
        json.dumps({"callback": {"task_token": "tok-\ud800"}}),
    ],
    ids=[
        "truncated",
        "sns-wrapped-truncated",
        "deeply-nested",
        "not-an-object",
        "callback-not-an-object",
        "empty-token",
        "lone-surrogate-token",
    ],
)
def test_no_token_is_read_from_a_body_that_holds_none_usable(body: str) -> None:
    # WHEN the token is read from a body with none usable THEN there is no parent to answer
    assert token_to_answer(body) == (None, DependencyError.INVALID)
    assert parent_execution_in(body) is None


def test_the_parent_execution_is_read_from_the_callback_then_the_join() -> None:
    # GIVEN broken bodies naming their parent
    wait = json.dumps(
        {"callback": {"parent_execution": "arn:w"}, "join": {"parent_execution": "j"}}
    )
    join = sns(json.dumps({"join": {"parent_execution": "arn:j"}}))
    # THEN the parent is read, a callback's first, through an SNS envelope too
    assert parent_execution_in(wait) == "arn:w"
    assert parent_execution_in(join) == "arn:j"


def test_a_lone_surrogate_in_the_parent_execution_is_kept_escaped() -> None:
    # GIVEN a parent execution no UTF-8 text can hold
    body = json.dumps({"callback": {"task_token": "tok", "parent_execution": "arn:\ud800x"}})
    # WHEN it is read THEN it is escaped (storable), not dropped
    parent = parent_execution_in(body)
    assert parent == "arn:\\ud800x"
    assert parent is not None
    parent.encode("utf-8")
