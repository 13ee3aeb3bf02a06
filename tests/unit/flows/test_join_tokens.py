"""A join sent again by its own parent: every token of the same wait is kept and answered once.

A parent's ``sendMessage.waitForTaskToken`` Task whose send was delivered but
answered with a throttle is retried by its ``Retry`` with a new token, and SQS
may deliver the two sends in either order, or the first again later. Each test
sends such bodies through the process flow and answers through the callback
flow, against a token service that answers each token once (``Parents``).
"""

from __future__ import annotations

import copy
import json
from typing import TYPE_CHECKING, Any

import pytest

from dependency_tracker.core.enums import DependencyError, PayloadState
from dependency_tracker.core.errors import InvalidMessageError
from dependency_tracker.joins.rows import JOIN_ROW_KEY
from dependency_tracker.table.items import join_partition_for
from tests.conftest import payload
from tests.unit.flows.test_join_registration import BUCKET, Harness, join_body, manifest, starts
from tests.unit.flows.test_sweeper import Parents

if TYPE_CHECKING:
    from tests.conftest import Aws

pytestmark = pytest.mark.usefixtures("workflows")

PARENT = "arn:aws:states:us-east-1:123456789012:execution:deptrack-wait-for-join:p-1"
ITEMS = [f"m{i}" for i in range(5)]


@pytest.fixture
def harness(aws: Aws) -> Harness:
    return Harness(aws)


@pytest.fixture
def parents(aws: Aws) -> Parents:
    service = Parents()
    service.attach(aws.sfn)
    return service


def sent_by(body: dict[str, Any], token: str, *, parent: str = PARENT) -> dict[str, Any]:
    """The same join as ``body``, sent by ``parent`` with ``token`` (a Retry's send)."""
    again = copy.deepcopy(body)
    again["join"]["task_token"] = token
    again["join"]["parent_execution"] = parent
    return again


def by_manifest(harness: Harness, join_id: str) -> dict[str, Any]:
    url = manifest(harness, f"manifests/{join_id}.jsonl", [payload(item) for item in ITEMS])
    return sent_by(join_body(join_id, [], payloads_url=url), "token-A")


def by_url_members(harness: Harness, join_id: str) -> dict[str, Any]:
    """An inline list whose members are ``{"url"}`` references (its total unknown up front)."""
    entries = []
    for item in ITEMS:
        key = f"payloads/{item}.json"
        harness.aws.s3.put_object(Bucket=BUCKET, Key=key, Body=json.dumps(payload(item)).encode())
        entries.append({"url": f"s3://{BUCKET}/{key}"})
    return sent_by(join_body(join_id, [], payloads=entries), "token-A")


def inline(harness: Harness, join_id: str) -> dict[str, Any]:
    return sent_by(join_body(join_id, ITEMS), "token-A")


def finish_all(harness: Harness, join_id: str) -> None:
    """Every member succeeds, and the decided join row's stream record is delivered."""
    harness.drain()
    for item in ITEMS:
        harness.finish(join_id, item, PayloadState.SUCCEEDED)
    harness.callback.handle(join_row(harness, join_id))


def join_row(harness: Harness, join_id: str) -> Any:
    row = harness.aws.dependencies.get_row(join_partition_for(join_id), JOIN_ROW_KEY)
    assert row is not None
    return row


@pytest.mark.parametrize("build", [by_manifest, by_url_members, inline])
def test_a_retried_send_of_any_join_joins_the_wait_and_both_tokens_are_answered(
    harness: Harness, parents: Parents, build: Any
) -> None:
    # GIVEN a join whose first send was delivered, then the Task's Retry sent it again
    body = build(harness, "j")
    harness.send(body, message_id="m-A")
    harness.drain()
    # WHEN the retried send arrives (a manifest's or a reference's total is unknown up front)
    harness.send(sent_by(body, "token-B"), message_id="m-B")
    finish_all(harness, "j")
    # THEN it was not refused, every member ran once, and each token was answered once
    assert [starts(harness.aws, item) for item in ITEMS] == [1] * 5
    assert sorted(parents.sent) == [("token-A", "SendTaskSuccess"), ("token-B", "SendTaskSuccess")]
    row = join_row(harness, "j")
    assert row.notified_at is not None
    assert sorted(row.answered.values()) == ["SENT:SUCCEEDED"] * 2


def test_another_execution_or_another_list_under_the_id_is_still_refused(
    harness: Harness, parents: Parents
) -> None:
    body = inline(harness, "j")
    harness.send(body)
    for other in (
        sent_by(body, "token-B", parent=PARENT + "-other"),
        sent_by(join_body("j", ITEMS[:4]), "token-C"),
        {**sent_by(body, "token-D"), "join": {**sent_by(body, "token-D")["join"], "quorum": 2}},
    ):
        with pytest.raises(InvalidMessageError) as refused:
            harness.send(other, message_id="m-other")
        assert refused.value.error_name == DependencyError.INVALID_JOIN
    assert join_row(harness, "j").retry_tokens == {}


def test_a_stale_redelivery_of_the_first_send_never_reopens_an_answered_join(
    harness: Harness, parents: Parents
) -> None:
    # GIVEN a join answered on both its tokens
    body = inline(harness, "j")
    harness.send(body, message_id="m-A")
    harness.send(sent_by(body, "token-B"), message_id="m-B")
    finish_all(harness, "j")
    answered = join_row(harness, "j")
    assert answered.notified_at is not None
    # WHEN the first send's message is delivered again, late, then the retried one
    harness.send(body, message_id="m-A")
    harness.send(sent_by(body, "token-B"), message_id="m-B")
    # THEN the row is as it was: still told, nothing more sent, no member ran again
    again = join_row(harness, "j")
    assert (again.notified_at, again.answered, again.notify_outcome) == (
        answered.notified_at,
        answered.answered,
        answered.notify_outcome,
    )
    assert len(parents.sent) == 2
    assert [starts(harness.aws, item) for item in ITEMS] == [1] * 5


def test_a_late_first_send_cannot_take_the_join_from_the_live_token(
    harness: Harness, parents: Parents
) -> None:
    # GIVEN the retried send (token-B, the one the parent waits on) delivered first,
    # and the first send's task closed (its Task state failed on the throttle)
    body = inline(harness, "j")
    parents.closed.add("token-A")
    harness.send(sent_by(body, "token-B"), message_id="m-B")
    # WHEN the first send arrives late
    harness.send(body, message_id="m-A")
    finish_all(harness, "j")
    # THEN the live token is answered with the outcome; the closed one refused harmlessly
    assert parents.sent == [("token-B", "SendTaskSuccess")]
    row = join_row(harness, "j")
    assert row.task_token == "token-B"
    assert row.answered == {
        key: outcome
        for key, outcome in row.answered.items()
        if outcome in {"SENT:SUCCEEDED", "PARENT_GONE:InvalidToken"}
    }
    assert sorted(row.answered.values()) == ["PARENT_GONE:InvalidToken", "SENT:SUCCEEDED"]
    assert row.notified_at is not None


def test_a_send_after_the_join_was_answered_is_answered_too(
    harness: Harness, parents: Parents
) -> None:
    # GIVEN a join decided and answered to its first token
    body = inline(harness, "j")
    harness.send(body, message_id="m-A")
    finish_all(harness, "j")
    assert parents.sent == [("token-A", "SendTaskSuccess")]
    # WHEN the retried send arrives only now
    harness.send(sent_by(body, "token-B"), message_id="m-B")
    row = join_row(harness, "j")
    assert row.notified_at is None  # the stream answers the new token
    harness.callback.handle(row)
    # THEN the new token hears the same outcome, and only it
    assert parents.sent == [("token-A", "SendTaskSuccess"), ("token-B", "SendTaskSuccess")]
    assert join_row(harness, "j").notified_at is not None
    assert [starts(harness.aws, item) for item in ITEMS] == [1] * 5
