"""``publish --manifest``: a join manifest built, checked and uploaded, through the real CLI.

One ``LocalStack`` in server mode serves the module; the CLI reaches it with
``--endpoint-url``, so the payload bucket comes from serve's naming rule.
"""

from __future__ import annotations

import hashlib
import io
import json
from typing import TYPE_CHECKING, Any

import pytest
from typer.testing import CliRunner

from dependency_tracker.joins.manifest import ManifestReader, manifest_text
from dependency_tracker_cli.__main__ import app
from dependency_tracker_local import LocalStack
from tests.e2e.conftest import dependency, dependency_id

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from typer.testing import Result

pytestmark = pytest.mark.e2e

REFERENCE = {"url": "s3://elsewhere/payloads/ref.json"}


@pytest.fixture(scope="module")
def served() -> Iterator[LocalStack]:
    with LocalStack(prefix="deptrack", port=0, sink=io.StringIO()) as stack:
        yield stack


def cli(stack: LocalStack, *args: str) -> Result:
    return CliRunner().invoke(
        app,
        ["publish", *args, "--endpoint-url", stack.outputs["EndpointUrl"]],
        env={"DEPTRACK_PREFIX": None, "DEPTRACK_STACK_NAME": None, "DEPTRACK_PAYLOAD_BUCKET": None},
    )


def entries() -> list[dict[str, Any]]:
    return [dependency("m-1"), REFERENCE, dependency("m-2"), dependency("m-1")]


def folder_of(tmp_path: Path, documents: list[Any]) -> Path:
    folder = tmp_path / "members"
    folder.mkdir()
    for index, document in enumerate(documents):
        (folder / f"{index:03d}.json").write_text(json.dumps(document, indent=2))
    return folder


def stored_entries(stack: LocalStack, url: str) -> list[dict[str, Any]]:
    part = ManifestReader(stack.client("s3")).read(url, limit=100)
    assert part.end
    return part.entries


def test_a_folder_becomes_a_manifest_in_the_payload_bucket(
    served: LocalStack, tmp_path: Path
) -> None:
    # GIVEN a folder of payload and {url} files (and a file that is not *.json)
    folder = folder_of(tmp_path, entries())
    (folder / "notes.txt").write_text("not a member")
    # WHEN it is published as a manifest
    result = cli(served, "--manifest", str(folder))
    # THEN the url of a content-named JSON Lines object in the payload bucket is printed
    assert result.exit_code == 0, result.output
    text = manifest_text(entries())
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    bucket = served.outputs["PayloadBucketName"]
    url = f"s3://{bucket}/manifests/{digest}.jsonl"
    assert result.stdout == f"{url}\n"
    # AND it holds the entries in name order, the reference as given
    assert stored_entries(served, url) == entries()
    body = served.client("s3").get_object(Bucket=bucket, Key=f"manifests/{digest}.jsonl")
    assert body["Body"].read().decode("utf-8") == text
    # AND the duplicate id is reported
    assert "4 entries, 3 distinct" in result.stderr
    assert dependency_id("m-1") in result.stderr


def test_a_json_lines_file_gives_the_same_manifest_and_json_output(
    served: LocalStack, tmp_path: Path
) -> None:
    # GIVEN the same entries as JSON Lines, with a blank line
    lines = [json.dumps(entry) for entry in entries()]
    path = tmp_path / "members.jsonl"
    path.write_text("\n".join(lines[:2]) + "\n\n" + "\n".join(lines[2:]) + "\n")
    # WHEN it is published with --json
    result = cli(served, "--manifest", str(path), "--json")
    # THEN the same object is named, with its counts
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    size = len(manifest_text(entries()).encode("utf-8"))
    assert data == {
        "url": data["url"],
        "entries": 4,
        "distinct": 3,
        "bytes": size,
        "duplicates": [dependency_id("m-1")],
    }
    assert data["url"].startswith(f"s3://{served.outputs['PayloadBucketName']}/manifests/")
    assert stored_entries(served, data["url"]) == entries()


def test_bucket_option_uploads_elsewhere(served: LocalStack, tmp_path: Path) -> None:
    served.client("s3").create_bucket(Bucket="other-bucket")
    path = tmp_path / "one.jsonl"
    path.write_text(json.dumps(dependency("solo")) + "\n")
    result = cli(served, "--manifest", str(path), "--bucket", "other-bucket")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("s3://other-bucket/manifests/")
    assert stored_entries(served, result.stdout.strip()) == [dependency("solo")]


@pytest.mark.parametrize(
    ("lines", "code", "message"),
    [
        (["{}"], 3, "members.jsonl:1: payload.process: Field required"),
        ([json.dumps(dependency("a")), "[1]"], 3, "members.jsonl:2: expected a JSON object"),
        (["{not json"], 3, "members.jsonl:1: not valid JSON"),
        (['{"url": "https://x/y"}'], 3, "members.jsonl:1: url must be an s3://bucket/key url"),
        (["", "  "], 3, "no entry"),
        ([json.dumps(dependency("a") | {"process": [{"workflow": "nope"}]})], 4, "deptrack-nope"),
    ],
    ids=["not-a-payload", "not-an-object", "not-json", "bad-url", "empty", "unknown-workflow"],
)
def test_bad_manifests_are_refused_with_the_reason(
    served: LocalStack, tmp_path: Path, lines: list[str], code: int, message: str
) -> None:
    path = tmp_path / "members.jsonl"
    path.write_text("\n".join(lines) + "\n")
    result = cli(served, "--manifest", str(path))
    assert result.exit_code == code, result.output
    assert message in result.stderr
    assert result.stdout == ""


def test_unknown_workflows_pass_without_the_check(served: LocalStack, tmp_path: Path) -> None:
    path = tmp_path / "members.jsonl"
    path.write_text(json.dumps(dependency("a") | {"process": [{"workflow": "later"}]}) + "\n")
    result = cli(served, "--manifest", str(path), "--no-check-workflows")
    assert result.exit_code == 0, result.output


def test_an_empty_folder_and_wrong_combinations_are_refused(
    served: LocalStack, tmp_path: Path
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "a.txt").write_text("{}")
    refused = cli(served, "--manifest", str(empty))
    assert (refused.exit_code, "no *.json file" in refused.stderr) == (3, True)
    path = tmp_path / "m.jsonl"
    path.write_text(json.dumps(dependency("a")) + "\n")
    both = cli(served, "--manifest", str(path), str(path))
    assert (both.exit_code, "no FILE arguments" in both.stderr) == (2, True)
    waiting = cli(served, "--manifest", str(path), "--wait")
    assert (waiting.exit_code, "no --wait" in waiting.stderr) == (2, True)
    missing = cli(served, "--manifest", str(tmp_path / "absent.jsonl"))
    assert missing.exit_code == 2
    nothing = cli(served)
    assert (nothing.exit_code, "nothing to publish" in nothing.stderr) == (2, True)
