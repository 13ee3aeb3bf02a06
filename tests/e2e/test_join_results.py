"""A join through the real wait-for-join: its summary names a results manifest of every member."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

from dependency_tracker import read_results
from dependency_tracker.core.enums import PayloadState
from dependency_tracker.joins.store import JoinStore
from tests.conftest import wait_until
from tests.e2e.conftest import dependency, dependency_id, finished, waiters
from tests.e2e.test_joins import start_join

if TYPE_CHECKING:
    from dependency_tracker_local import LocalStack

pytestmark = pytest.mark.e2e


def test_a_decided_join_names_its_results_manifest(stack: LocalStack) -> None:
    # GIVEN a 2-of-3 join through the stack's wait-for-join, one member slow
    members = [dependency("jr-1"), dependency("jr-2"), dependency("jr-slow", seconds=4)]
    ids = [dependency_id("jr-1"), dependency_id("jr-2"), dependency_id("jr-slow")]
    # WHEN it is decided by the first two
    described = finished(stack, start_join(stack, "results-manifest", members, quorum=2))
    # THEN the parent's summary names the manifest, which lists every member in order
    assert described["status"] == "SUCCEEDED"
    summary = json.loads(described["output"])["join"]
    url = summary["results_url"]
    assert url.startswith(f"s3://{stack.outputs['PayloadBucketName']}/joins/")
    s3 = stack.client("s3")
    first = list(read_results(url, s3=s3))
    assert [member.payload_id for member in first] == ids
    assert [member.state for member in first[:2]] == [PayloadState.SUCCEEDED] * 2
    assert all(member.execution_arn for member in first[:2])
    # AND once the slow member ends and is counted, the manifest is rewritten as final
    dependencies = waiters(stack)
    joins = JoinStore(dependencies.client, dependencies.table_name)

    def final() -> bool:
        # The flag is claimed before the rewrite: the object is read until it is the new one.
        row = joins.get(summary["join_id"])
        states = [member.state for member in read_results(url, s3=s3)]
        done = states == [PayloadState.SUCCEEDED] * 3
        return row is not None and row.results_final_at is not None and done

    wait_until(final, timeout=30)
