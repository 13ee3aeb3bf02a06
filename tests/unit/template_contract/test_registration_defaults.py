"""A 100,000-member all-of join registers, and is answered, with the template's defaults.

The figures (Step Functions' StartExecution bucket, a chunk's duration at the slow end
of the call latencies) are dependency_tracker.core.quotas'; the defaults are read from
template.yaml. Registration must finish within 1.15 x the bucket's floor, well within
the parent's wait (MaxWaitSeconds), and before the join queue's oldest chunk reaches
JoinQueueAgeAlarm's threshold, in every region.
"""

from __future__ import annotations

from typing import Any

import pytest

from dependency_tracker.core import quotas
from dependency_tracker.handlers.deadline import DEADLINE_RESERVE_SECONDS


def default(template: dict[str, Any], name: str) -> int:
    return int(template["Parameters"][name]["Default"])


@pytest.mark.parametrize("region", sorted(quotas.QUOTAS))
def test_a_100000_member_join_registers_at_the_floor_with_the_defaults(
    template: dict[str, Any], region: str
) -> None:
    quota = quotas.QUOTAS[region]
    members = quotas.SIZED_JOIN_MEMBERS
    # GIVEN the template's defaults
    concurrency = default(template, "JoinMaxConcurrency")
    chunk = default(template, "JoinChunkSize")
    assert chunk == quotas.CHUNK_MEMBERS
    # WHEN a 100,000-member join registers (slow calls: the fast end is throttled sooner)
    seconds = quotas.registration_seconds(members, concurrency, quota)
    floor = quota.floor_seconds(members)
    # THEN it takes at most 1.15 x the StartExecution floor
    assert seconds <= quotas.FLOOR_MARGIN * floor, (seconds, floor)
    # AND the parent's default wait holds it well (the rest is the members' run time)
    wait = default(template, "MaxWaitSeconds")
    assert seconds <= wait / 3, (seconds, wait)
    # AND its last chunk waits on the join queue less than the age alarm's threshold
    assert seconds < default(template, "QueueAgeAlarmSeconds")


@pytest.mark.parametrize("region", sorted(quotas.QUOTAS))
def test_a_paced_chunk_finishes_inside_its_invocation_at_the_default_concurrency(
    template: dict[str, Any], region: str
) -> None:
    # GIVEN every chunk of the default concurrency sharing the refill (throttled)
    timeout = int(template["Globals"]["Function"]["Timeout"])
    concurrency = default(template, "JoinMaxConcurrency")
    paced = quotas.paced_chunk_seconds(concurrency, quotas.QUOTAS[region])
    # THEN a chunk starts its members before its deadline: it is not sent back every time
    assert paced < timeout - DEADLINE_RESERVE_SECONDS


def test_the_default_concurrency_is_the_one_the_figures_ask_for(template: dict[str, Any]) -> None:
    # More would only throttle sooner; fewer would not reach the floor at the slow end.
    assert default(template, "JoinMaxConcurrency") == quotas.join_max_concurrency()
