"""Runtime settings: the one place that reads environment variables."""

from __future__ import annotations

import os
import re
from functools import cache
from typing import Self

from pydantic import BaseModel, Field

from dependency_tracker.core.errors import ConfigurationError

ENV_STATE_TABLE = "DEPTRACK_STATE_TABLE"
ENV_DEPENDENCY_TABLE = "DEPTRACK_DEPENDENCY_TABLE"
ENV_PREFIX = "DEPTRACK_PREFIX"
ENV_WORKFLOW_ARN_PREFIX = "DEPTRACK_WORKFLOW_ARN_PREFIX"
ENV_WAITER_RETENTION_DAYS = "DEPTRACK_WAITER_RETENTION_DAYS"
ENV_PAYLOAD_BUCKET = "DEPTRACK_PAYLOAD_BUCKET"
ENV_CLAIM_LEASE_SECONDS = "DEPTRACK_CLAIM_LEASE_SECONDS"
ENV_PROCESS_QUEUE_URL = "DEPTRACK_PROCESS_QUEUE_URL"
ENV_JOIN_QUEUE_URL = "DEPTRACK_JOIN_QUEUE_URL"
ENV_CYCLE_DEPTH = "DEPTRACK_CYCLE_DEPTH"
ENV_JOIN_CHUNK_SIZE = "DEPTRACK_JOIN_CHUNK_SIZE"
# The process queue's maxReceiveCount (template: ProcessMaxReceiveCount), read by the
# process function alone: on a message's last receive its parent is answered.
ENV_PROCESS_MAX_RECEIVE_COUNT = "DEPTRACK_PROCESS_MAX_RECEIVE_COUNT"
PROCESS_VARIABLES = (ENV_PROCESS_MAX_RECEIVE_COUNT,)
# Cirrus mode (docs/cirrus.md): set the state table and the process queue of a cirrus-geo
# v2 deployment, and the tracker forwards payloads there instead of running them itself.
ENV_CIRRUS_STATE_TABLE = "DEPTRACK_CIRRUS_STATE_TABLE"
ENV_CIRRUS_PROCESS_QUEUE_URL = "DEPTRACK_CIRRUS_PROCESS_QUEUE_URL"
ENV_CIRRUS_PAYLOAD_BUCKET = "DEPTRACK_CIRRUS_PAYLOAD_BUCKET"
ENV_CIRRUS_PAYLOAD_ROOT_PREFIX = "DEPTRACK_CIRRUS_PAYLOAD_ROOT_PREFIX"
# cirrus-geo's PayloadRootPrefix default: its payloads live under "{root}/executions/...".
DEFAULT_CIRRUS_PAYLOAD_ROOT_PREFIX = "cirrus"
ENV_METRICS_NAMESPACE = "POWERTOOLS_METRICS_NAMESPACE"
ENV_SERVICE_NAME = "POWERTOOLS_SERVICE_NAME"

DEFAULT_PREFIX = "deptrack"
# template.yaml's AllowedPattern for Prefix. No "-": it separates the prefix from the
# rest of every name, so "{prefix}-" never starts another prefix's names (and
# ``workflow_of`` never claims another stack's state machines).
PREFIX_PATTERN = r"^[a-z][a-z0-9]{0,19}$"
DEFAULT_METRICS_NAMESPACE = "DependencyTracker"
DEFAULT_SERVICE_NAME = "dependency-tracker"
DEFAULT_CYCLE_DEPTH = 10
# Members a join registers per invocation: one BatchGetItem of their states (100
# keys at most) and, at worst, 100 starts, well inside a 60-second Lambda.
DEFAULT_JOIN_CHUNK_SIZE = 100
MAX_JOIN_CHUNK_SIZE = 100  # BatchGetItem's 100 keys


class Settings(BaseModel, frozen=True):
    """What the flows need to know about their deployment.

    Attributes:
        state_table: Name of the payload state table.
        dependency_table: Name of the dependency (waiter) table.
        workflow_arn_prefix: ARN of a managed state machine minus its workflow
            name, e.g. ``arn:aws:states:us-east-1:123456789012:stateMachine:deptrack-``.
        prefix: Name prefix of managed state machines (``{prefix}-{workflow}``).
        waiter_retention_days: How long a notified waiter row is kept (TTL).
        payload_bucket: Bucket for results too large to keep inline (optional).
        process_queue_url: Where the next step of a chained payload is published.
        claim_lease_seconds: After this long a live attempt whose execution is no
            longer running may be taken over; set it above the workflows' longest run.
        cycle_depth: Longest wait cycle refused with ``DependencyCycle``, counted in
            payloads (A waits on B waits on A is 2); 0 turns the check off.
        join_chunk_size: Members of a join registered (and started) per
            invocation; the rest continue through the join queue.
        join_queue_url: Where a join's ``join_chunk`` messages are sent: a queue
            whose trigger hands the process function one message at a time, so an
            invocation registers one chunk (the process queue when unset).
        process_max_receive_count: The process queue's ``maxReceiveCount``. A
            message failing on that receive (its last before the DLQ) has its
            parent answered first; None turns that rule off, so such a parent
            waits out its callback timeout.
        pace_starts: A throttled ``StartExecution`` waits for Step Functions' quota
            within the invocation's deadline (core/pacing.py); False only to measure
            the behaviour without it (the registration-pacing benchmark).
        cirrus_state_table: cirrus mode: the cirrus-geo deployment's state table
            (read, never written). Cirrus mode is on when this is set.
        cirrus_process_queue_url: cirrus mode: where payloads are sent to be run.
        cirrus_payload_bucket: cirrus mode: cirrus's payload bucket (output URLs,
            and payloads too large for one message).
        cirrus_payload_root_prefix: cirrus mode: cirrus's ``PayloadRootPrefix``.
    """

    state_table: str
    dependency_table: str
    workflow_arn_prefix: str
    prefix: str = Field(default=DEFAULT_PREFIX, pattern=PREFIX_PATTERN)
    waiter_retention_days: int = Field(default=7, ge=1)
    payload_bucket: str | None = None
    claim_lease_seconds: int = Field(default=86_400, ge=1)
    process_queue_url: str | None = None
    join_queue_url: str | None = None
    cycle_depth: int = Field(default=DEFAULT_CYCLE_DEPTH, ge=0)
    join_chunk_size: int = Field(default=DEFAULT_JOIN_CHUNK_SIZE, ge=1, le=MAX_JOIN_CHUNK_SIZE)
    process_max_receive_count: int | None = Field(default=None, ge=1)
    pace_starts: bool = True
    cirrus_state_table: str | None = None
    cirrus_process_queue_url: str | None = None
    cirrus_payload_bucket: str | None = None
    cirrus_payload_root_prefix: str = DEFAULT_CIRRUS_PAYLOAD_ROOT_PREFIX

    @property
    def cirrus_executions_url(self) -> str | None:
        """Where cirrus keeps each run's input and output payloads (``s3://...``)."""
        if self.cirrus_payload_bucket is None:
            return None
        root = self.cirrus_payload_root_prefix.strip("/")
        return f"s3://{self.cirrus_payload_bucket}/{root}/executions"

    @property
    def cirrus_mode(self) -> bool:
        """True when a cirrus-geo deployment runs the payloads (docs/cirrus.md)."""
        return self.cirrus_state_table is not None

    @classmethod
    def from_env(cls, **overrides: object) -> Self:
        """Build settings from ``DEPTRACK_*`` variables; explicit overrides win.

        Raises:
            ConfigurationError: A required variable is missing or malformed.
        """
        values: dict[str, object] = {
            "state_table": overrides.get("state_table") or _required(ENV_STATE_TABLE),
            "dependency_table": overrides.get("dependency_table")
            or _required(ENV_DEPENDENCY_TABLE),
            "workflow_arn_prefix": overrides.get("workflow_arn_prefix")
            or _required(ENV_WORKFLOW_ARN_PREFIX),
            "prefix": os.getenv(ENV_PREFIX) or DEFAULT_PREFIX,
            "payload_bucket": os.getenv(ENV_PAYLOAD_BUCKET) or None,
            "process_queue_url": os.getenv(ENV_PROCESS_QUEUE_URL) or None,
            "join_queue_url": os.getenv(ENV_JOIN_QUEUE_URL) or None,
            "cirrus_state_table": os.getenv(ENV_CIRRUS_STATE_TABLE) or None,
            "cirrus_process_queue_url": os.getenv(ENV_CIRRUS_PROCESS_QUEUE_URL) or None,
            "cirrus_payload_bucket": os.getenv(ENV_CIRRUS_PAYLOAD_BUCKET) or None,
            "cirrus_payload_root_prefix": os.getenv(ENV_CIRRUS_PAYLOAD_ROOT_PREFIX)
            or DEFAULT_CIRRUS_PAYLOAD_ROOT_PREFIX,
        }
        for variable, field, least, most, rule in INTEGER_VARIABLES:
            number = _integer(variable, least, most, rule)
            if number is not None:
                values[field] = number
        values.update({key: value for key, value in overrides.items() if value is not None})
        if not re.fullmatch(PREFIX_PATTERN, str(values["prefix"])):
            raise ConfigurationError(
                ENV_PREFIX, "must be 1-20 lower-case letters and digits, starting with a letter"
            )
        if values["cirrus_state_table"] and not values["cirrus_process_queue_url"]:
            raise ConfigurationError(
                ENV_CIRRUS_PROCESS_QUEUE_URL, f"must be set with {ENV_CIRRUS_STATE_TABLE}"
            )
        return cls.model_validate(values)

    def state_machine_arn(self, workflow: str) -> str:
        """ARN of the managed state machine that runs ``workflow``."""
        return f"{self.workflow_arn_prefix}{workflow}"

    def workflow_of(self, state_machine_name: str) -> str | None:
        """Workflow name of a managed state machine, or None if it is not ours."""
        head = f"{self.prefix}-"
        if state_machine_name.startswith(head) and len(state_machine_name) > len(head):
            return state_machine_name[len(head) :]
        return None

    # Sweeper (handlers/sweeper.py). A terminal row is left
    # to the stream for sweeper_min_age_seconds after it was resolved; each run reads
    # at most sweeper_max_pages Scan pages per table (1 MB each) within
    # sweeper_time_budget_seconds, and the next run continues where it stopped.
    sweeper_min_age_seconds: int = Field(default=900, ge=0)
    sweeper_max_pages: int = Field(default=100, ge=1)
    sweeper_time_budget_seconds: int = Field(default=60, ge=1)


ENV_SWEEPER_MIN_AGE_SECONDS = "DEPTRACK_SWEEPER_MIN_AGE_SECONDS"
ENV_SWEEPER_MAX_PAGES = "DEPTRACK_SWEEPER_MAX_PAGES"
ENV_SWEEPER_TIME_BUDGET_SECONDS = "DEPTRACK_SWEEPER_TIME_BUDGET_SECONDS"
# (variable, field, smallest value allowed)
SWEEPER_VARIABLES = (
    (ENV_SWEEPER_MIN_AGE_SECONDS, "sweeper_min_age_seconds", 0),
    (ENV_SWEEPER_MAX_PAGES, "sweeper_max_pages", 1),
    (ENV_SWEEPER_TIME_BUDGET_SECONDS, "sweeper_time_budget_seconds", 1),
)


_POSITIVE = "must be a positive integer"
# (variable, field, smallest, largest or None, what a bad value is told) of the integer settings.
INTEGER_VARIABLES: tuple[tuple[str, str, int, int | None, str], ...] = (
    (ENV_WAITER_RETENTION_DAYS, "waiter_retention_days", 1, None, _POSITIVE),
    (ENV_CLAIM_LEASE_SECONDS, "claim_lease_seconds", 1, None, _POSITIVE),
    (ENV_JOIN_CHUNK_SIZE, "join_chunk_size", 1, MAX_JOIN_CHUNK_SIZE, _POSITIVE),
    (ENV_PROCESS_MAX_RECEIVE_COUNT, "process_max_receive_count", 1, None, _POSITIVE),
    (ENV_CYCLE_DEPTH, "cycle_depth", 0, None, "must be a non-negative integer"),
    *(
        (variable, field, least, None, f"must be an integer of at least {least}")
        for variable, field, least in SWEEPER_VARIABLES
    ),
)


def _integer(name: str, least: int, most: int | None, rule: str) -> int | None:
    """The integer in variable ``name`` (None when unset).

    Raises:
        ConfigurationError: Not an integer in ``least..most`` (``rule`` says what it must be).
    """
    text = os.getenv(name)
    if not text:
        return None
    if not text.isdigit() or int(text) < least:
        raise ConfigurationError(name, rule)
    if most is not None and int(text) > most:
        raise ConfigurationError(name, f"must be at most {most}")
    return int(text)


def _required(name: str) -> str:
    value = os.getenv(name)
    if not value:
        raise ConfigurationError(name)
    return value


def metrics_namespace() -> str:
    """CloudWatch namespace for metrics (Powertools' own variable, with our default)."""
    return os.getenv(ENV_METRICS_NAMESPACE) or DEFAULT_METRICS_NAMESPACE


def service_name() -> str:
    """Service name in logs and metrics (Powertools' own variable, with our default)."""
    return os.getenv(ENV_SERVICE_NAME) or DEFAULT_SERVICE_NAME


@cache
def get_settings() -> Settings:
    """Settings of this process, read once (the CLI's; handlers ask the composition root)."""
    return Settings.from_env()
