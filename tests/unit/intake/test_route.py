"""The router: each message parsed once and handed to the flow that owns its kind."""

from __future__ import annotations

import json
from typing import Any, cast

import pytest

from dependency_tracker.intake.route import Intake
from dependency_tracker.joins.messages import JoinChunkMessage, JoinMessage
from dependency_tracker.payloads.actions import ProcessAction
from dependency_tracker.waits.messages import ProcessMessage, WaitMessage
from tests.conftest import payload

CHUNK = {"join_id": "j-1", "index": 1, "offset": 0, "payloads_url": "s3://b/members.json"}


class Recorder:
    """Stands in for a flow: records what it was handed."""

    def __init__(self, registered: bool = True) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.registered = registered

    def handle(self, message: Any) -> ProcessAction:
        self.calls.append(("handle", message))
        return ProcessAction.STARTED

    def start(self, message: Any) -> bool:
        self.calls.append(("start", message))
        return self.registered

    def resume(self, message: Any) -> bool:
        self.calls.append(("resume", message))
        return self.registered

    def hand_off(self, body: str, message_id: str | None) -> None:
        self.calls.append(("hand_off", (body, message_id)))

    def read_url(self, url: str) -> str:
        self.calls.append(("read_url", url))
        return json.dumps(payload("item-s3"))


def intake(waits: Recorder, joins: Recorder, bucket: Recorder | None = None) -> Intake:
    return Intake(
        waits=cast("Any", waits),
        joins=cast("Any", joins),
        bucket=cast("Any", bucket or Recorder()),
        invalid=cast("Any", None),
        last_receive=cast("Any", None),
    )


@pytest.mark.parametrize(
    ("body", "model"),
    [
        (payload(callback={"task_token": "tok"}), ProcessMessage),
        ({"wait_for": "p", "callback": {"task_token": "tok"}}, WaitMessage),
    ],
)
def test_payloads_and_waits_reach_the_waits_flow(body: dict[str, Any], model: type[Any]) -> None:
    # GIVEN a router over a waits flow and a join registration
    waits, joins = Recorder(), Recorder()
    router = intake(waits, joins)
    # WHEN a payload or wait message is parsed and handled
    action = router.handle(router.parse(json.dumps(body), message_id="m-1"))
    # THEN the waits flow has it, the registration never hears of it
    assert action is ProcessAction.STARTED
    ((verb, message),) = waits.calls
    assert verb == "handle"
    assert isinstance(message, model)
    assert joins.calls == []


@pytest.mark.parametrize(
    ("body", "verb", "model"),
    [
        ({"join": {"task_token": "tok"}, "payloads": [payload()]}, "start", JoinMessage),
        ({"join_chunk": CHUNK}, "resume", JoinChunkMessage),
    ],
)
@pytest.mark.parametrize(
    ("registered", "expected"), [(True, ProcessAction.JOINED), (False, ProcessAction.REFUSED)]
)
def test_joins_and_their_chunks_reach_the_registration(
    body: dict[str, Any],
    verb: str,
    model: type[Any],
    registered: bool,
    expected: ProcessAction,
) -> None:
    # GIVEN a router whose registration takes (or refuses) what it is given
    waits, joins = Recorder(), Recorder(registered=registered)
    router = intake(waits, joins)
    # WHEN a join or a join chunk is parsed and handled
    action = router.handle(router.parse(json.dumps(body), message_id="m-1"))
    # THEN the registration starts or resumes it, and the waits flow never hears of it
    assert action is expected
    ((called, message),) = joins.calls
    assert called == verb
    assert isinstance(message, model)
    assert waits.calls == []


def test_a_join_handed_off_goes_to_the_registration_as_it_came() -> None:
    # GIVEN a router
    waits, joins = Recorder(), Recorder()
    # WHEN a join body is handed off
    intake(waits, joins).hand_off('{"join": {}}', "m-1")
    # THEN the registration sends it on, untouched
    assert joins.calls == [("hand_off", ('{"join": {}}', "m-1"))]
    assert waits.calls == []


def test_the_router_reads_pointers_through_the_bucket() -> None:
    # GIVEN a router over a bucket
    bucket = Recorder()
    router = intake(Recorder(), Recorder(), bucket)
    # WHEN a pointer is parsed
    message = router.parse(json.dumps({"url": "s3://b/k"}))
    # THEN the bucket read the object behind it
    assert isinstance(message, ProcessMessage)
    assert bucket.calls == [("read_url", "s3://b/k")]
