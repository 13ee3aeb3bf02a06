"""``join.on_parent_gone`` and ``join_cancel``: what the process queue takes, and what it refuses.

A join's ``on_parent_gone`` is ``"keep"`` (the default) or ``"cancel"``; ``cancel`` needs the
parent's Standard execution ARN, since the tracker learns the parent is gone from its execution.
Every refusal is ``InvalidJoin`` to the join's token, naming the field. ``join_cancel`` is the
tracker's own message: a malformed one carries no token, so nobody is told of it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from dependency_tracker.core.enums import DependencyError
from dependency_tracker.core.errors import InvalidMessageError
from dependency_tracker.intake.parse import read_message
from dependency_tracker.joins.messages import JoinCancelMessage, JoinMessage, parent_gone_problem
from dependency_tracker.joins.rows import ParentGone
from dependency_tracker.waits.messages import WaitMessage
from tests.conftest import payload

PARENT = "arn:aws:states:us-east-1:123456789012:execution:parent-machine:run-1"
TOKEN = "tok-parent-gone"


def join_body(**fields: Any) -> str:
    members = [payload(f"pg{index}") for index in range(2)]
    return json.dumps({"join": {"task_token": TOKEN, **fields}, "payloads": members})


def refusal(body: str) -> InvalidMessageError:
    with pytest.raises(InvalidMessageError) as refused:
        read_message(body, message_id="m-1")
    return refused.value


@pytest.mark.parametrize(
    "value",
    [True, False, 1, 0, 1.5, "Cancel", "CANCEL", "Keep", "stop", "", " cancel", "cancel ", {}, []],
)
def test_an_on_parent_gone_not_one_of_the_choices_is_refused_naming_the_field(
    value: Any,
) -> None:
    # WHEN a join's on_parent_gone is of the wrong type, or a string that is not a choice
    refused = refusal(join_body(on_parent_gone=value, parent_execution=PARENT))
    # THEN it is refused as InvalidJoin to the join's token, naming the field and the choices
    assert refused.error_name is DependencyError.INVALID_JOIN
    assert refused.task_token == TOKEN
    assert not refused.retryable
    assert refused.reason.startswith("join.on_parent_gone must be one of 'keep', 'cancel', got ")
    assert repr(value) in refused.reason


def test_cancel_without_a_parent_execution_is_refused_naming_both_fields() -> None:
    refused = refusal(join_body(on_parent_gone="cancel"))
    assert refused.error_name is DependencyError.INVALID_JOIN
    assert refused.task_token == TOKEN
    assert "join.on_parent_gone 'cancel' needs join.parent_execution" in refused.reason


@pytest.mark.parametrize(
    "parent",
    [
        # A state machine, not an execution of it
        "arn:aws:states:us-east-1:123456789012:stateMachine:parent-machine",
        # An Express execution: it cannot wait for a token
        "arn:aws:states:us-east-1:123456789012:express:m:e:x",
        # A Map Run, an activity, another service
        "arn:aws:states:us-east-1:123456789012:mapRun:parent-machine/map:run-1",
        "arn:aws:states:us-east-1:123456789012:activity:work",
        "arn:aws:lambda:us-east-1:123456789012:execution:parent-machine:run-1",
        # No execution name, a short account, a name with a space, a newline after the ARN
        "arn:aws:states:us-east-1:123456789012:execution:parent-machine",
        "arn:aws:states:us-east-1:12345678901:execution:parent-machine:run-1",
        "arn:aws:states:us-east-1:123456789012:execution:parent-machine:run 1",
        f"{PARENT} ",
        f" {PARENT}",
        "run-1",
        "",
    ],
)
def test_cancel_with_a_parent_that_is_not_an_execution_arn_is_refused(parent: str) -> None:
    # WHEN a cancelling join names as its parent something that is not a Standard execution
    refused = refusal(join_body(on_parent_gone="cancel", parent_execution=parent))
    # THEN it is refused as InvalidJoin, naming join.parent_execution
    assert refused.error_name is DependencyError.INVALID_JOIN
    assert refused.task_token == TOKEN
    assert "join.parent_execution must be a Standard workflow's execution ARN" in refused.reason
    assert "on_parent_gone 'cancel'" in refused.reason


@pytest.mark.parametrize(
    "parent",
    [
        f"{PARENT}\n",
        # Arabic-Indic digits for the account
        PARENT.replace("123456789012", "\u0661\u0662\u0663\u0664\u0665\u0666" * 2),
    ],
)
def test_cancel_with_a_parent_that_only_looks_like_an_execution_arn_is_refused(
    parent: str,
) -> None:
    refused = refusal(join_body(on_parent_gone="cancel", parent_execution=parent))
    assert refused.error_name is DependencyError.INVALID_JOIN
    assert "join.parent_execution must be a Standard workflow's execution ARN" in refused.reason


def test_a_long_parent_is_quoted_clipped_in_the_refusal() -> None:
    long_parent = "arn:aws:states:us-east-1:123456789012:stateMachine:" + "m" * 5000
    refused = refusal(join_body(on_parent_gone="cancel", parent_execution=long_parent))
    assert "join.parent_execution must be" in refused.reason
    assert len(refused.reason) < 400


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({}, None),
        ({"on_parent_gone": None}, None),
        ({"on_parent_gone": "keep"}, ParentGone.KEEP),
        # keep does not look at the parent: any parent (or none) is fine
        ({"on_parent_gone": "keep", "parent_execution": "run-1"}, ParentGone.KEEP),
        ({"on_parent_gone": "cancel", "parent_execution": PARENT}, ParentGone.CANCEL),
        (
            {
                "on_parent_gone": "cancel",
                "parent_execution": "arn:aws-us-gov:states:us-gov-west-1:123456789012:"
                "execution:machine_1:8f2a-4c1d",
            },
            ParentGone.CANCEL,
        ),
    ],
)
def test_keep_null_and_cancel_with_an_execution_are_accepted(
    fields: dict[str, Any], expected: ParentGone | None
) -> None:
    message = read_message(join_body(**fields), message_id="m-1")
    assert isinstance(message, JoinMessage)
    assert message.join.on_parent_gone == expected
    assert message.join.task_token == TOKEN


@pytest.mark.parametrize(
    "value",
    [
        "\uff43\uff41\uff4e\uff43\uff45\uff4c",  # full-width "cancel"
        "can\u200bcel",  # a zero-width space inside
        "cancel\u0000",
        "c\u0430ncel",  # a Cyrillic a
        "\u212aeep",  # the Kelvin sign, which lower() folds to k
        "\ud800",  # a lone surrogate: not UTF-8 at all
        "cancel\udcff",
    ],
)
def test_odd_unicode_in_on_parent_gone_is_refused_cleanly(value: str) -> None:
    # GIVEN the body as it arrives: JSON text with the value \u-escaped (lone surrogates too)
    body = join_body(on_parent_gone=value, parent_execution=PARENT)
    # THEN it is refused as InvalidJoin naming the field, never read as a choice
    refused = refusal(body)
    assert refused.error_name is DependencyError.INVALID_JOIN
    assert refused.task_token == TOKEN
    assert refused.reason.startswith("join.on_parent_gone ")
    assert not refused.reason.startswith("join.on_parent_gone 'cancel'")
    # AND the reason can be logged, stored and sent to the parent (UTF-8, no lone surrogate)
    assert refused.reason.encode("utf-8")


def test_a_parent_with_a_lone_surrogate_is_refused_cleanly() -> None:
    body = join_body(on_parent_gone="cancel", parent_execution=f"{PARENT}\ud800")
    refused = refusal(body)
    assert refused.error_name is DependencyError.INVALID_JOIN
    assert refused.task_token == TOKEN
    assert "parent_execution" in refused.reason
    assert refused.reason.encode("utf-8")


def test_parent_gone_problem_says_none_only_for_a_usable_choice() -> None:
    assert parent_gone_problem(None, None) is None
    assert parent_gone_problem("keep", None) is None
    assert parent_gone_problem("cancel", PARENT) is None
    assert parent_gone_problem(ParentGone.CANCEL, PARENT) is None
    assert parent_gone_problem("cancel", None) is not None
    assert parent_gone_problem("cancel", PARENT.replace(":execution:", ":stateMachine:"))
    assert parent_gone_problem(True, PARENT) is not None


@pytest.mark.parametrize(
    ("spec", "chunk"),
    [
        ({"join_id": "j-1", "cause": "the join's parent ended ABORTED"}, None),
        ({"join_id": "j.1:a/b_c-d", "cause": "gone", "chunk": 0}, 0),
        ({"join_id": "j-1", "cause": "gone", "chunk": 7, "extra": "ignored"}, 7),
    ],
)
def test_a_join_cancel_message_is_read_as_one(spec: dict[str, Any], chunk: int | None) -> None:
    message = read_message(json.dumps({"join_cancel": spec}), message_id="m-cancel")
    assert isinstance(message, JoinCancelMessage)
    assert message.join_id == spec["join_id"]
    assert message.join_cancel.cause == spec["cause"]
    assert message.join_cancel.chunk == chunk
    assert message.message_id == "m-cancel"


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"cause": "gone"}, "message.join_cancel.join_id"),
        ({"join_id": "j-1", "cause": "gone", "chunk": -1}, "message.join_cancel.chunk"),
        ({"join_id": "j#1", "cause": "gone"}, "message.join_cancel.join_id"),
        ({"join_id": "", "cause": "gone"}, "message.join_cancel.join_id"),
        ({"join_id": "j 1", "cause": "gone"}, "message.join_cancel.join_id"),
        ({"join_id": "x" * 201, "cause": "gone"}, "message.join_cancel.join_id"),
        ({"join_id": "j-1"}, "message.join_cancel.cause"),
        ({"join_id": "j-1", "cause": ""}, "message.join_cancel.cause"),
        ({"join_id": "j-1", "cause": "gone", "chunk": "all"}, "message.join_cancel.chunk"),
        ({"join_id": "j-1", "cause": "gone", "chunk": 1.5}, "message.join_cancel.chunk"),
    ],
)
def test_a_malformed_join_cancel_is_invalid_without_a_token(
    spec: dict[str, Any], field: str
) -> None:
    # WHEN the tracker's own join_cancel message is malformed (a bug or a stranger's message)
    refused = refusal(json.dumps({"join_cancel": spec}))
    # THEN it is an unusable message naming the field, with no token to tell anybody
    assert refused.task_token is None
    assert refused.error_name == "DependencyInvalid"
    assert not refused.retryable
    assert field in refused.reason


@pytest.mark.parametrize("document", [{"join_cancel": None}, {"join_cancel": "j-1"}])
def test_a_join_cancel_that_is_not_an_object_is_invalid_without_a_token(
    document: dict[str, Any],
) -> None:
    refused = refusal(json.dumps(document))
    assert refused.task_token is None
    assert "message.join_cancel" in refused.reason


@pytest.mark.parametrize("kind", ["wait_for", "payload"])
@pytest.mark.parametrize("value", ["cancel", True, "stop"])
def test_a_single_wait_refuses_cancel_rather_than_ignoring_it(kind: str, value: Any) -> None:
    # GIVEN a single wait (or a payload with its callback) that asks for on_parent_gone
    callback = {"task_token": TOKEN, "parent_execution": PARENT, "on_parent_gone": value}
    document: dict[str, Any] = (
        {"wait_for": "s2/workflow-cog/x", "callback": callback}
        if kind == "wait_for"
        else {"payload": payload("pg-single"), "callback": callback}
    )
    # WHEN it is read THEN it is refused to its token, naming the field and the join that does it
    refused = refusal(json.dumps(document))
    assert refused.error_name == DependencyError.INVALID
    assert refused.task_token == TOKEN
    assert "callback.on_parent_gone" in refused.reason
    assert "join.on_parent_gone 'cancel'" in refused.reason


def test_a_single_wait_takes_keep() -> None:
    body = {
        "wait_for": "s2/workflow-cog/x",
        "callback": {"task_token": TOKEN, "on_parent_gone": "keep"},
    }
    message = read_message(json.dumps(body))
    assert isinstance(message, WaitMessage)
    assert message.payload_id == "s2/workflow-cog/x"
