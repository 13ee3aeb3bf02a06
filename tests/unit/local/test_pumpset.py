"""The pump set takes each pump's trigger settings from ``template.yaml``, and only from there.

The pumps are built from the real template and from an edited copy: a batch size, a queue or
a filter written into the code again, instead of read from the template, fails a test here.
"""

from __future__ import annotations

import copy
import io
import json
from typing import TYPE_CHECKING, Any

import pytest
import yaml  # type: ignore[import-untyped]  # PyYAML comes with moto; no stubs here

from dependency_tracker_local import pumpset
from dependency_tracker_local import template as template_reader
from dependency_tracker_local.filters import CALLBACK_STREAM_FILTER
from dependency_tracker_local.pumps import ExecutionPump, SqsPump, StreamPump
from dependency_tracker_local.stack import EmbeddedStack
from tests.conftest import ACCOUNT, PREFIX, REGION

if TYPE_CHECKING:
    from collections.abc import Callable, Collection
    from pathlib import Path

    from dependency_tracker_local.pumps import Handler

STREAM_ARN = "arn:aws:dynamodb:us-east-1:123456789012:table/t/stream/1"
# The callback trigger's pattern in the edited copy: INVALID rows are not delivered.
EDITED_PATTERN = {
    "eventName": ["INSERT", "MODIFY"],
    "dynamodb": {"NewImage": {"workflow_state": {"S": ["FAILED", "SUCCEEDED"]}}},
}


def sources_of(template: dict[str, Any], **parameters: str) -> pumpset.EventSources:
    deployed = template_reader.Deployed(
        template, {"Prefix": PREFIX, **parameters}, account=ACCOUNT, region=REGION
    )
    return pumpset.event_sources(deployed)


def handler_of(function: str) -> Handler:
    def handler(event: dict[str, Any], context: Any) -> Any:
        return function

    return handler


def address(logical_id: str) -> pumpset.QueueAddress:
    return pumpset.QueueAddress(f"https://queue/{logical_id}", f"arn:queue:{logical_id}")


def build(
    sources: pumpset.EventSources,
    names: Collection[str] = pumpset.PUMP_NAMES,
    queues: Collection[str] = ("ProcessQueue", "JoinQueue", "StatusReportQueue"),
) -> dict[str, pumpset.AnyPump]:
    client: Callable[[str], Any] = lambda service: f"client of {service}"  # noqa: E731
    return pumpset.build_pumps(
        sources,
        handler_for=handler_of,
        client=client,
        queues={logical_id: address(logical_id) for logical_id in queues},
        stream_arns={"DependencyTable": STREAM_ARN},
        prefix=PREFIX,
        region=REGION,
        account=ACCOUNT,
        names=names,
    )


def edited(template: dict[str, Any]) -> dict[str, Any]:
    """The template with other trigger settings: batch sizes, and the callback's filter."""
    changed = copy.deepcopy(template)
    resources = changed["Resources"]
    process_events = resources["ProcessFunction"]["Properties"]["Events"]
    process_events["JoinQueue"]["Properties"]["BatchSize"] = 3
    update_state_events = resources["UpdateStateFunction"]["Properties"]["Events"]
    update_state_events["StatusReports"]["Properties"]["BatchSize"] = 7
    stream = resources["CallbackFunction"]["Properties"]["Events"]["DependencyStream"]
    stream["Properties"]["BatchSize"] = 50
    stream["Properties"]["FilterCriteria"]["Filters"] = [{"Pattern": json.dumps(EDITED_PATTERN)}]
    return changed


def sqs_settings(pump: Any) -> tuple[Any, ...]:
    assert isinstance(pump, SqsPump)
    return (pump.function_name, pump.queue_url, pump.queue_arn, pump.batch_size, pump.sqs)


def test_the_pumps_take_the_templates_trigger_settings() -> None:
    pumps = build(sources_of(template_reader.load_template()))

    assert list(pumps) == ["sqs", "joins", "reports", "executions", "stream"]
    assert {name: pump.name for name, pump in pumps.items()} == {name: name for name in pumps}
    # The join queue's trigger takes one chunk per invocation (template: BatchSize 1).
    assert sqs_settings(pumps["joins"]) == (
        "process",
        "https://queue/JoinQueue",
        "arn:queue:JoinQueue",
        1,
        "client of sqs",
    )
    assert sqs_settings(pumps["sqs"])[:4] == (
        "process",
        "https://queue/ProcessQueue",
        "arn:queue:ProcessQueue",
        10,
    )
    assert sqs_settings(pumps["reports"])[:4] == (
        "update-state",
        "https://queue/StatusReportQueue",
        "arn:queue:StatusReportQueue",
        10,
    )
    executions, stream = pumps["executions"], pumps["stream"]
    assert isinstance(executions, ExecutionPump)
    assert (executions.function_name, executions.prefix, executions.sfn) == (
        "update-state",
        PREFIX,
        "client of stepfunctions",
    )
    assert isinstance(stream, StreamPump)
    assert (stream.function_name, stream.stream_arn, stream.batch_size, stream.streams) == (
        "callback",
        STREAM_ARN,
        100,
        "client of dynamodbstreams",
    )
    assert stream.filter_pattern == CALLBACK_STREAM_FILTER
    # Each pump invokes its own function's handler.
    assert {name: pump.handler({}, None) for name, pump in pumps.items()} == {
        "sqs": "process",
        "joins": "process",
        "reports": "update-state",
        "executions": "update-state",
        "stream": "callback",
    }


def test_the_pumps_follow_an_edited_template() -> None:
    template = edited(template_reader.load_template())

    pumps = build(sources_of(template, ProcessBatchSize="5"))

    assert [sqs_settings(pumps[name])[3] for name in ("sqs", "joins", "reports")] == [5, 3, 7]
    stream = pumps["stream"]
    assert isinstance(stream, StreamPump)
    assert (stream.batch_size, stream.filter_pattern) == (50, EDITED_PATTERN)


def test_the_stack_builds_its_pumps_from_the_template(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a template whose join queue trigger takes 3 chunks and whose callback filter differs
    path = tmp_path / "template.yaml"
    template = edited(template_reader.load_template())
    path.write_text(yaml.safe_dump(template, sort_keys=False), encoding="utf-8")
    monkeypatch.setattr(template_reader, "TEMPLATE_PATH", path)

    # WHEN the embedded stack starts on it
    with EmbeddedStack(PREFIX, sink=io.StringIO(), sweeper_interval=None) as stack:
        joins, reports, stream = (stack.pumps[name] for name in ("joins", "reports", "stream"))

    # THEN its pumps take those settings
    assert isinstance(joins, SqsPump)
    assert isinstance(reports, SqsPump)
    assert (joins.batch_size, reports.batch_size) == (3, 7)
    assert isinstance(stream, StreamPump)
    assert (stream.batch_size, stream.filter_pattern) == (50, EDITED_PATTERN)


def test_cirrus_mode_adds_the_cirrus_events_pump() -> None:
    sources = sources_of(template_reader.load_template(), CirrusPrefix="cirrus")
    queues = ("ProcessQueue", "JoinQueue", "StatusReportQueue", "CirrusEventsQueue")

    pumps = build(sources, pumpset.CIRRUS_PUMP_NAMES, queues)

    assert list(pumps) == [*pumpset.PUMP_NAMES, "cirrus-events"]
    assert sqs_settings(pumps["cirrus-events"])[:4] == (
        "cirrus-events",
        "https://queue/CirrusEventsQueue",
        "arn:queue:CirrusEventsQueue",
        10,
    )
    assert pumps["cirrus-events"].handler({}, None) == "cirrus-events"


def test_some_pumps_need_only_their_own_queues() -> None:
    # The flow tests' harness: one process queue, no join or status-report queue.
    pumps = build(
        sources_of(template_reader.load_template()),
        ("stream", "sqs", "executions"),
        queues=("ProcessQueue",),
    )

    assert list(pumps) == ["sqs", "executions", "stream"]


def test_a_pump_without_its_trigger_or_queue_is_refused() -> None:
    template = copy.deepcopy(template_reader.load_template())
    del template["Resources"]["ProcessFunction"]["Properties"]["Events"]["JoinQueue"]

    with pytest.raises(template_reader.TemplateError, match="no SQS trigger JoinQueue"):
        build(sources_of(template))
    with pytest.raises(KeyError, match="JoinQueue"):
        build(sources_of(template_reader.load_template()), queues=("ProcessQueue",))
    with pytest.raises(KeyError, match="sweeper"):
        build(sources_of(template_reader.load_template()), ("sqs", "sweeper"))
    # Not cirrus mode: the template creates no cirrus-events function.
    with pytest.raises(template_reader.TemplateError, match="no SQS trigger CirrusEvents"):
        build(sources_of(template_reader.load_template()), pumpset.CIRRUS_PUMP_NAMES)


@pytest.mark.parametrize("cirrus", [False, True])
def test_the_built_in_sources_are_the_templates(cirrus: bool) -> None:
    # The fallback for a package without template.yaml must not drift from the template.
    parameters = {"CirrusPrefix": "cirrus"} if cirrus else {}

    expected = sources_of(template_reader.load_template(), **parameters)

    assert pumpset.builtin_sources(cirrus=cirrus) == expected
