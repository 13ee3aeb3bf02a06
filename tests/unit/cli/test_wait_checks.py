"""``wait`` refuses a join its parent could only fail, before it starts anything.

The parents here are stand-ins (a Pass state): what is checked is that none started,
and that the error carries the cause the tracker would have given the parent.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest
from typer.testing import CliRunner

from dependency_tracker.joins.manifest import manifest_text
from dependency_tracker_cli.__main__ import app
from tests.conftest import PASS_WORKFLOW, payload, payload_id

if TYPE_CHECKING:
    from pathlib import Path

    from typer.testing import Result

    from tests.conftest import Aws

BUCKET = "members"


@pytest.fixture
def parents(aws: Aws, workflows: dict[str, str]) -> dict[str, str]:
    """Both parents (stand-ins that succeed at once), the child workflows, and a bucket."""
    aws.s3.create_bucket(Bucket=BUCKET)
    return {
        machine: aws.create_workflow(machine, PASS_WORKFLOW)
        for machine in ("wait-for-dependencies", "wait-for-join")
    }


def write(tmp_path: Path, name: str, document: Any) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(document))
    return str(path)


def put_manifest(aws: Aws, key: str, entries: list[dict[str, Any]]) -> str:
    aws.s3.put_object(Bucket=BUCKET, Key=key, Body=manifest_text(entries).encode())
    return f"s3://{BUCKET}/{key}"


def wait(*args: str) -> Result:
    return CliRunner().invoke(app, ["wait", *args, "--poll", "0.05"])


def executions(aws: Aws, parents: dict[str, str]) -> list[str]:
    return [
        execution["executionArn"]
        for arn in parents.values()
        for execution in aws.sfn.list_executions(stateMachineArn=arn)["executions"]
    ]


def refused(result: Result, cause: str) -> None:
    """Exit 3, one line naming InvalidJoin and the tracker's cause."""
    assert result.exit_code == 3, result.output
    assert result.stderr == (
        f"error: nothing started: the parent would fail InvalidJoin: {cause}\n"
    ), result.stderr


def test_a_quorum_over_the_files_members_starts_nothing(
    aws: Aws, parents: dict[str, str], tmp_path: Path
) -> None:
    # GIVEN one payload file
    one = write(tmp_path, "one.json", payload("a"))
    # WHEN a parent needing 3 of it is asked for
    result = wait(one, "--quorum", "3")
    # THEN it is refused with the tracker's own cause, and no parent exists
    refused(result, "quorum must be between 1 and the 1 distinct payloads, got 3")
    assert executions(aws, parents) == []
    # AND a quorum the files reach starts its parent, followed to its end
    two = write(tmp_path, "two.json", payload("b"))
    started = wait(one, two, "--quorum", "2", "--json")
    assert started.exit_code == 0, started.output
    assert json.loads(started.stdout)["dependencies"] == [
        {"payload_id": payload_id("a"), "state": None},
        {"payload_id": payload_id("b"), "state": None},
    ]
    assert len(executions(aws, parents)) == 1


def test_a_quorum_over_the_distinct_members_counts_references_by_their_id(
    aws: Aws, parents: dict[str, str], tmp_path: Path
) -> None:
    # GIVEN a payload, and a reference to the same payload stored in S3
    aws.s3.put_object(Bucket=BUCKET, Key="a.json", Body=json.dumps(payload("a")).encode())
    both = write(tmp_path, "both.json", [payload("a"), {"url": f"s3://{BUCKET}/a.json"}])
    # WHEN a parent needing both is asked for
    result = wait(both, "--quorum", "2")
    # THEN two entries are one distinct member: refused, nothing started
    refused(result, "quorum 2 is more than the 1 distinct payloads")
    assert executions(aws, parents) == []


@pytest.mark.parametrize(
    ("url", "cause"),
    [
        ("https://example.com/m.jsonl", "payloads_url must be an s3:// url, got '{url}'"),
        ("s3://members", "malformed manifest url '{url}' (expected s3://bucket/key)"),
        ("s3://members/missing.jsonl", "manifest {url} cannot be read: NoSuchKey"),
        ("s3://members/empty.jsonl", "manifest {url} has no entry"),
        ("s3://members/bad.jsonl", "{url}[1]: {url}[1].process: Field required"),
    ],
)
def test_a_manifest_the_tracker_cannot_read_starts_nothing(
    aws: Aws, parents: dict[str, str], url: str, cause: str
) -> None:
    # GIVEN an empty manifest, and one whose second entry is no payload
    aws.s3.put_object(Bucket=BUCKET, Key="empty.jsonl", Body=b"")
    put_manifest(aws, "bad.jsonl", [payload("a"), {"features": []}])
    # WHEN a parent is asked for over the url
    result = wait("--manifest-url", url)
    # THEN it is refused with what the tracker would have told the parent
    assert result.exit_code == 3, result.output
    assert result.stderr.startswith(
        f"error: nothing started: the parent would fail InvalidJoin: {cause.format(url=url)}"
    ), result.stderr
    assert executions(aws, parents) == []


def test_a_quorum_is_checked_against_a_manifest_that_ends_within_the_first_chunk(
    aws: Aws, parents: dict[str, str]
) -> None:
    # GIVEN a manifest of three entries, two of them the same payload, and one of 101
    # distinct members: longer than the tracker's first chunk
    small = put_manifest(aws, "m.jsonl", [payload("a"), payload("b"), payload("a")])
    long = put_manifest(aws, "long.jsonl", [payload(f"i-{n}") for n in range(101)])
    # WHEN parents needing more than their members are asked for
    over_small = wait("--manifest-url", small, "--quorum", "3")
    over_long = wait("--manifest-url", long, "--quorum", "500", "--json")
    # THEN the small one is refused (2 distinct members) and nothing started for it; the
    # long one starts, as the tracker counts it once every chunk is registered
    refused(over_small, "quorum 3 is more than the 2 distinct payloads")
    assert over_long.exit_code == 0, over_long.output
    assert json.loads(over_long.stdout)["status"] == "SUCCEEDED"
    assert len(executions(aws, parents)) == 1


def test_a_deadline_the_tracker_would_refuse_starts_nothing_and_a_good_one_is_sent(
    aws: Aws, parents: dict[str, str], tmp_path: Path
) -> None:
    # GIVEN two payload files
    files = [write(tmp_path, f"{item}.json", payload(item)) for item in ("a", "b")]
    # WHEN a join needing 3 of them at its deadline, or one with a past deadline, is asked for
    over = wait(*files, "--deadline", "60", "--min-succeeded", "3")
    past = wait(*files, "--deadline", "2001-01-01T00:00:00Z")
    alone = wait(*files, "--min-succeeded", "1")
    # THEN each is refused with the tracker's cause naming the field; no parent exists
    refused(over, "join.min_succeeded 3 is more than the 2 distinct payloads")
    assert "join.deadline 2001-01-01T00:00:00Z is in the past" in past.stderr
    assert "join.min_succeeded needs a join.deadline" in alone.stderr
    assert executions(aws, parents) == []
    # AND a deadline in seconds starts wait-for-join (it implies --join) with both fields
    started = wait(*files, "--deadline", "60", "--min-succeeded", "1", "--no-follow")
    assert started.exit_code == 0, started.output
    (arn,) = executions(aws, parents)
    sent = json.loads(aws.sfn.describe_execution(executionArn=arn)["input"])
    assert (sent["deadline"], sent["min_succeeded"]) == (60, 1)
    assert "wait-for-join" in arn


def test_on_parent_gone_cancel_starts_wait_for_join_with_it_and_a_typo_is_refused(
    aws: Aws, parents: dict[str, str], tmp_path: Path
) -> None:
    # GIVEN two payload files
    files = [write(tmp_path, f"{item}.json", payload(item)) for item in ("a", "b")]
    # WHEN the option is misspelt THEN nothing starts (the CLI names the choices)
    typo = wait(*files, "--on-parent-gone", "stop")
    assert typo.exit_code == 2
    assert "keep" in typo.output
    assert "cancel" in typo.output
    assert executions(aws, parents) == []
    # WHEN it is cancel THEN wait-for-join starts (it implies --join) with the field
    started = wait(*files, "--on-parent-gone", "cancel", "--no-follow")
    assert started.exit_code == 0, started.output
    (arn,) = executions(aws, parents)
    assert "wait-for-join" in arn
    sent = json.loads(aws.sfn.describe_execution(executionArn=arn)["input"])
    assert sent["on_parent_gone"] == "cancel"
