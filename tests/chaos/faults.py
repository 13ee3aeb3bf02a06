"""Fault injection through botocore's event system, chosen by (site, call count) from a seed.

The injector hooks the clients' own events, not our wrappers:
``before-parameter-build.<service>.<Operation>`` (the first event that sees the
API parameters, emitted before ``before-call``) draws the fault for the call and
raises it before anything is sent, and ``after-call.<service>.<Operation>``
raises the crash once a write has succeeded.

A *site* is ``{handler}:{service}.{Operation}``: the handler comes from
:func:`running`, which the chaos harness wraps around every Lambda invocation,
and the service and operation from the botocore event name. For the n-th call
at a site the injector draws from ``random.Random(f"{seed}|{site}|{n}")``, so a
run with the same seed and the same call sequence injects the same faults;
``plan`` pins a kind to an exact ``(site, n)``.

Kinds:

* ``throttle`` / ``server``: a ``ClientError`` (``ThrottlingException`` /
  ``ProvisionedThroughputExceededException``, or a 5xx code) raised
  *before* the call, as if botocore's retries were exhausted.
* ``conditional_race``: before a conditional DynamoDB write, an identical
  write is made first by a concurrent twin invocation (an un-hooked client),
  so the original call meets a *real* ``ConditionalCheckFailedException``
  when its condition no longer holds. (Raising the error without the twin's
  write would fake a state DynamoDB can never be in.)
* ``task_timed_out`` / ``invalid_token``: Step Functions refuses a
  ``SendTaskSuccess``/``SendTaskFailure``; the parent is gone from then on.
* ``crash``: raised *after* a successful write (``after-call``): the Lambda
  died right after that write. :class:`Crash` is a ``BaseException`` so the
  batch utilities cannot turn it into a per-record failure; the harness
  turns it into a failed invocation and the event source redelivers.
* ``express_twin``: right after the tracker's ``StartExecution`` of an Express
  machine succeeded, the same start (name and input) is made again by an
  un-hooked client: AWS's Express is at-least-once, and with the strict layer
  the second start is a second, concurrent run of the same attempt. The
  tracker's own Express starts are counted by name (``express_starts``).
* ``callback_storm``: a ``SendTask*`` is throttled, and so is every later send
  of the same token (``storm``) until the harness ends the storm, once the
  stream has given up on the record (discarded it after its retries).

Faults of the harness itself (``express_report_lost``, ``late_event``,
``stale_redelivery``, ``duplicate_delivery``, and the joins' ``join_id_reuse``
and ``manifest_overwrite``, ``parent_send_throttled``, and the operator's
``operator_release`` and ``operator_rerun``) are counted here too, by the harness
(:mod:`tests.chaos.run`).
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import random
import threading
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from botocore.awsrequest import AWSResponse, HTTPHeaders
from botocore.exceptions import ClientError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

WRITE_OPERATIONS: dict[str, frozenset[str]] = {
    "dynamodb": frozenset(
        {"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"}
    ),
    "sfn": frozenset({"StartExecution", "SendTaskSuccess", "SendTaskFailure"}),
    "sqs": frozenset({"SendMessage", "SendMessageBatch", "DeleteMessage"}),
    "s3": frozenset({"PutObject"}),
}
SEND_OPERATIONS = frozenset({"SendTaskSuccess", "SendTaskFailure"})
CONDITIONAL_OPERATIONS = frozenset({"PutItem", "UpdateItem", "DeleteItem"})

THROTTLE_CODES = {
    "dynamodb": ("ProvisionedThroughputExceededException", 400),
    "sfn": ("ThrottlingException", 400),
    "sqs": ("ThrottlingException", 400),
    "s3": ("SlowDown", 503),
}
SERVER_CODES = {
    "dynamodb": ("InternalServerError", 500),
    "sfn": ("ServiceUnavailable", 503),
    "sqs": ("InternalError", 500),
    "s3": ("InternalError", 500),
}
PARENT_GONE_KINDS = {"task_timed_out": "TaskTimedOut", "invalid_token": "InvalidToken"}
ALL_KINDS = (
    "throttle",
    "server",
    "conditional_race",
    "task_timed_out",
    "invalid_token",
    "crash",
    "duplicate_delivery",  # counted by the harness, which delivers the event twice
    "express_twin",
    "express_report_lost",  # the harness loses an Express run's status report
    "late_event",  # the harness holds a status-change event back until a lease recovered it
    "stale_redelivery",  # the harness delivers an older status-change event again, late
    "callback_storm",
    "join_id_reuse",  # the harness sends another parent's join naming an owner's join_id
    "manifest_overwrite",  # the harness replaces a join's manifest after its first chunk
    "parent_send_throttled",  # the harness throttles a parent's send once (Task Retry)
    "operator_release",  # the harness runs `dependency-tracker release` on a live parent
    "operator_rerun",  # the harness runs `dependency-tracker rerun` (twice, one in three)
)

_handler: contextvars.ContextVar[str] = contextvars.ContextVar("chaos_handler", default="-")


class Crash(BaseException):
    """The Lambda process died right after a write."""


@contextmanager
def running(handler: str) -> Iterator[None]:
    """Label the AWS calls made inside with the handler that makes them."""
    token = _handler.set(handler)
    try:
        yield
    finally:
        _handler.reset(token)


def client_error(code: str, status: int, operation: str) -> ClientError:
    """A ``ClientError`` shaped as botocore raises it."""
    response: Any = {
        "Error": {"Code": code, "Message": f"injected {code}"},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return ClientError(response, operation)


@dataclass
class Injection:
    """One injected fault."""

    site: str
    count: int
    kind: str


@dataclass
class FaultInjector:
    """Injects faults into the boto3 clients it is attached to.

    ``rates`` maps a kind to its probability per eligible call; ``plan`` maps
    ``(site, count)`` to a kind and overrides the random draw (for exact
    reproductions). ``twin`` makes the concurrent write of ``conditional_race``
    (an un-hooked DynamoDB client on the same account).
    """

    seed: int
    rates: dict[str, float] = field(default_factory=dict)
    plan: dict[tuple[str, int], str] = field(default_factory=dict)
    twin: Any = None
    enabled: bool = True
    injected: Counter[str] = field(default_factory=Counter)
    calls: Counter[str] = field(default_factory=Counter)
    log: list[Injection] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _pending_crash: dict[int, Injection] = field(default_factory=dict)
    on_parent_gone: Callable[[str, str], None] | None = None
    # Express machines (ARNs) and the un-hooked Step Functions client of ``express_twin``.
    express_machines: frozenset[str] = frozenset()
    sfn_twin: Any = None
    express_starts: Counter[str] = field(default_factory=Counter)  # tracker's, by run name
    twins: Counter[str] = field(default_factory=Counter)  # second starts made, by run name
    storm: set[str] = field(default_factory=set)  # tokens whose every send is throttled
    storm_calls: int = 0  # sends throttled by a storm
    _pending_start: dict[int, tuple[dict[str, Any], bool]] = field(default_factory=dict)

    def attach(self, client: Any) -> None:
        """Register on ``client``'s events (before the other hooks, so faults win)."""
        events = client.meta.events
        events.register_first("before-parameter-build", self._before_parameters)
        events.register_last("after-call", self._after_call)

    # --------------------------------------------------------------- choosing

    def _eligible(self, service: str, operation: str, params: dict[str, Any]) -> list[str]:
        kinds = ["throttle", "server"] if service in THROTTLE_CODES else []
        writes = WRITE_OPERATIONS.get(service, frozenset())
        if operation in writes:
            kinds.append("crash")
        if service == "dynamodb" and _conditional(operation, params) and self.twin is not None:
            kinds.append("conditional_race")
        if service == "sfn" and operation in SEND_OPERATIONS:
            kinds.extend(PARENT_GONE_KINDS)
            if _handler.get() == "callback":  # the stream's sends: it discards, then sweeps
                kinds.append("callback_storm")
        if self._express_start(service, operation, params) and self.sfn_twin is not None:
            kinds.append("express_twin")
        return kinds

    def _express_start(self, service: str, operation: str, params: dict[str, Any]) -> bool:
        return (
            service == "sfn"
            and operation == "StartExecution"
            and params.get("stateMachineArn") in self.express_machines
        )

    def _draw(self, site: str, kinds: list[str]) -> tuple[int, str | None]:
        """Count one call at ``site`` and pick at most one fault kind for it."""
        with self._lock:
            self.calls[site] += 1
            count = self.calls[site]
        if not self.enabled:
            return count, None
        planned = self.plan.get((site, count))
        if planned is not None:
            return count, planned if planned in kinds else None
        rng = random.Random(f"{self.seed}|{site}|{count}")
        roll = rng.random()
        for kind in kinds:
            rate = self.rates.get(kind, 0.0)
            if roll < rate:
                return count, kind
            roll -= rate
        return count, None

    def _record(self, site: str, count: int, kind: str) -> Injection:
        injection = Injection(site, count, kind)
        with self._lock:
            self.injected[kind] += 1
            self.log.append(injection)
        return injection

    # ---------------------------------------------------------------- hooks

    def _before_parameters(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        # Only API parameters are visible here: decide the whole call's fault now.
        self._drop_pending()
        service = model.service_model.service_id.hyphenize()
        operation = model.name
        if service == "sfn" and operation in SEND_OPERATIONS:
            self._storming(str(params.get("taskToken", "")), operation)
        site = f"{_handler.get()}:{service}.{operation}"
        count, kind = self._draw(site, self._eligible(service, operation, params))
        if self._express_start(service, operation, params) and kind not in {"throttle", "server"}:
            # Counted once AWS answered it (after-call); a twin follows it if drawn.
            self._pending_start[threading.get_ident()] = (dict(params), kind == "express_twin")
        if kind is None:
            return
        injection = self._record(site, count, kind)
        if kind == "express_twin":
            return
        if kind == "callback_storm":
            with self._lock:
                self.storm.add(str(params.get("taskToken", "")))
                self.storm_calls += 1
            raise client_error(*THROTTLE_CODES["sfn"], operation)
        if kind == "crash":
            self._pending_crash[threading.get_ident()] = injection
        elif kind == "conditional_race":
            method = getattr(self.twin, _snake(operation))
            with contextlib.suppress(ClientError):  # the twin lost its own race
                method(**params)
        elif kind in PARENT_GONE_KINDS:
            code = PARENT_GONE_KINDS[kind]
            if self.on_parent_gone is not None:
                self.on_parent_gone(str(params.get("taskToken", "")), code)
            raise client_error(code, 400, operation)
        else:
            codes = THROTTLE_CODES if kind == "throttle" else SERVER_CODES
            code, status = codes[service]
            raise client_error(code, status, operation)

    def _storming(self, token: str, operation: str) -> None:
        """Throttle every send of a token in a storm."""
        with self._lock:
            stormy = self.enabled and token in self.storm
            self.storm_calls += stormy
        if stormy:
            raise client_error(*THROTTLE_CODES["sfn"], operation)

    def _after_call(self, http_response: Any, **_: Any) -> None:
        started = self._pending_start.pop(threading.get_ident(), None)
        if started is not None and http_response.status_code < 300:
            params, twin = started
            with self._lock:
                self.express_starts[str(params["name"])] += 1
            if twin:
                # AWS runs the same attempt twice: a second start, right after the first.
                self.sfn_twin.start_execution(**params)
                with self._lock:
                    self.twins[str(params["name"])] += 1
        injection = self._pending_crash.pop(threading.get_ident(), None)
        if injection is None:
            return
        if http_response.status_code >= 300:
            # The write itself failed: the crash would not follow "a write".
            self._unrecord(injection)
            return
        raise Crash(f"injected crash after {injection.site} #{injection.count}")

    def _drop_pending(self) -> None:
        """A planned crash whose call never completed (it raised) did not happen."""
        stale = self._pending_crash.pop(threading.get_ident(), None)
        if stale is not None:
            self._unrecord(stale)
        self._pending_start.pop(threading.get_ident(), None)

    def _unrecord(self, injection: Injection) -> None:
        with self._lock:
            self.injected[injection.kind] -= 1
            self.log.remove(injection)

    def summary(self) -> dict[str, int]:
        """Faults injected so far, by kind (every kind listed)."""
        return {kind: self.injected.get(kind, 0) for kind in ALL_KINDS}


def _conditional(operation: str, params: dict[str, Any]) -> bool:
    """A write with a condition a twin's identical write can make fail (joins' transactions too)."""
    if operation == "TransactWriteItems":
        return any(
            "ConditionExpression" in op
            for entry in params.get("TransactItems", [])
            for op in entry.values()
        )
    return operation in CONDITIONAL_OPERATIONS and "ConditionExpression" in params


def _snake(operation: str) -> str:
    out = []
    for index, char in enumerate(operation):
        if char.isupper() and index:
            out.append("_")
        out.append(char.lower())
    return "".join(out)


@dataclass
class Sent:
    """One accepted ``SendTaskSuccess``/``SendTaskFailure``: the parent resumed."""

    token: str
    operation: str
    output: str | None = None
    error: str | None = None
    cause: str | None = None


@dataclass
class FakeParents:
    """Step Functions' side of the task tokens, for parents that are only tokens.

    Hooked ``before-call`` on ``SendTaskSuccess``/``SendTaskFailure`` of the
    handlers' Step Functions client: the first send for a known token resumes
    the parent (recorded in ``sent``); any later one gets ``InvalidToken``,
    as on AWS; a parent marked gone (timed out) answers ``TaskTimedOut``.
    """

    tokens: set[str] = field(default_factory=set)
    sent: dict[str, list[Sent]] = field(default_factory=dict)
    refused: Counter[str] = field(default_factory=Counter)
    late: dict[str, list[Sent]] = field(default_factory=dict)  # refused sends, kept
    gone: dict[str, str] = field(default_factory=dict)
    # Sends to a token no parent ever held (each is refused InvalidToken).
    unknown: Counter[str] = field(default_factory=Counter)
    # Every parent-gone code a token's sends were told: the plan's, and injected ones.
    told_gone: dict[str, set[str]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def attach(self, client: Any) -> None:
        for operation in sorted(SEND_OPERATIONS):
            client.meta.events.register(f"before-call.sfn.{operation}", self._send)

    def parent_gone(self, token: str, code: str) -> None:
        """The parent of ``token`` timed out (or its token went invalid) before any resume."""
        with self._lock:
            self.told_gone.setdefault(token, set()).add(code)
            if token not in self.sent:
                self.gone.setdefault(token, code)

    def _send(self, model: Any, params: dict[str, Any], **_: Any) -> tuple[Any, dict[str, Any]]:
        body = json.loads(params["body"]) if params.get("body") else {}
        token = str(body.get("taskToken", ""))
        with self._lock:
            if token in self.gone:
                return _response(400, self.gone[token])
            sent = Sent(
                token=token,
                operation=model.name,
                output=body.get("output"),
                error=body.get("error"),
                cause=body.get("cause"),
            )
            if token not in self.tokens:
                self.unknown[token] += 1
            if token not in self.tokens or token in self.sent:
                self.refused[token] += 1
                self.late.setdefault(token, []).append(sent)
                return _response(400, "InvalidToken")
            self.sent[token] = [sent]
        return _response(200, None)


def _response(status: int, code: str | None) -> tuple[Any, dict[str, Any]]:
    parsed: dict[str, Any] = {"ResponseMetadata": {"HTTPStatusCode": status}}
    if code is not None:
        parsed["Error"] = {"Code": code, "Message": f"fake Step Functions: {code}"}
    return AWSResponse("https://states.fake/", status, HTTPHeaders(), None), parsed
