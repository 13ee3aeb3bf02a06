"""The local pumps of the template's event sources, assembled in one place.

The embedded stack, the template-contract tests and the flow tests all feed the real handlers
with the same pumps. :func:`event_sources` reads what each pump needs from ``template.yaml``
(which queue each SQS trigger reads and its ``BatchSize``, the stream trigger's
``FilterCriteria``), so a trigger setting is spelled in the template and nowhere else;
:func:`build_pumps` turns those sources into pumps over the caller's clients and resources.

Outside a checkout (the package installed without ``template.yaml``) :func:`builtin_sources`
gives the same sources as this release's template declares them, and
``tests/unit/local/test_pumpset.py`` holds the two equal.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from dependency_tracker_local import template as template_reader
from dependency_tracker_local.filters import CALLBACK_STREAM_FILTER
from dependency_tracker_local.pumps import ExecutionPump, SqsPump, StreamPump

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Mapping

    from dependency_tracker_local.pumps import Handler

# Lambda's defaults for a trigger that sets no BatchSize.
SQS_DEFAULT_BATCH_SIZE = 10
STREAM_DEFAULT_BATCH_SIZE = 100

# Pump name -> the SQS trigger it stands in for, as (function, event).
SQS_PUMPS: dict[str, tuple[str, str]] = {
    "sqs": ("process", "ProcessQueue"),
    "joins": ("process", "JoinQueue"),
    "reports": ("update-state", "StatusReports"),
    "cirrus-events": ("cirrus-events", "CirrusEvents"),
}
# The EventBridge rule on execution status changes the executions pump stands in for.
EXECUTIONS_RULE = ("update-state", "ExecutionStatus")
# The DynamoDB stream trigger the stream pump stands in for.
STREAM_TRIGGER = ("callback", "DependencyStream")
# The pumps of every mode, in the order the stack's runner and the tests pump them.
PUMP_NAMES: tuple[str, ...] = ("sqs", "joins", "reports", "executions", "stream")
CIRRUS_PUMP_NAMES: tuple[str, ...] = (*PUMP_NAMES, "cirrus-events")

AnyPump = SqsPump | ExecutionPump | StreamPump
_T = TypeVar("_T")


@dataclass(frozen=True)
class SqsSource:
    """One SQS trigger: the logical id of the queue it reads, and its batch size."""

    queue: str
    batch_size: int = SQS_DEFAULT_BATCH_SIZE


@dataclass(frozen=True)
class StreamSource:
    """One DynamoDB stream trigger: the table whose stream it reads, batch size, filter."""

    table: str
    batch_size: int = STREAM_DEFAULT_BATCH_SIZE
    # The FilterCriteria pattern ({} when the trigger sets none: every record passes).
    filter_pattern: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class EventSources:
    """The template's event sources a pump stands in for, each by (function, event)."""

    sqs: Mapping[tuple[str, str], SqsSource]
    streams: Mapping[tuple[str, str], StreamSource]
    # EventBridge rules (their patterns are the executions pump's own).
    rules: frozenset[tuple[str, str]]


@dataclass(frozen=True)
class QueueAddress:
    """Where a queue is: its URL (to receive from) and ARN (the event names it)."""

    url: str
    arn: str


def event_sources(deployed: template_reader.Deployed) -> EventSources:
    """The event sources of every function the template creates with these parameters.

    Raises:
        TemplateError: A stream trigger reads no table of the template, or ORs several
            filters (the stream pump applies one pattern).
    """
    streams_of = {
        deployed.physical(table).attributes["StreamArn"]: table
        for table in deployed.of_type("AWS::DynamoDB::Table")
    }
    sqs: dict[tuple[str, str], SqsSource] = {}
    streams: dict[tuple[str, str], StreamSource] = {}
    rules: set[tuple[str, str]] = set()
    for function in template_reader.functions(deployed).values():
        events = deployed.properties(function.logical_id).get("Events") or {}
        for event_name, event in events.items():
            key = (function.name, event_name)
            kind = event.get("Type")
            if kind == "EventBridgeRule":
                rules.add(key)
                continue
            if kind not in ("SQS", "DynamoDB"):
                continue
            properties = deployed.resolve(event.get("Properties") or {})
            if kind == "SQS":
                trigger = function.sqs_triggers[event_name]
                if trigger.queue is not None:
                    size = properties.get("BatchSize", SQS_DEFAULT_BATCH_SIZE)
                    sqs[key] = SqsSource(trigger.queue, int(size))
                continue
            table = streams_of.get(str(properties.get("Stream")))
            if table is None:
                msg = f"template.yaml: {function.logical_id}'s {event_name} reads no table's stream"
                raise template_reader.TemplateError(msg)
            size = properties.get("BatchSize", STREAM_DEFAULT_BATCH_SIZE)
            streams[key] = StreamSource(table, int(size), _filter_pattern(key, properties))
    return EventSources(sqs=sqs, streams=streams, rules=frozenset(rules))


def _filter_pattern(key: tuple[str, str], properties: Mapping[str, Any]) -> dict[str, Any]:
    filters = (properties.get("FilterCriteria") or {}).get("Filters") or []
    if not filters:
        return {}
    if len(filters) > 1:
        msg = f"template.yaml: {key[0]}'s {key[1]} has {len(filters)} filters; the pump takes one"
        raise template_reader.TemplateError(msg)
    pattern = filters[0]["Pattern"]
    parsed: dict[str, Any] = json.loads(pattern) if isinstance(pattern, str) else pattern
    return parsed


# The fallback's trigger settings that are not Lambda's defaults.
_BUILTIN_BATCH_SIZES = {("process", "JoinQueue"): 1}


def builtin_sources(*, cirrus: bool = False) -> EventSources:
    """The template's event sources as this release declares them (defaults of its parameters).

    Only for a package installed without ``template.yaml``: the stack still needs its pumps.
    """
    # Which queue each trigger reads is the resources' fallback; only the settings are added.
    triggers = template_reader.builtin_resources("deptrack", cirrus=cirrus).triggers
    return EventSources(
        sqs={
            trigger: SqsSource(queue, _BUILTIN_BATCH_SIZES.get(trigger, SQS_DEFAULT_BATCH_SIZE))
            for trigger, queue in triggers.items()
        },
        streams={
            STREAM_TRIGGER: StreamSource(
                "DependencyTable", STREAM_DEFAULT_BATCH_SIZE, CALLBACK_STREAM_FILTER
            )
        },
        rules=frozenset({EXECUTIONS_RULE}),
    )


def build_pumps(
    sources: EventSources,
    *,
    handler_for: Callable[[str], Handler],
    client: Callable[[str], Any],
    queues: Mapping[str, QueueAddress],
    stream_arns: Mapping[str, str],
    prefix: str,
    region: str,
    account: str,
    names: Collection[str] = PUMP_NAMES,
) -> dict[str, AnyPump]:
    """The pumps ``names`` (in :data:`CIRRUS_PUMP_NAMES` order), by name.

    ``handler_for`` gives the handler of a function by its name after ``{prefix}-``
    (``process``, ``update-state``, ``callback``, ``cirrus-events``); ``client`` a client
    of a service, asked once per pump; ``queues`` and ``stream_arns`` the queues and table
    streams by their logical ids in the template. Each pump takes its trigger's settings
    from ``sources``; the pumps' platform model is left as the pumps default it.

    Raises:
        TemplateError: The template has no trigger for a pump of ``names``.
        KeyError: A name is no pump's, or a queue or stream a pump reads is not given.
    """
    unknown = set(names) - set(CIRRUS_PUMP_NAMES)
    if unknown:
        msg = f"no such pumps: {sorted(unknown)}"
        raise KeyError(msg)
    pumps: dict[str, AnyPump] = {}
    for name in CIRRUS_PUMP_NAMES:
        if name not in names:
            continue
        if name == "executions":
            pumps[name] = _execution_pump(
                sources,
                handler_for=handler_for,
                client=client,
                prefix=prefix,
                region=region,
                account=account,
            )
        elif name == "stream":
            pumps[name] = _stream_pump(
                sources,
                handler_for=handler_for,
                client=client,
                stream_arns=stream_arns,
                region=region,
            )
        else:
            pumps[name] = _sqs_pump(
                name, sources, handler_for=handler_for, client=client, queues=queues, region=region
            )
    return pumps


def _sqs_pump(
    name: str,
    sources: EventSources,
    *,
    handler_for: Callable[[str], Handler],
    client: Callable[[str], Any],
    queues: Mapping[str, QueueAddress],
    region: str,
) -> SqsPump:
    function, event = SQS_PUMPS[name]
    source = sources.sqs.get((function, event))
    if source is None:
        msg = f"template.yaml: function {function} has no SQS trigger {event}"
        raise template_reader.TemplateError(msg)
    address = _given(queues, source.queue, "queue")
    return SqsPump(
        sqs=client("sqs"),
        queue_url=address.url,
        queue_arn=address.arn,
        handler=handler_for(function),
        region=region,
        function_name=function,
        batch_size=source.batch_size,
        name=name,
    )


def _execution_pump(
    sources: EventSources,
    *,
    handler_for: Callable[[str], Handler],
    client: Callable[[str], Any],
    prefix: str,
    region: str,
    account: str,
) -> ExecutionPump:
    function, event = EXECUTIONS_RULE
    if EXECUTIONS_RULE not in sources.rules:
        msg = f"template.yaml: function {function} has no EventBridge rule {event}"
        raise template_reader.TemplateError(msg)
    return ExecutionPump(
        sfn=client("stepfunctions"),
        handler=handler_for(function),
        prefix=prefix,
        region=region,
        account=account,
        function_name=function,
    )


def _stream_pump(
    sources: EventSources,
    *,
    handler_for: Callable[[str], Handler],
    client: Callable[[str], Any],
    stream_arns: Mapping[str, str],
    region: str,
) -> StreamPump:
    function, event = STREAM_TRIGGER
    source = sources.streams.get(STREAM_TRIGGER)
    if source is None:
        msg = f"template.yaml: function {function} has no DynamoDB stream trigger {event}"
        raise template_reader.TemplateError(msg)
    return StreamPump(
        streams=client("dynamodbstreams"),
        stream_arn=_given(stream_arns, source.table, "stream of table"),
        handler=handler_for(function),
        region=region,
        filter_pattern=dict(source.filter_pattern),
        function_name=function,
        batch_size=source.batch_size,
    )


def _given(found: Mapping[str, _T], logical_id: str, what: str) -> _T:
    if logical_id not in found:
        msg = f"the pumps need the {what} {logical_id}, which was not given"
        raise KeyError(msg)
    return found[logical_id]
