"""``publish --dry-run``: validate and name each payload, offline: no AWS call at all."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest
from botocore.client import BaseClient
from typer.testing import CliRunner

from dependency_tracker.core.tokens import token_hash
from dependency_tracker_cli.__main__ import app
from tests.conftest import payload, payload_id

if TYPE_CHECKING:
    from pathlib import Path

REFERENCE = {"url": "s3://bucket/payloads/x.json"}
JOIN = {"join": {"task_token": "tok-j", "quorum": 1}, "payloads": [payload("c"), payload("d")]}


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[str]:
    """No AWS configuration at all (no credentials, region or endpoint); every call recorded."""
    for name in (
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_DEFAULT_REGION",
        "AWS_REGION",
        "AWS_ENDPOINT_URL",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    made: list[str] = []

    def refuse(client: BaseClient, operation: str, params: dict[str, Any]) -> None:
        made.append(operation)
        raise AssertionError(operation)

    monkeypatch.setattr(BaseClient, "_make_api_call", refuse)
    return made


def write(tmp_path: Path, name: str, document: Any) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(document))
    return str(path)


def test_each_message_is_validated_and_its_ids_printed_without_any_aws_call(
    calls: list[str], tmp_path: Path
) -> None:
    # GIVEN a payload, an array (a payload, a reference and a wait-only message) and a join
    single = write(tmp_path, "one.json", payload("a"))
    many = write(
        tmp_path,
        "many.json",
        [payload("b"), REFERENCE, {"wait_for": payload_id("a"), "callback": {"task_token": "t"}}],
    )
    join = write(tmp_path, "join.json", JOIN)
    # WHEN they are published with --dry-run, as JSON
    result = CliRunner().invoke(app, ["publish", single, many, join, "--dry-run", "--json"])
    # THEN each is named with its ids (the reference by its url, unread), and nothing is called
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {
        "dry_run": True,
        "messages": [
            {
                "source": single,
                "kind": "payload",
                "payload_ids": [payload_id("a")],
                "join_id": None,
                "unread_urls": [],
            },
            {
                "source": f"{many}[0]",
                "kind": "payload",
                "payload_ids": [payload_id("b")],
                "join_id": None,
                "unread_urls": [],
            },
            {
                "source": f"{many}[1]",
                "kind": "payload",
                "payload_ids": [],
                "join_id": None,
                "unread_urls": [REFERENCE["url"]],
            },
            {
                "source": f"{many}[2]",
                "kind": "wait",
                "payload_ids": [payload_id("a")],
                "join_id": None,
                "unread_urls": [],
            },
            {
                "source": join,
                "kind": "join",
                "payload_ids": [payload_id("c"), payload_id("d")],
                "join_id": token_hash("tok-j"),
                "unread_urls": [],
            },
        ],
    }
    assert calls == []


def test_the_human_output_names_each_payload_and_says_nothing_was_sent(
    calls: list[str], tmp_path: Path
) -> None:
    # GIVEN a payload file
    single = write(tmp_path, "one.json", payload("a"))
    # WHEN it is published with --dry-run
    result = CliRunner().invoke(app, ["publish", single, "--dry-run"], env={"COLUMNS": "200"})
    # THEN its id is printed, and stderr says nothing was sent
    assert result.exit_code == 0, result.output
    assert result.stdout == f"valid {single} → {payload_id('a')}\n"
    assert "nothing sent" in result.stderr
    assert calls == []


def test_an_invalid_message_exits_3_as_without_dry_run(calls: list[str], tmp_path: Path) -> None:
    # GIVEN a good payload and a join whose quorum is over its payloads
    good = write(tmp_path, "good.json", payload("a"))
    bad = write(tmp_path, "bad.json", {**JOIN, "join": {"task_token": "t", "quorum": 3}})
    # WHEN they are published with --dry-run
    result = CliRunner().invoke(app, ["publish", good, bad, "--dry-run"])
    # THEN it is refused as publish refuses it, naming the file, with no call made
    assert result.exit_code == 3, result.output
    assert result.stderr.startswith(f"error: invalid message: {bad}: quorum")
    assert result.stdout == ""
    assert calls == []


@pytest.mark.parametrize("other", [["--wait"], ["--manifest", "."]])
def test_dry_run_takes_no_wait_and_no_manifest(
    calls: list[str], tmp_path: Path, other: list[str]
) -> None:
    single = write(tmp_path, "one.json", payload("a"))
    args = ["publish", *([] if other[0] == "--manifest" else [single]), *other, "--dry-run"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.stderr == "error: --dry-run takes no --manifest and no --wait\n"
    assert calls == []
