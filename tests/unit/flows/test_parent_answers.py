"""ParentAnswers alone: one token answered, retried, gone, refused, and its output bounded.

Step Functions is played by a hook on botocore's ``before-call`` event (as in
test_callback_backoff.py and test_callback_refused.py): each send meets the answer
scripted for it, so the answerer sees the ``ClientError`` botocore raises for a real
refusal. Waits are recorded, never slept.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest
from botocore.awsrequest import AWSResponse, HTTPHeaders

from dependency_tracker.answers.actions import CallbackAction
from dependency_tracker.answers.parent import CALLBACK_OUTPUTS_PREFIX, ParentAnswers, output_key
from dependency_tracker.core.backoff import Backoff
from dependency_tracker.core.enums import DependencyError, PayloadState
from dependency_tracker.core.errors import CallbackDeliveryError
from dependency_tracker.core.limits import SFN_MAX_CAUSE_CHARS
from dependency_tracker.payloads.bucket import PayloadBucket
from tests.unit.flows.test_callback_refused import MACHINE, PARENT, records
from tests.unit.flows.test_sweeper import store, waiter

if TYPE_CHECKING:
    import io

    from tests.conftest import Aws

SEND_OPERATIONS = ("SendTaskSuccess", "SendTaskFailure")
BUCKET = "deptrack-answers-test"
DENIED = "AccessDeniedException"


@dataclass
class Script:
    """Step Functions answering each send with the next scripted code (None: accepted)."""

    codes: list[str | None] = field(default_factory=list)
    sends: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def __call__(self, params: dict[str, Any], model: Any, **_: Any) -> Any:
        self.sends.append((model.name, json.loads(params["body"])))
        code = self.codes.pop(0) if self.codes else None
        if code is None:
            return AWSResponse("https://states.invalid/", 200, HTTPHeaders(), None), {}
        error = {
            "Error": {"Code": code, "Message": code},
            "ResponseMetadata": {"HTTPStatusCode": 400},
        }
        return AWSResponse("https://states.invalid/", 400, HTTPHeaders(), None), error


@dataclass
class Waits:
    """The backoff's sleeps, recorded on a clock only they move."""

    now: float = 0.0
    taken: list[float] = field(default_factory=list)

    def sleep(self, seconds: float) -> None:
        self.taken.append(seconds)
        self.now += seconds


@pytest.fixture
def script(aws: Aws) -> Script:
    playing = Script()
    for operation in SEND_OPERATIONS:
        aws.sfn.meta.events.register_first(f"before-call.sfn.{operation}", playing)
    return playing


@pytest.fixture
def waits() -> Waits:
    return Waits()


def answerer(aws: Aws, waits: Waits, bucket: PayloadBucket | None = None) -> ParentAnswers:
    return ParentAnswers(
        sfn=aws.sfn,
        dependencies=aws.dependencies,
        bucket=bucket,
        backoff=Backoff(sleep=waits.sleep, clock=lambda: waits.now),
    )


# ---------------------------------------------------------------- send


def test_an_accepted_success_is_sent_once_with_its_output(
    aws: Aws, script: Script, waits: Waits
) -> None:
    # GIVEN Step Functions accepting the send
    # WHEN a token is answered with an output
    answer = answerer(aws, waits).send(
        "tok", PayloadState.SUCCEEDED, deadline=None, output='{"a": 1}'
    )
    # THEN one SendTaskSuccess carried it, and the row would record SENT:<state>
    assert answer == (CallbackAction.SENT, "SENT:SUCCEEDED")
    assert script.sends == [("SendTaskSuccess", {"taskToken": "tok", "output": '{"a": 1}'})]


def test_a_failure_carries_its_error_name_and_a_cause_cut_to_aws_s_limit(
    aws: Aws, script: Script, waits: Waits
) -> None:
    # GIVEN a cause longer than SendTaskFailure takes
    cause = "x" * (SFN_MAX_CAUSE_CHARS + 10)
    # WHEN a token is answered with a failure
    answer = answerer(aws, waits).send(
        "tok", PayloadState.FAILED, deadline=None, error=DependencyError.FAILED, cause=cause
    )
    # THEN one SendTaskFailure carried the error name and the cause, cut
    assert answer == (CallbackAction.SENT, "SENT:FAILED")
    ((operation, body),) = script.sends
    assert operation == "SendTaskFailure"
    assert body["error"] == DependencyError.FAILED.value
    assert body["cause"] == cause[:SFN_MAX_CAUSE_CHARS]


def test_a_throttled_send_is_retried_with_backoff_until_accepted(
    aws: Aws, script: Script, waits: Waits
) -> None:
    # GIVEN Step Functions throttling the first two sends
    script.codes = ["ThrottlingException", "ThrottlingException"]
    # WHEN a token is answered
    answer = answerer(aws, waits).send("tok", PayloadState.SUCCEEDED, deadline=None)
    # THEN the third try was accepted, after two waits within their bounds
    assert answer == (CallbackAction.SENT, "SENT:SUCCEEDED")
    assert len(script.sends) == 3
    bounds = [Backoff().bound(retry) for retry in range(2)]
    assert len(waits.taken) == 2
    assert all(0 <= wait <= bound for wait, bound in zip(waits.taken, bounds, strict=True))


@pytest.mark.parametrize("code", ["TaskTimedOut", "InvalidToken", "TaskDoesNotExist"])
def test_a_parent_gone_is_an_answer_not_an_error(
    aws: Aws, script: Script, waits: Waits, code: str
) -> None:
    # GIVEN a parent that no longer waits
    script.codes = [code]
    # WHEN its token is answered THEN it is recorded as gone, after one try
    answer = answerer(aws, waits).send("tok", PayloadState.SUCCEEDED, deadline=None)
    assert answer == (CallbackAction.PARENT_GONE, f"PARENT_GONE:{code}")
    assert len(script.sends) == 1
    assert waits.taken == []


def test_a_refused_grant_is_returned_at_once_not_retried(
    aws: Aws, script: Script, waits: Waits
) -> None:
    # GIVEN a parent whose state machine the role may not answer
    script.codes = [DENIED]
    # WHEN its token is answered THEN the refusal comes back after one try, without waiting
    answer = answerer(aws, waits).send("tok", PayloadState.SUCCEEDED, deadline=None)
    assert answer == (CallbackAction.REFUSED, f"REFUSED:{DENIED}")
    assert len(script.sends) == 1
    assert waits.taken == []


@pytest.mark.parametrize("code", ["InvalidOutput", "ValidationException"])
def test_a_refusal_nobody_here_fixes_fails_the_record(
    aws: Aws, script: Script, waits: Waits, code: str
) -> None:
    # GIVEN Step Functions refusing the send for a reason waiting won't fix
    script.codes = [code]
    # WHEN a token is answered THEN it raises after one try, naming the code
    with pytest.raises(CallbackDeliveryError) as raised:
        answerer(aws, waits).send("tok", PayloadState.SUCCEEDED, deadline=None)
    assert raised.value.code == code
    assert len(script.sends) == 1


# ---------------------------------------------------------------- refusal record


def test_a_refusal_is_recorded_on_the_row_and_logged_with_the_fix_once(
    aws: Aws, waits: Waits, log_lines: io.StringIO
) -> None:
    # GIVEN a stored terminal row whose parent the stack may not answer
    row = waiter(age=timedelta(minutes=1)).model_copy(update={"parent_execution": PARENT})
    store(aws, row)
    answers = answerer(aws, waits)
    # WHEN its refusal is recorded, twice (a redelivery)
    answers.record_refusal(row, f"REFUSED:{DENIED}", join_id="j")
    first = aws.dependencies.get(row.payload_id, row.waiter_id)
    answers.record_refusal(row, f"REFUSED:{DENIED}", join_id="j")
    # THEN the row records the code once and stays un-notified
    assert first is not None
    assert first.notify_refused == DENIED
    assert first.notified_at is None
    last = aws.dependencies.get(row.payload_id, row.waiter_id)
    assert last is not None
    assert last.notify_refused_at == first.notify_refused_at
    # AND one ERROR names the parent, its state machine, the fix and the join; then a WARNING
    (error,) = records(log_lines, "ERROR")
    for text in (PARENT, MACHINE, DENIED, "ExtraParentStateMachineArns"):
        assert text in error["message"]
    assert (error["parent_state_machine"], error["join_id"]) == (MACHINE, "j")
    (warning,) = records(log_lines, "WARNING")
    assert warning["code"] == DENIED


# ---------------------------------------------------------------- output bound


def test_an_output_within_its_bound_is_sent_as_it_is(aws: Aws, waits: Waits) -> None:
    row = waiter(age=timedelta(minutes=1))
    text = answerer(aws, waits).bounded(
        "{}", row=row, kind="wait", reference=lambda url: f"ref:{url}", limit=2
    )
    assert text == "{}"


def test_an_output_past_its_bound_is_stored_at_the_row_s_key_and_referenced(
    aws: Aws, waits: Waits
) -> None:
    # GIVEN a payload bucket and an output one byte over its bound
    aws.s3.create_bucket(Bucket=BUCKET)
    row = waiter(age=timedelta(minutes=1))
    full = json.dumps({"big": "x" * 10})
    # WHEN it is bounded
    text = answerer(aws, waits, PayloadBucket(aws.s3, BUCKET)).bounded(
        full, row=row, kind="join", reference=lambda url: f"ref:{url}", limit=len(full) - 1
    )
    # THEN the reference names the object, stored under the row's own key
    key = output_key("join", row.payload_id, row.waiter_id)
    assert key.startswith(f"{CALLBACK_OUTPUTS_PREFIX}/join/")
    assert text == f"ref:s3://{BUCKET}/{key}"
    assert aws.s3.get_object(Bucket=BUCKET, Key=key)["Body"].read().decode() == full


def test_without_a_bucket_an_output_past_its_bound_is_a_truncated_reference(
    aws: Aws, waits: Waits
) -> None:
    row = waiter(age=timedelta(minutes=1))
    text = answerer(aws, waits, PayloadBucket(aws.s3)).bounded(
        "{}", row=row, kind="wait", reference=lambda url: f"ref:{url}", limit=1
    )
    assert text == "ref:None"


# ---------------------------------------------------------------- pending


def test_a_terminal_untold_row_is_pending_as_stored(aws: Aws, waits: Waits) -> None:
    row = waiter(age=timedelta(minutes=1))
    store(aws, row)
    found = answerer(aws, waits).pending(row)
    assert found is not None
    current, resolution = found
    assert (current.payload_id, current.waiter_id) == (row.payload_id, row.waiter_id)
    assert resolution.state is PayloadState.SUCCEEDED


def test_a_row_told_meanwhile_is_not_pending(aws: Aws, waits: Waits) -> None:
    # GIVEN the stream's image of an untold row, and the row as stored now: told
    image = waiter(age=timedelta(minutes=1))
    store(aws, image.model_copy(update={"notified_at": image.updated_at}))
    # THEN the row, not the image, decides
    assert answerer(aws, waits).pending(image) is None


@pytest.mark.parametrize(
    "image",
    [
        waiter(age=timedelta(minutes=1), state=PayloadState.PROCESSING),
        waiter(age=timedelta(minutes=1), notified=True),
    ],
    ids=["not terminal", "told"],
)
def test_an_image_not_terminal_or_told_is_not_pending_and_not_read(
    aws: Aws, waits: Waits, image: Any
) -> None:
    # (the row is not even stored: an image that settles it needs no read)
    assert answerer(aws, waits).pending(image) is None
