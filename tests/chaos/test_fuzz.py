"""Fuzz the process handler: >= 1,000 broken messages mixed into batches with good ones.

Every message must end in exactly one place: processed, reported as a batch
item failure (retryable), or recorded as invalid with a reason. The handler
never raises, the ``InvalidMessages`` metric counts the invalid ones, and no
log line holds a whole task token.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from typing import TYPE_CHECKING, Any

import pytest

from dependency_tracker.handlers.process import lambda_handler
from dependency_tracker.table.items import waiter_id_for
from tests.chaos.fuzz import BUCKET, Case, cases, s3_objects
from tests.unit.handlers.conftest import sqs_event

if TYPE_CHECKING:
    import io

    from dependency_tracker_local.context import LocalContext
    from tests.conftest import Aws

SEED = 20261122
BATCH = 10


def emf_counts(stdout: str, name: str) -> float:
    """Sum of metric ``name`` over the EMF blobs the handler printed."""
    total = 0.0
    for line in stdout.splitlines():
        if '"_aws"' not in line:
            continue
        value = json.loads(line).get(name)
        if isinstance(value, list):
            total += sum(value)
        elif value is not None:
            total += value
    return total


def run_batches(all_cases: list[Case], context: LocalContext) -> set[str]:
    """Feed the cases in SQS batches of 10; returns the ids reported as failures."""
    failed: set[str] = set()
    for start in range(0, len(all_cases), BATCH):
        batch = all_cases[start : start + BATCH]
        event = sqs_event(*(c.body for c in batch), ids=[c.message_id for c in batch])
        response: dict[str, Any] = dict(lambda_handler(event, context))
        failed.update(str(item["itemIdentifier"]) for item in response["batchItemFailures"])
    return failed


@pytest.mark.usefixtures("workflows")
def test_every_bad_message_has_a_fate_and_every_good_one_is_processed(
    aws: Aws,
    lambda_context: LocalContext,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    log_lines: io.StringIO,
) -> None:
    # GIVEN >= 1,000 broken messages (and a few huge ones) shuffled among good ones
    aws.s3.create_bucket(Bucket=BUCKET)
    for key, text in s3_objects().items():
        aws.s3.put_object(Bucket=BUCKET, Key=key, Body=text.encode("utf-8"))
    all_cases = cases(SEED, bad=1020, huge=6, good=120, odd=10)
    bad = [c for c in all_cases if c.fate != "processed"]
    assert len(bad) >= 1000
    caplog.set_level(logging.INFO)

    # WHEN the process handler gets them in batches of 10 (it must never raise)
    failed = run_batches(all_cases, lambda_context)

    # THEN every message is in exactly one place: in = out
    invalid = {c.message_id for c in all_cases if aws.states.get(f"invalid-message/{c.message_id}")}
    processed = {c.message_id for c in all_cases} - failed - invalid
    assert not failed & invalid
    assert len(processed) + len(failed) + len(invalid) == len(all_cases)
    fates = {
        c.message_id: (
            "failure"
            if c.message_id in failed
            else "invalid"
            if c.message_id in invalid
            else "processed"
        )
        for c in all_cases
    }
    wrong = Counter((c.kind, c.fate, fates[c.message_id]) for c in all_cases)
    mismatches = {key: n for key, n in wrong.items() if key[1] != key[2]}
    assert not mismatches, mismatches

    # every invalid record says why
    for message_id in sorted(invalid)[:: max(1, len(invalid) // 50)]:
        record = aws.states.get(f"invalid-message/{message_id}")
        assert record is not None
        assert record.last_error

    # every good message registered its payloads and its waiter
    for case in all_cases:
        if case.fate != "processed":
            continue
        for pid in case.payload_ids:
            assert aws.states.get(pid) is not None, (case.kind, pid)
        if case.kind in {"good-callback", "good-envelope", "good-url"}:
            (tok,) = case.tokens
            assert aws.dependencies.get(case.payload_ids[0], waiter_id_for(tok)) is not None

    # a log line and a metric for every bad message
    messages = Counter(record.getMessage() for record in caplog.records)
    assert messages["invalid message"] == len(invalid)
    assert messages["unknown workflow"] + messages["message cannot be read yet"] == len(failed)
    logged_ids = {
        r.__dict__.get("message_id") for r in caplog.records if r.getMessage() == "invalid message"
    }
    assert logged_ids == invalid
    stdout = capsys.readouterr().out
    assert emf_counts(stdout, "InvalidMessages") == len(invalid)
    retry_metrics = emf_counts(stdout, "UnreadableMessages") + emf_counts(stdout, "UnknownWorkflow")
    assert retry_metrics == len(failed)

    # no log line holds a whole task token
    logged = log_lines.getvalue()
    assert "invalid message" in logged
    leaked = [c.kind for c in all_cases for tok in c.tokens if tok in logged]
    assert not leaked

    print(  # noqa: T201  (the summary of the run, shown with -s)
        f"fuzz seed={SEED} messages={len(all_cases)} bad={len(bad)} "
        f"processed={len(processed)} failed={len(failed)} invalid={len(invalid)}"
    )
