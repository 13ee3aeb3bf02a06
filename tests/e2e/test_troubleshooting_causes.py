"""docs/troubleshooting.md's causes are what a parent on the embedded stack is told.

Each row of the "What a cause says" table names a case; this runs it through
the real parent state machines and compares the failed execution's error and
cause with the row (``…`` in the docs stands for an id or ARN of the run).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.e2e.conftest import dependency, finished, start_parent

if TYPE_CHECKING:
    from dependency_tracker_local import LocalStack

pytestmark = pytest.mark.e2e

DOC = Path(__file__).resolve().parents[2] / "docs" / "troubleshooting.md"
ROW = re.compile(r"^\| (?P<case>[^|]+?) \| `(?P<error>\w+)` \| `(?P<cause>\{.*\})` \|$")


def documented() -> dict[str, tuple[str, str]]:
    """Case → (error, cause) from the doc's table."""
    text = DOC.read_text(encoding="utf-8").split("### What a cause says", 1)[1]
    rows = (ROW.match(line) for line in text.split("\n## ", 1)[0].splitlines())
    return {m["case"]: (m["error"], m["cause"]) for m in rows if m is not None}


def join(stack: LocalStack, name: str, **given: Any) -> str:
    arn = stack.outputs["StateMachines"]["wait-for-join"]
    body = {"timeout_seconds": 120, **given}
    execution = stack.client("stepfunctions").start_execution(
        stateMachineArn=arn, name=name, input=json.dumps(body)
    )
    return str(execution["executionArn"])


def run(stack: LocalStack, case: str) -> str:
    """Start the parent the case describes; returns its execution ARN."""
    bucket = stack.outputs["PayloadBucketName"]
    single: dict[str, dict[str, Any]] = {
        "the child workflow failed": dependency("ts-fail", outcome="fail"),
        "`replace` is not a boolean": dependency("ts-yes")
        | {"process": [{"workflow": "simulate", "replace": "yes"}]},
        'a `{"url"}` in a bucket that does not exist': {"url": "s3://no-such-bucket-here/p.json"},
        "a payload id with a lone surrogate": dependency("ts-sur") | {"id": "sx/\ud800"},
        "a payload nested past 100 levels": dependency("ts-deep")
        | {"properties": json.loads("[" * 150 + "]" * 150)},
    }
    if case in single:
        return start_parent(stack, f"ts-{len(case)}", [single[case]], timeout_seconds=120)
    if case == 'a join\'s `quorum` given as `"2"`':
        return join(stack, "ts-quorum", dependencies=[dependency("ts-q1")], quorum="2")
    if case == "a join's manifest that does not exist":
        return join(stack, "ts-manifest", dependencies_url=f"s3://{bucket}/manifests/none.jsonl")
    if case == "a join every member of which failed":
        failing = [dependency(f"ts-u{i}", outcome="fail") for i in (1, 2)]
        return join(stack, "ts-unreachable", dependencies=failing, quorum=1)
    raise AssertionError(f"docs/troubleshooting.md documents a case this test does not run: {case}")


@pytest.fixture(scope="module")
def told(stack: LocalStack) -> dict[str, dict[str, Any]]:
    """Every documented case's parent, started together and described once stopped."""
    started = {case: run(stack, case) for case in documented()}
    described = {case: finished(stack, arn, timeout=60) for case, arn in started.items()}
    if stack.iam is not None:
        # The one case whose call IAM refuses: the process role may not read that bucket.
        refused = [d for d in stack.iam.denials if "no-such-bucket-here" in d.resource]
        assert refused
        stack.iam.denials[:] = [d for d in stack.iam.denials if d not in refused]
    return described


def test_the_table_documents_every_case() -> None:
    assert len(documented()) == 8


@pytest.mark.parametrize("case", sorted(documented()))
def test_a_documented_cause_is_what_the_parent_is_told(
    told: dict[str, dict[str, Any]], case: str
) -> None:
    error, cause = documented()[case]
    described = told[case]
    assert (described["status"], described["error"]) == ("FAILED", error)
    pattern = ".*?".join(re.escape(part) for part in cause.split("…"))
    assert re.fullmatch(pattern, described["cause"]), described["cause"]
