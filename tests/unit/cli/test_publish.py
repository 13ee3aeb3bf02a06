"""``publish``: validation before sending, batches, and what reaches the queue."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest
from typer.testing import CliRunner

from dependency_tracker_cli.__main__ import app
from dependency_tracker_cli.commands.publish import MAX_MESSAGE_BYTES
from tests.conftest import payload, payload_id

if TYPE_CHECKING:
    from pathlib import Path

    from tests.conftest import Aws


def queued(aws: Aws) -> list[dict[str, Any]]:
    messages = aws.sqs.receive_message(QueueUrl=aws.queue_url, MaxNumberOfMessages=10)
    return [json.loads(m["Body"]) for m in messages.get("Messages", [])]


def write(tmp_path: Path, name: str, document: Any) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(document) if not isinstance(document, str) else document)
    return str(path)


@pytest.mark.usefixtures("workflows")
def test_valid_messages_of_every_shape_are_sent(aws: Aws, tmp_path: Path) -> None:
    # GIVEN a payload file, an array file (payload + wait-only reference) and a join on stdin
    single = write(tmp_path, "one.json", payload("a"))
    many = write(
        tmp_path,
        "many.json",
        [payload("b"), {"wait_for": payload_id("a"), "callback": {"task_token": "tok"}}],
    )
    join = {"join": {"task_token": "tok-j", "quorum": 1}, "payloads": [payload("c"), payload("d")]}
    # WHEN they are published
    result = CliRunner().invoke(
        app, ["publish", single, many, "-", "--json"], input=json.dumps(join)
    )
    # THEN each is sent once, and the summary names what each carries
    assert result.exit_code == 0, result.output
    published = json.loads(result.stdout)["published"]
    assert [(p["source"], p["kind"], p["payload_ids"]) for p in published] == [
        (single, "payload", [payload_id("a")]),
        (f"{many}[0]", "payload", [payload_id("b")]),
        (f"{many}[1]", "wait", [payload_id("a")]),
        ("stdin", "join", [payload_id("c"), payload_id("d")]),
    ]
    assert all(p["message_id"] for p in published)
    bodies = queued(aws)
    assert len(bodies) == 4
    assert payload("a") in bodies


@pytest.mark.parametrize(
    ("document", "reason"),
    [
        ("{not json", "not valid JSON"),
        ({"features": [{"id": "x"}]}, "process: Field required"),
        ({"join": {"task_token": "t", "quorum": 3}, "payloads": [payload("a")]}, "quorum"),
        ([], "empty JSON array"),
    ],
)
@pytest.mark.usefixtures("workflows")
def test_an_invalid_message_sends_nothing_and_exits_3(
    aws: Aws, tmp_path: Path, document: Any, reason: str
) -> None:
    good = write(tmp_path, "good.json", payload("a"))
    bad = write(tmp_path, "bad.json", document)
    result = CliRunner().invoke(app, ["publish", good, bad])
    assert result.exit_code == 3
    assert result.stderr.startswith(f"error: invalid message: {bad}")
    assert reason in result.stderr
    assert result.stderr.count("\n") == 1
    assert queued(aws) == []


@pytest.mark.usefixtures("workflows")
def test_an_unknown_workflow_is_refused_unless_told_otherwise(aws: Aws, tmp_path: Path) -> None:
    path = write(tmp_path, "p.json", payload("a", workflow="nope"))
    refused = CliRunner().invoke(app, ["publish", path])
    assert refused.exit_code == 4
    assert "unknown workflow 'nope': no state machine deptrack-nope" in refused.stderr
    assert queued(aws) == []
    sent = CliRunner().invoke(app, ["publish", path, "--no-check-workflows"])
    assert sent.exit_code == 0, sent.output
    assert len(queued(aws)) == 1


@pytest.mark.parametrize(
    ("workflow", "nearest"),
    [("fial", "hint: did you mean 'fail'? "), ("zzzz", "hint: ")],
)
@pytest.mark.usefixtures("workflows")
def test_an_unknown_workflow_lists_the_known_ones_and_suggests_the_nearest(
    aws: Aws, tmp_path: Path, workflow: str, nearest: str
) -> None:
    # GIVEN the stack's workflows pass, fail and invalid, and a payload for a typo of one
    path = write(tmp_path, "p.json", payload("a", workflow=workflow))
    # WHEN it is published
    refused = CliRunner().invoke(app, ["publish", path])
    # THEN the error is followed by the known workflows, sorted, and the nearest when one is close
    assert refused.exit_code == 4
    error, hint = refused.stderr.splitlines()
    assert error == f"error: unknown workflow {workflow!r}: no state machine deptrack-{workflow}"
    assert hint == f"{nearest}known workflows: fail, invalid, pass"
    assert queued(aws) == []


@pytest.mark.usefixtures("workflows")
def test_a_message_over_the_sqs_limit_is_refused(aws: Aws, tmp_path: Path) -> None:
    big = payload("a", padding="x" * MAX_MESSAGE_BYTES)
    result = CliRunner().invoke(app, ["publish", write(tmp_path, "big.json", big)])
    assert result.exit_code == 3
    assert "store the payload in S3" in result.stderr
    assert queued(aws) == []


def test_a_missing_file_is_reported_as_a_missing_file_not_as_an_invalid_message(
    tmp_path: Path,
) -> None:
    # GIVEN a path that does not exist (a typo), after one that does
    good = write(tmp_path, "good.json", payload("a"))
    missing = tmp_path / "nope.json"
    # WHEN both are published
    result = CliRunner().invoke(app, ["publish", good, str(missing)])
    # THEN it is a usage error naming the file (exit 2), in one line
    assert result.exit_code == 2
    assert result.stderr == f"error: {missing}: no such file\n"


def test_a_file_that_is_not_utf8_is_an_invalid_message(tmp_path: Path) -> None:
    # GIVEN a file that exists but holds Latin-1 bytes
    path = tmp_path / "latin1.json"
    path.write_bytes(b'{"id": "caf\xe9"}')
    # WHEN it is published
    result = CliRunner().invoke(app, ["publish", str(path)])
    # THEN its content is refused as a message (exit 3), without a traceback
    assert result.exit_code == 3
    assert result.stderr == f"error: invalid message: {path}: not UTF-8 text\n"


@pytest.mark.usefixtures("workflows")
def test_many_messages_go_in_batches_of_ten(aws: Aws, tmp_path: Path) -> None:
    path = write(tmp_path, "many.json", [payload(f"i{n}") for n in range(23)])
    result = CliRunner().invoke(app, ["publish", path, "--json"])
    assert result.exit_code == 0, result.output
    ids = {m["message_id"] for m in json.loads(result.stdout)["published"]}
    assert len(ids) == 23
    received = 0
    while batch := queued(aws):
        received += len(batch)
    assert received == 23
