"""The platform model: Lambda's own guards, which moto does not have, enforced locally.

The strict layer (:mod:`dependency_tracker_local.strict`) refuses requests over an AWS
limit; this module models what Lambda itself does around the functions:

* **Recursive-loop detection.** On AWS, every call a function makes through the SDK
  carries the invocation's X-Ray trace header (``X-Amzn-Trace-Id``, which SQS keeps as
  the message's ``AWSTraceHeader``); its ``Lineage`` field counts how often each function
  was invoked in one chain of events through Lambda, SQS, SNS and S3. When a function
  whose ``RecursiveLoop`` is ``Terminate`` (the default) would be invoked a 17th time in
  one chain, Lambda stops that invocation: an SQS record is left to the queue, whose
  redrive policy moves it to the DLQ. Step Functions, EventBridge and DynamoDB streams
  are not in the chain: what they start starts a new one.

  Locally, a pump runs each invocation inside :func:`invocation` (a thread-local
  lineage); every botocore request made on that thread carries the lineage in the trace
  header; moto keeps it as the ``AWSTraceHeader`` of every SQS message that request
  sends, directly or through SNS or an S3 notification; and the SQS pump asks
  :meth:`PlatformModel.admit` which records to invoke.
* **Reserved and maximum concurrency.** :func:`check_concurrency` refuses a template
  whose ``ReservedConcurrentExecutions`` would leave an account fewer than 100 unreserved
  executions (as CloudFormation's create fails), and an SQS trigger's
  ``ScalingConfig.MaximumConcurrency`` outside 2..1,000. The SQS pump holds the process
  trigger's maximum concurrency.
* **Function timeouts** (:mod:`dependency_tracker_local.timeouts`): each pumped
  invocation is bounded by its function's ``Timeout``; one that runs past it is failed
  as Lambda fails it, whatever the handler returned.
* **Step Functions' API rates** (:mod:`dependency_tracker_local.rates`): the
  ``StartExecution`` and ``SendTask*`` token buckets, active while a stack runs with
  the model (``EmbeddedStack(rate_scale=...)``).

The functions' settings come from ``template.yaml`` through the one template reader,
:mod:`dependency_tracker_local.template`.

``EmbeddedStack`` turns the model on unless given ``platform=False`` or run with
``DEPTRACK_PLATFORM=0``; ``docs/local.md`` ("The platform model") lists each behaviour
and the AWS documentation it follows.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from dependency_tracker_local import template as template_reader
from dependency_tracker_local.timeouts import (
    LAMBDA_DEFAULT_TIMEOUT_SECONDS,
    FunctionTimeouts,
    TimedOutInvocation,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping, Sequence
    from pathlib import Path

_log = logging.getLogger(__name__)
R = TypeVar("R")
M = TypeVar("M", bound="Mapping[str, Any]")

ENV_SWITCH = "DEPTRACK_PLATFORM"
TRACE_HEADER = "X-Amzn-Trace-Id"
TRACE_ATTRIBUTE = "AWSTraceHeader"
# Lambda lets a function be invoked 16 times in one chain and stops the next one.
RECURSION_LIMIT = 16
TERMINATE = "Terminate"
ALLOW = "Allow"
# A new account's concurrency quota ("Lambda quotas": 10 until the account is raised).
NEW_ACCOUNT_CONCURRENCY = 10
# "Configuring reserved concurrency": Lambda keeps at least 100 executions unreserved.
MIN_UNRESERVED_CONCURRENCY = 100
# Event source mappings' ScalingConfig.MaximumConcurrency bounds.
MIN_MAXIMUM_CONCURRENCY = 2
MAX_MAXIMUM_CONCURRENCY = 1000


def wanted() -> bool:
    """Whether the stack and the pumps model the platform: yes unless ``DEPTRACK_PLATFORM=0``."""
    return os.environ.get(ENV_SWITCH, "1") != "0"


class PlatformError(RuntimeError):
    """The deployment is refused, as CloudFormation or Lambda would refuse it."""


# ---------------------------------------------------------------------- lineage


@dataclass(frozen=True)
class Lineage:
    """One chain of events: its root and how often each function was invoked in it."""

    root: str
    counts: tuple[tuple[str, int], ...] = ()

    @classmethod
    def new(cls) -> Lineage:
        """A chain that starts here (an X-Ray-like root id)."""
        return cls(root=f"1-{int(time.time()):08x}-{uuid.uuid4().hex[:24]}")

    def count(self, function: str) -> int:
        """Invocations of ``function`` so far in this chain."""
        return dict(self.counts).get(function, 0)

    def invoked(self, function: str) -> Lineage:
        """This chain once ``function`` is invoked once more."""
        counts = dict(self.counts)
        counts[function] = counts.get(function, 0) + 1
        return Lineage(self.root, tuple(sorted(counts.items())))

    def merged(self, other: Lineage) -> Lineage:
        """The highest count of each function in either chain (a batch's invocation)."""
        counts = dict(self.counts)
        for function, count in other.counts:
            counts[function] = max(count, counts.get(function, 0))
        return Lineage(self.root, tuple(sorted(counts.items())))

    def header(self) -> str:
        """The trace header an SDK call made in this chain carries."""
        lineage = "|".join(f"{function}:{count}" for function, count in self.counts)
        return f"Root={self.root};Lineage={lineage}"

    @classmethod
    def parse(cls, header: str | None) -> Lineage | None:
        """The lineage in a trace header, or None (no header, or no ``Lineage`` field)."""
        if not header:
            return None
        fields = dict(part.split("=", 1) for part in header.split(";") if "=" in part)
        if "Lineage" not in fields:
            return None
        counts: dict[str, int] = {}
        for entry in filter(None, fields["Lineage"].split("|")):
            function, _, count = entry.rpartition(":")
            if function and count.isdigit():
                counts[function] = int(count)
        return cls(fields.get("Root", "") or cls.new().root, tuple(sorted(counts.items())))


_invocation = threading.local()


@contextmanager
def invocation(lineage: Lineage) -> Iterator[None]:
    """Run a handler invocation in ``lineage``: its AWS calls on this thread carry it.

    Only this thread: a handler that calls AWS from worker threads of its own must run
    them with :func:`carried` to keep the chain (on AWS the lineage is process-wide).
    """
    saved = getattr(_invocation, "lineage", None)
    _invocation.lineage = lineage
    try:
        yield
    finally:
        _invocation.lineage = saved


def current() -> Lineage | None:
    """The lineage of the invocation running on this thread, if any."""
    lineage: Lineage | None = getattr(_invocation, "lineage", None)
    return lineage


def carried(function: Callable[..., R]) -> Callable[..., R]:
    """``function`` run in the current invocation's lineage (for a handler's worker thread)."""
    lineage = current()
    if lineage is None:
        return function

    @functools.wraps(function)
    def run(*args: Any, **kwargs: Any) -> R:
        with invocation(lineage):
            return function(*args, **kwargs)

    return run


@dataclass(frozen=True)
class StoppedRecord:
    """A record Lambda did not invoke its function with: the loop was detected."""

    function: str
    message_id: str
    root: str
    invocation: int


@dataclass
class PlatformModel:
    """Recursive-loop detection for the pumps of one stack (or one test's pumps).

    ``recursive_loop`` maps a function (the pumps' ``function_name``) to its
    ``RecursiveLoop`` setting; a function it does not name has Lambda's default,
    ``Terminate``. ``stopped`` lists every record stopped, once per receive.
    ``timeouts`` bounds each invocation by its function's timeout; ``timed_out`` lists
    the invocations that ran past theirs.
    """

    recursive_loop: Mapping[str, str] = field(default_factory=dict)
    recursion_limit: int = RECURSION_LIMIT
    stopped: list[StoppedRecord] = field(default_factory=list)
    timeouts: FunctionTimeouts = field(default_factory=FunctionTimeouts)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        install()

    @classmethod
    def from_template(cls, path: Path | None = None) -> PlatformModel:
        """The model with each function's ``RecursiveLoop`` as ``template.yaml`` sets it."""
        path = path or template_reader.TEMPLATE_PATH
        functions = (
            template_functions(template_reader.load_template(path)) if path.is_file() else {}
        )
        return cls(
            recursive_loop={f.name: f.recursive_loop for f in functions.values()},
            timeouts=FunctionTimeouts({f.name: f.timeout_seconds for f in functions.values()}),
        )

    @property
    def timed_out(self) -> list[TimedOutInvocation]:
        """Every invocation that ran past its function's timeout."""
        return self.timeouts.timed_out

    def loop_setting(self, function: str) -> str:
        """``Terminate`` or ``Allow``."""
        return self.recursive_loop.get(function, TERMINATE)

    def start(self, function: str) -> Lineage:
        """The lineage of an invocation by a source outside the chains (a new chain)."""
        return Lineage.new().invoked(function)

    def admit(self, function: str, messages: Sequence[M]) -> tuple[list[M], Lineage]:
        """The received SQS messages ``function`` is invoked with, and the invocation's lineage.

        A message whose chain already invoked ``function`` ``recursion_limit`` times is
        left out (Terminate): its pump leaves it on the queue, whose redrive policy moves
        it to the DLQ after ``maxReceiveCount`` receives, as AWS does. A batch's
        invocation carries the highest count of each function among its records: AWS
        does not document batches, and the highest is the reading that never misses a
        loop.
        """
        admitted: list[M] = []
        lineage: Lineage | None = None
        for message in messages:
            header = message.get("Attributes", {}).get(TRACE_ATTRIBUTE)
            chain = Lineage.parse(header) or Lineage.new()
            count = chain.count(function) + 1
            if count > self.recursion_limit and self.loop_setting(function) == TERMINATE:
                self._stop(function, message, chain, count)
                continue
            admitted.append(message)
            lineage = chain if lineage is None else lineage.merged(chain)
        return admitted, (lineage or Lineage.new()).invoked(function)

    def _stop(self, function: str, message: Mapping[str, Any], chain: Lineage, count: int) -> None:
        record = StoppedRecord(function, str(message["MessageId"]), chain.root, count)
        with self._lock:
            self.stopped.append(record)
        _log.warning(
            "recursive loop detected: %s not invoked a %dth time in chain %s (message %s); "
            "the record stays on its queue for the redrive policy",
            function,
            count,
            chain.root,
            record.message_id,
        )


def default_model() -> PlatformModel | None:
    """A pump's model when none is given: from the template, unless switched off."""
    return PlatformModel.from_template() if wanted() else None


# ---------------------------------------------------------------------- carrying the lineage

_request = threading.local()
_install_lock = threading.Lock()
_installed = False


def install() -> None:
    """Patch botocore and moto once per process; the patches do nothing outside invocations.

    botocore: a request made on a thread running an invocation carries its lineage in
    the trace header (as the SDK does in Lambda). moto: each request remembers that
    header for its thread, and every SQS message it sends, directly or through an SNS
    subscription or an S3 notification, keeps it as ``AWSTraceHeader``.
    """
    global _installed  # noqa: PLW0603 - one switch for the process, like moto's own patches
    with _install_lock:
        if _installed:
            return
        from botocore.endpoint import Endpoint  # noqa: PLC0415 - only when modelling
        from moto.core.responses import BaseResponse  # noqa: PLC0415
        from moto.sqs.models import SQSBackend  # noqa: PLC0415

        Endpoint.create_request = _with_trace_header(Endpoint.create_request)  # type: ignore[method-assign]
        BaseResponse.setup_class = _remembering_header(BaseResponse.setup_class)  # type: ignore[method-assign]
        SQSBackend.send_message = _keeping_trace(SQSBackend.send_message)  # type: ignore[method-assign]
        _installed = True


def _with_trace_header(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def create_request(endpoint: Any, params: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        lineage = current()
        if lineage is not None:
            params.setdefault("headers", {})[TRACE_HEADER] = lineage.header()
        return original(endpoint, params, *args, **kwargs)

    return create_request


def _remembering_header(original: Callable[..., None]) -> Callable[..., None]:
    @functools.wraps(original)
    def setup_class(response: Any, *args: Any, **kwargs: Any) -> None:
        original(response, *args, **kwargs)
        headers = getattr(response, "headers", None)
        header = headers.get(TRACE_HEADER) if headers is not None else None
        _request.header = header if header and "Lineage=" in header else None

    return setup_class


def _keeping_trace(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def send_message(backend: Any, *args: Any, **kwargs: Any) -> Any:
        header = getattr(_request, "header", None)
        # moto's own callers name system_attributes (the 7th parameter); a positional
        # one is left alone.
        if header is not None and len(args) < 7:
            system = dict(kwargs.get("system_attributes") or {})
            system.setdefault(TRACE_ATTRIBUTE, {"DataType": "String", "StringValue": header})
            kwargs["system_attributes"] = system
        return original(backend, *args, **kwargs)

    return send_message


# ---------------------------------------------------------------------- the template's functions


@dataclass(frozen=True)
class FunctionSettings:
    """What the platform model reads of one function in the template."""

    logical_id: str
    name: str
    reserved_concurrency: int | None
    recursive_loop: str
    # SQS trigger (event name) -> ScalingConfig.MaximumConcurrency
    maximum_concurrency: Mapping[str, int]
    # Timeout (Lambda's 3 s when neither the function nor Globals sets one).
    timeout_seconds: float = LAMBDA_DEFAULT_TIMEOUT_SECONDS


def template_functions(
    template: Mapping[str, Any], parameters: Mapping[str, str] | None = None
) -> dict[str, FunctionSettings]:
    """Every function the template creates with ``parameters`` (defaults for the rest).

    SAM's ``Globals.Function`` applies where a function does not set a property itself.

    Raises:
        PlatformError: A concurrency setting is not a whole number (CloudFormation
            refuses the property).
    """
    deployed = template_reader.Deployed(dict(template), dict(parameters or {}))
    return {
        logical_id: FunctionSettings(
            logical_id=logical_id,
            name=function.name,
            reserved_concurrency=None
            if function.reserved_concurrency is None
            else _whole(logical_id, "ReservedConcurrentExecutions", function.reserved_concurrency),
            recursive_loop=function.recursive_loop or TERMINATE,
            maximum_concurrency={
                event: _whole(
                    logical_id, f"{event} MaximumConcurrency", trigger.maximum_concurrency
                )
                for event, trigger in function.sqs_triggers.items()
                if trigger.maximum_concurrency is not None
            },
            timeout_seconds=_timeout(deployed, logical_id),
        )
        for logical_id, function in template_reader.functions(deployed).items()
    }


def _timeout(deployed: template_reader.Deployed, logical_id: str) -> float:
    properties = deployed.properties(logical_id)
    value = deployed.resolve(properties.get("Timeout", template_reader.NO_VALUE))
    if value is template_reader.NO_VALUE:
        return LAMBDA_DEFAULT_TIMEOUT_SECONDS
    return float(_whole(logical_id, "Timeout", value))


def _whole(logical_id: str, what: str, value: Any) -> int:
    text = str(value).strip()
    if not text.lstrip("-").isdigit():
        msg = f"{logical_id}: {what} must be a whole number, not {value!r}"
        raise PlatformError(msg)
    return int(text)


def check_concurrency(
    functions: Mapping[str, FunctionSettings],
    account_concurrency: int = NEW_ACCOUNT_CONCURRENCY,
) -> None:
    """Refuse what Lambda refuses when the stack's functions and triggers are created.

    Reserved concurrency may not leave the account fewer than 100 unreserved concurrent
    executions (a new account has 10 in all, so it cannot reserve any); an SQS trigger's
    ``MaximumConcurrency`` must lie in 2..1,000.

    Raises:
        PlatformError: With the function and Lambda's message, as the stack create fails.
    """
    reserving = {f.logical_id: f.reserved_concurrency for f in functions.values()}
    reserved = {name: count for name, count in reserving.items() if count}
    total = sum(reserved.values())
    if total and account_concurrency - total < MIN_UNRESERVED_CONCURRENCY:
        names = ", ".join(f"{name} ({count})" for name, count in sorted(reserved.items()))
        msg = (
            f"{names}: Specified ReservedConcurrentExecutions for function decreases "
            "account's UnreservedConcurrentExecution below its minimum value of "
            f"[{MIN_UNRESERVED_CONCURRENCY}] (account concurrency {account_concurrency}, "
            f"reserved {total})"
        )
        raise PlatformError(msg)
    for function in functions.values():
        for event, value in function.maximum_concurrency.items():
            if value < MIN_MAXIMUM_CONCURRENCY:
                bound = f"greater than or equal to {MIN_MAXIMUM_CONCURRENCY}"
            elif value > MAX_MAXIMUM_CONCURRENCY:
                bound = f"less than or equal to {MAX_MAXIMUM_CONCURRENCY}"
            else:
                continue
            msg = (
                f"{function.logical_id} {event}: 1 validation error detected: Value '{value}' "
                "at 'scalingConfig.maximumConcurrency' failed to satisfy constraint: "
                f"Member must have value {bound}"
            )
            raise PlatformError(msg)


def process_maximum_concurrency(
    functions: Mapping[str, FunctionSettings], event: str = "ProcessQueue"
) -> int | None:
    """``MaximumConcurrency`` of the process function's trigger ``event``, if set."""
    for function in functions.values():
        if function.name == "process" and function.maximum_concurrency:
            return function.maximum_concurrency.get(event)
    return None
