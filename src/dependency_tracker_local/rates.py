"""Step Functions' API rates in the platform model: token buckets in moto's request path.

AWS throttles some Step Functions actions with a token bucket per account and region
(AWS's Step Functions quotas page, "Quotas related to API action throttling"): each call
takes a token, the bucket refills continuously at its rate up to its size, and a call
that finds it empty is refused with ``ThrottlingException`` ("Rate exceeded", HTTP 400).
moto throttles nothing, so a join that outruns the refill registers at full speed
locally. While :func:`throttling` is active, every ``StartExecution`` (Standard and
Express buckets apart), ``SendTaskSuccess``, ``SendTaskFailure`` and
``SendTaskHeartbeat`` moto serves in this process takes a token from its bucket first,
and is refused as AWS refuses it when there is none. botocore sees AWS's error, so its
retry modes retry it as they would against AWS, and each retry is a real call that
takes a token too.

A :class:`RateModel` holds the figures (divided by its ``scale``, so a test reaches the
throttled regime with a few hundred calls), one bucket per account, region and bucket
name, and counts what it admitted and refused. ``EmbeddedStack`` activates one with the
platform model (``rate_scale``, ``DEPTRACK_RATE_SCALE``); ``docs/local.md`` lists the
figures.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from moto.core.exceptions import AWSError

from dependency_tracker.core.quotas import LARGE_REGIONS_QUOTA, OTHER_REGIONS_QUOTA, StartQuota
from dependency_tracker_local.patching import Patch, Switched

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

ENV_SCALE = "DEPTRACK_RATE_SCALE"
# The regions with the larger Step Functions buckets (the quotas page names these three).
LARGE_REGIONS = frozenset({"us-east-1", "us-west-2", "eu-west-1"})
START_EXECUTION = "StartExecution"
START_EXPRESS = "StartExecution.Express"
SEND_TASK_SUCCESS = "SendTaskSuccess"
SEND_TASK_FAILURE = "SendTaskFailure"
SEND_TASK_HEARTBEAT = "SendTaskHeartbeat"
THROTTLED_MESSAGE = "Rate exceeded"


@dataclass(frozen=True)
class Quota:
    """One bucket's figures: its size (the burst) and its refill, tokens a second."""

    burst: float
    refill: float

    def floor_seconds(self, calls: int) -> float:
        """The least time ``calls`` calls take from a full bucket: ``(n - burst) / refill``."""
        return max(0.0, calls - self.burst) / self.refill


def _start_quota(quota: StartQuota) -> Quota:
    return Quota(quota.burst, quota.refill_per_second)


# Bucket name -> (large regions, all other regions), as AWS's quotas page gives them.
# The page lists each SendTask* action on its own row: each has a bucket of its own.
# StartExecution's figures are the ones the tracker's defaults are sized on (core/quotas.py).
QUOTAS: dict[str, tuple[Quota, Quota]] = {
    START_EXECUTION: (_start_quota(LARGE_REGIONS_QUOTA), _start_quota(OTHER_REGIONS_QUOTA)),
    START_EXPRESS: (Quota(6000, 6000), Quota(6000, 6000)),
    SEND_TASK_SUCCESS: (Quota(3000, 500), Quota(1500, 300)),
    SEND_TASK_FAILURE: (Quota(3000, 500), Quota(1500, 300)),
    SEND_TASK_HEARTBEAT: (Quota(3000, 500), Quota(1500, 300)),
}


def aws_quota(name: str, region: str) -> Quota:
    """AWS's figures for bucket ``name`` in ``region`` (unscaled)."""
    large, other = QUOTAS[name]
    return large if region in LARGE_REGIONS else other


def scale_from_env() -> float:
    """``DEPTRACK_RATE_SCALE`` (1: AWS's own figures).

    Raises:
        ValueError: The variable is not a number of at least 1.
    """
    text = os.environ.get(ENV_SCALE, "").strip()
    scale = float(text) if text else 1.0
    if scale < 1:
        msg = f"{ENV_SCALE} must be a number of at least 1, not {text!r}"
        raise ValueError(msg)
    return scale


@dataclass
class TokenBucket:
    """A bucket that starts full and refills continuously (thread-safe, monotonic)."""

    quota: Quota
    clock: Callable[[], float] = time.monotonic
    _tokens: float = field(init=False)
    _at: float = field(init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        self._tokens = self.quota.burst
        self._at = self.clock()

    def take(self) -> bool:
        """Take one token; False (nothing taken) when the bucket holds less than one."""
        with self._lock:
            now = self.clock()
            # max(): a clock that went back (an injected one) refills nothing.
            self._tokens = min(
                self.quota.burst, self._tokens + max(0.0, now - self._at) * self.quota.refill
            )
            self._at = max(self._at, now)
            if self._tokens < 1:
                return False
            self._tokens -= 1
            return True


@dataclass
class RateModel:
    """Step Functions' buckets, divided by ``scale``, per account and region.

    ``admitted`` and ``throttled`` count the calls let through and refused, by bucket
    name (``StartExecution``, ``StartExecution.Express``, ``SendTaskSuccess``, ...),
    retries included.
    """

    scale: float = 1.0
    clock: Callable[[], float] = time.monotonic
    admitted: Counter[str] = field(default_factory=Counter)
    throttled: Counter[str] = field(default_factory=Counter)
    _buckets: dict[tuple[str, str, str], TokenBucket] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        if self.scale < 1:
            msg = f"the rate scale must be at least 1, not {self.scale}"
            raise ValueError(msg)

    def quota(self, name: str = START_EXECUTION, region: str = "us-east-1") -> Quota:
        """The effective figures of bucket ``name``: AWS's divided by the scale.

        A bucket holds at least one token, or nothing would ever pass.
        """
        real = aws_quota(name, region)
        return Quota(max(1.0, real.burst / self.scale), real.refill / self.scale)

    def floor_seconds(
        self, calls: int, name: str = START_EXECUTION, region: str = "us-east-1"
    ) -> float:
        """The least time ``calls`` calls of bucket ``name`` take at the effective figures."""
        return self.quota(name, region).floor_seconds(calls)

    def admit(self, name: str, region: str, account: str = "") -> bool:
        """Take a token of bucket ``name`` for one call; count the outcome."""
        key = (account, region, name)
        with self._lock:
            bucket = self._buckets.get(key)
            if bucket is None:
                bucket = self._buckets[key] = TokenBucket(self.quota(name, region), self.clock)
        allowed = bucket.take()
        with self._lock:
            (self.admitted if allowed else self.throttled)[name] += 1
        return allowed


class ThrottlingError(AWSError):
    """Step Functions' answer to a call over its bucket."""

    TYPE = "ThrottlingException"
    STATUS = 400


# ---------------------------------------------------------------------- moto's request path

_active: list[RateModel] = []
_active_lock = threading.Lock()


def current() -> RateModel | None:
    """The model of the innermost active :func:`throttling` block, if any."""
    with _active_lock:
        return _active[-1] if _active else None


def _express(handler: Any) -> bool:
    arn = handler._get_param("stateMachineArn")
    try:
        machine = handler.stepfunction_backend.describe_state_machine(arn)
    except Exception:  # noqa: BLE001 - moto answers the call itself with its own error
        return False
    return getattr(machine, "type", "STANDARD") == "EXPRESS"


def _throttled(name: str | None) -> Callable[[Callable[[Any], Any]], Callable[[Any], Any]]:
    """A factory for :class:`Switched`: moto's action, behind bucket ``name``.

    ``None``: StartExecution, whose bucket depends on the state machine's type.
    """

    def factory(original: Callable[[Any], Any]) -> Callable[[Any], Any]:
        @functools.wraps(original)
        def action(handler: Any) -> Any:
            model = current()
            if model is not None:
                bucket = name or (START_EXPRESS if _express(handler) else START_EXECUTION)
                if not model.admit(bucket, handler.region, handler.current_account):
                    raise ThrottlingError(THROTTLED_MESSAGE)
            return original(handler)

        return action

    return factory


def _patches() -> list[Patch]:
    from moto.stepfunctions.responses import StepFunctionResponse  # noqa: PLC0415

    return [
        (StepFunctionResponse, "start_execution", _throttled(None)),
        (StepFunctionResponse, "send_task_success", _throttled(SEND_TASK_SUCCESS)),
        (StepFunctionResponse, "send_task_failure", _throttled(SEND_TASK_FAILURE)),
        (StepFunctionResponse, "send_task_heartbeat", _throttled(SEND_TASK_HEARTBEAT)),
    ]


_switch = Switched(_patches)


@contextlib.contextmanager
def throttling(model: RateModel) -> Iterator[RateModel]:
    """Throttle moto's Step Functions calls, in this process, with ``model`` for the block.

    Re-entrant: the innermost block's model decides while it runs.
    """
    with _active_lock:
        _active.append(model)
    try:
        with _switch.active():
            yield model
    finally:
        with _active_lock:
            _active.remove(model)
