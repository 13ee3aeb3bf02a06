"""The Map parent at scale: 1,000 dependencies by ``{"url"}`` with cirrus-length ids,
and its state limit reached by the Map's output (~130 ids of 2,000 characters).

Runs only with ``DEPTRACK_CHAOS=1`` (``make chaos``); ``DEPTRACK_MAP_DEPENDENCIES``
changes the count (at most 1,500, the parent's limit) and ``DEPTRACK_MAP_ID_LENGTH``
the payload id length (default 100, the long end of cirrus ids). It prints the
wall time, the peak state size and the history events it measured.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from dependency_tracker.core.limits import SFN_MAX_HISTORY_EVENTS, SFN_MAX_PAYLOAD_BYTES
from tests.chaos.conftest import chaos_only
from tests.e2e.conftest import dependency_id
from tests.e2e.parent_limits import (
    MAX_DEPENDENCIES,
    compact_size,
    fits,
    item_for_id_length,
    moto_size,
    run_parent,
    state_after_map,
    upload,
)

if TYPE_CHECKING:
    import pytest

    from dependency_tracker_local import LocalStack

pytestmark = chaos_only


# Long enough that ~130 dependencies fill the state, short enough for a DynamoDB key.
LONG_ID = 2000
TIMEOUT = 300


def largest_count_that_fits(ids: list[str]) -> int:
    """The most leading ``ids`` whose Map output fits 256 KiB, counted both ways."""
    count = 0
    while count < len(ids) and fits(state_after_map(ids[: count + 1], timeout_seconds=TIMEOUT)):
        count += 1
    return count


def test_map_output_just_under_and_just_over_the_state_limit(stack: LocalStack) -> None:
    items = [item_for_id_length("edge", index, LONG_ID) for index in range(140)]
    ids = [dependency_id(item) for item in items]
    under = largest_count_that_fits(ids)
    assert under < len(ids)
    over = under + 1
    # the boundary is the same whether spaces are counted (moto) or not (compact JSON)
    assert compact_size(state_after_map(ids[:over], timeout_seconds=TIMEOUT)) >= (
        SFN_MAX_PAYLOAD_BYTES
    )
    references = upload(stack, "edge", items[:over])
    # GIVEN `under` dependencies whose summaries just fit: the parent succeeds
    run = run_parent(stack, "state-under", references[:under], deadline=180)
    assert run.described["status"] == "SUCCEEDED", run.described.get("error")
    assert [d["payload_id"] for d in run.output["dependencies"]] == ids[:under]
    # its largest state is the Map's output, as predicted, just under the limit
    predicted = state_after_map(ids[:under], timeout_seconds=TIMEOUT)
    assert run.peak_state_bytes == compact_size(predicted)
    assert (
        SFN_MAX_PAYLOAD_BYTES - 2 * (LONG_ID + 40) < moto_size(predicted) < (SFN_MAX_PAYLOAD_BYTES)
    )
    # WHEN one more dependency is added (the others are replayed)
    run = run_parent(stack, "state-over", references, deadline=180)
    # THEN the Map's output exceeds the limit, and the parent fails with Step Functions'
    # own error name: no state can catch its own output's size (docs/patterns.md)
    assert (run.described["status"], run.described["error"]) == (
        "FAILED",
        "States.DataLimitExceeded",
    )
    assert run.count("MapIterationSucceeded") == over
    assert stack.dead_letters == {"update-state": [], "callback": []}


def test_thousand_dependencies_by_url(
    stack: LocalStack, capsys: pytest.CaptureFixture[str]
) -> None:
    count = int(os.environ.get("DEPTRACK_MAP_DEPENDENCIES", "1000"))
    id_length = int(os.environ.get("DEPTRACK_MAP_ID_LENGTH", "100"))
    assert count <= MAX_DEPENDENCIES
    items = [item_for_id_length("scale", index, id_length) for index in range(count)]
    ids = [dependency_id(item) for item in items]
    assert {len(pid) for pid in ids} == {id_length}
    # GIVEN count dependencies stored in the payload bucket, passed as {"url"}
    references = upload(stack, "scale", items)
    # WHEN one Map parent waits on all of them
    run = run_parent(stack, "map-scale", references, deadline=120 + count * 1.5)
    # THEN it succeeds with one summary per dependency, in input order
    assert run.described["status"] == "SUCCEEDED", run.described.get("error")
    assert [d["payload_id"] for d in run.output["dependencies"]] == ids
    # AND its largest state is the Map's output, as predicted, well within 256 KiB
    state = state_after_map(ids, timeout_seconds=300)
    assert run.peak_state_bytes == compact_size(state)
    predicted = moto_size(state)
    assert predicted < SFN_MAX_PAYLOAD_BYTES
    # AND its history is 8 events per dependency plus 14
    events = len(run.events)
    assert run.count("MapIterationSucceeded") == count
    assert events == 8 * count + 14 < SFN_MAX_HISTORY_EVENTS
    assert stack.dead_letters == {"update-state": [], "callback": []}
    per_dependency = (predicted - moto_size(state_after_map([], timeout_seconds=300))) / count
    with capsys.disabled():
        print(  # noqa: T201  (make chaos shows the measurement)
            f"\nMap parent: {count} dependencies by url, ids of {id_length} characters: "
            f"{run.seconds:.1f} s, peak state {run.peak_state_bytes:,} bytes "
            f"(moto counts {predicted:,}; {per_dependency:.1f} per dependency), "
            f"{events:,} history events"
        )
