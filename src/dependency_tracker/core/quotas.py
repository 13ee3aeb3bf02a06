"""The figures a join's registration time, and the defaults sized for it, are derived from.

One place for them: template.yaml's defaults (``JoinMaxConcurrency``, ``MaxWaitSeconds``,
``QueueAgeAlarmSeconds``), docs/performance.md ("Registration time on AWS") and the test
that checks the one against the other (tests/unit/template_contract/test_registration_defaults.py).

Step Functions' ``StartExecution`` quota for Standard workflows is a token bucket per
account and region (the Step Functions developer guide, "Quotas", API action
throttling). A join of ``n`` members cannot register faster than the bucket allows,
``(n - burst) / refill`` (the floor); it reaches the floor when its chunks together ask
for starts at least as fast as the refill, and throttled starts wait for tokens
(core/pacing.py) instead of failing.
"""

from __future__ import annotations

import math

from pydantic import BaseModel

# The largest join the defaults are sized to register and answer.
SIZED_JOIN_MEMBERS = 100_000
# Members per chunk (template JoinChunkSize, settings.DEFAULT_JOIN_CHUNK_SIZE).
CHUNK_MEMBERS = 100
# A chunk's invocation, unthrottled, at the slow end of the assumed call latencies
# (bench/prices.json, aws_registration): 407 calls, 9.7 s, so 10.3 members a second.
# Sizing on the slow end makes the fast end reach the floor too (it is then throttled,
# and waits).
SLOW_CHUNK_SECONDS = 9.7
# The join message's own invocation at 100,000 members, slow end: cold start, the
# manifest streamed, 100 SendMessageBatch calls.
SLOW_FAN_OUT_SECONDS = 6.7
# What a registration at the defaults may take over the floor.
FLOOR_MARGIN = 1.15


class StartQuota(BaseModel, frozen=True):
    """Step Functions' ``StartExecution`` token bucket in one region."""

    burst: int
    refill_per_second: float

    def floor_seconds(self, members: int) -> float:
        """The least time ``members`` starts take: what the bucket holds goes at once."""
        return max(0, members - self.burst) / self.refill_per_second

    def starts_per_second_needed(self, members: int) -> float:
        """Starts a second a join must ask for to keep up with the refill over its registration."""
        if members <= self.burst:
            return 0.0
        return self.refill_per_second * members / (members - self.burst)


# us-east-1, us-west-2 and eu-west-1.
LARGE_REGIONS_QUOTA = StartQuota(burst=1300, refill_per_second=300)
# Every other region.
OTHER_REGIONS_QUOTA = StartQuota(burst=800, refill_per_second=150)
QUOTAS = {"large regions": LARGE_REGIONS_QUOTA, "other regions": OTHER_REGIONS_QUOTA}


def members_per_second(chunk_seconds: float = SLOW_CHUNK_SECONDS) -> float:
    """Members one unthrottled chunk invocation starts a second."""
    return CHUNK_MEMBERS / chunk_seconds


def registration_seconds(
    members: int,
    concurrency: int,
    quota: StartQuota,
    *,
    chunk_seconds: float = SLOW_CHUNK_SECONDS,
    fan_out_seconds: float = SLOW_FAN_OUT_SECONDS,
) -> float:
    """Time to register a join: the slower of the chunks and the bucket, plus the fan-out."""
    asked = members / (concurrency * members_per_second(chunk_seconds))
    return max(asked, quota.floor_seconds(members)) + fan_out_seconds


def join_max_concurrency(quota: StartQuota = LARGE_REGIONS_QUOTA) -> int:
    """The least ``JoinMaxConcurrency`` whose chunks ask for the refill at the slow end."""
    needed = quota.starts_per_second_needed(SIZED_JOIN_MEMBERS)
    return math.ceil(needed / members_per_second())


def paced_chunk_seconds(concurrency: int, quota: StartQuota) -> float:
    """A chunk's time when ``concurrency`` chunks share the refill (throttled, paced)."""
    return concurrency * CHUNK_MEMBERS / quota.refill_per_second
