"""Tables, queues and the payload bucket against the code, and the batch-settings Rules.

The tables' schema, TTL and stream as the code creates them; queues that redrive and
outlast their functions; the template's ``Rules`` evaluated for given parameter values
(``template_contract.rules``) against what Lambda accepts and what a function finishes in
its timeout; and a bucket lifecycle that keeps pointers for the longest wait.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from dependency_tracker.core import limits, settings
from dependency_tracker.table import schema as table_schema
from tests.unit.template_contract import markdown
from tests.unit.template_contract import rules as template_rules
from tests.unit.template_contract.cfn import ROOT, Stack, referenced_ids
from tests.unit.template_contract.functions import environment, unresolved_event

# ---------------------------------------------------------------------- storage and queues


def test_tables_match_the_schema_the_code_uses(stack: Stack) -> None:
    for logical_id, build in (
        ("StateTable", table_schema.state_table_definition),
        ("DependencyTable", table_schema.dependency_table_definition),
    ):
        properties = stack.resolved_properties(logical_id)
        expected = build(properties["TableName"])
        for key in ("KeySchema", "BillingMode"):
            assert properties[key] == expected[key], (logical_id, key)
        assert properties.get("GlobalSecondaryIndexes") == expected.get("GlobalSecondaryIndexes")
        assert sorted(properties["AttributeDefinitions"], key=str) == sorted(
            expected["AttributeDefinitions"], key=str
        )
        assert properties["TimeToLiveSpecification"] == {
            "AttributeName": table_schema.TTL_ATTRIBUTE,
            "Enabled": True,
        }
        assert properties["PointInTimeRecoverySpecification"] == {
            "PointInTimeRecoveryEnabled": True
        }
        assert properties["SSESpecification"]["SSEEnabled"] is True
        stream = expected.get("StreamSpecification")
        if stream:
            assert properties["StreamSpecification"] == {"StreamViewType": stream["StreamViewType"]}
        else:
            assert "StreamSpecification" not in properties
    # the names the local stack uses for the same prefix
    assert stack.physical("StateTable").ref == f"{stack.parameter('Prefix')}-state"
    assert stack.physical("DependencyTable").ref == f"{stack.parameter('Prefix')}-dependencies"


def test_process_queue_redrives_and_outlasts_the_function(
    stack: Stack, transformed: dict[str, Any]
) -> None:
    queue = stack.resolved_properties("ProcessQueue")
    # the timeout the deployed function gets (Globals merged by SAM itself), and the
    # longest window the parameters and Rules admit (Lambda allows up to 300 s)
    timeout = int(Stack(transformed).resolved_properties("ProcessFunction")["Timeout"])
    windows = [w for w in range(301) if admitted(stack.template, "1", str(w))]
    assert windows == list(range(61))
    # AWS: visibility timeout >= 6 x the function timeout (+ the batching window)
    assert int(queue["VisibilityTimeout"]) >= 6 * timeout + max(windows)
    assert queue["RedrivePolicy"] == {
        "deadLetterTargetArn": stack.arn_of("ProcessDlq"),
        "maxReceiveCount": stack.parameter("ProcessMaxReceiveCount"),
    }
    # the function knows which receive is the last, to answer the parent before the DLQ
    variables = environment(stack, "ProcessFunction")
    assert (
        variables[settings.ENV_PROCESS_MAX_RECEIVE_COUNT]
        == queue["RedrivePolicy"]["maxReceiveCount"]
    )
    mapping = unresolved_event(stack, "ProcessFunction", "SQS", "ProcessQueue")
    assert mapping["Queue"] == {"Fn::GetAtt": ["ProcessQueue", "Arn"]}
    assert mapping["BatchSize"] == {"Ref": "ProcessBatchSize"}
    assert mapping["MaximumBatchingWindowInSeconds"] == {"Ref": "ProcessBatchingWindowSeconds"}


def test_the_join_queue_hands_the_process_function_one_chunk_at_a_time(stack: Stack) -> None:
    """Each invocation registers one chunk, whatever ProcessBatchSize; failures reach the DLQ."""
    mapping = unresolved_event(stack, "ProcessFunction", "SQS", "JoinQueue")
    assert mapping["Queue"] == {"Fn::GetAtt": ["JoinQueue", "Arn"]}
    assert mapping["BatchSize"] == 1
    assert "MaximumBatchingWindowInSeconds" not in mapping
    assert mapping["ScalingConfig"] == {"MaximumConcurrency": {"Ref": "JoinMaxConcurrency"}}
    queue = stack.resolved_properties("JoinQueue")
    timeout = int(stack.resolved_properties("ProcessFunction").get("Timeout", 60))
    assert int(queue["VisibilityTimeout"]) >= 6 * timeout
    # the same receive count as the process queue: the handler's last-receive rule holds
    assert queue["RedrivePolicy"] == {
        "deadLetterTargetArn": stack.arn_of("ProcessDlq"),
        "maxReceiveCount": stack.parameter("ProcessMaxReceiveCount"),
    }
    join_queue_url = stack.physical("JoinQueue").ref
    assert environment(stack, "ProcessFunction")[settings.ENV_JOIN_QUEUE_URL] == join_queue_url


def test_queues_take_the_message_size_the_tracker_sizes_for(stack: Stack) -> None:
    """The queues the handlers write to have the maximum the embedded stack's queues have."""
    for name in ("ProcessQueue", "JoinQueue", "StatusReportQueue"):
        size = stack.resolved_properties(name)["MaximumMessageSize"]
        assert int(size) == limits.SQS_DEFAULT_MAX_MESSAGE_BYTES, name


def test_status_report_queue_outlasts_update_state(
    stack: Stack, transformed: dict[str, Any]
) -> None:
    queue = stack.resolved_properties("StatusReportQueue")
    timeout = int(Stack(transformed).resolved_properties("UpdateStateFunction")["Timeout"])
    mapping = unresolved_event(stack, "UpdateStateFunction", "SQS")
    window = int(mapping.get("MaximumBatchingWindowInSeconds", 0))
    assert int(queue["VisibilityTimeout"]) >= 6 * timeout + window


# ---------------------------------------------------------------------- batch settings (Rules)

# AWS: an SQS event source mapping takes BatchSize 1 to 10,000 and a batching window of 0
# to 300 s, and a batch over 10 needs a window of at least 1 s (Lambda API reference,
# MaximumBatchingWindowInSeconds; "Lambda parameters for Amazon SQS event source mappings").
SQS_MAX_BATCH = 10_000
SQS_MAX_WINDOW = 300
SQS_UNWINDOWED_MAX_BATCH = 10
# The process function's batch bound (docs/deploy.md, "Batch settings"): each message costs
# at most its worst path's AWS calls at the latencies bench/prices.json assumes, plus the
# per-invocation overhead it assumes; TAIL_FACTOR covers slow calls and the SDK's retries
# (standard mode: up to 3 attempts); a full batch may use BATCH_SHARE of the timeout, the
# rest is for a cold start and a join message in the same batch (a 1,000-member join needs
# about 40 s: docs/performance.md).
PROCESS_WORST_MESSAGE_CALLS = {
    # a {"url"} payload read; a large execution input written by reference
    "s3": 2,
    # waiter PutItem, cycle-check edge PutItem and Query, state GetItem, claim PutItem,
    # start UpdateItem
    "dynamodb": 6,
    "stepfunctions": 1,  # StartExecution
}
CALLBACK_WORST_RECORD_CALLS = {
    # row GetItem, member UpdateItem, join decision UpdateItem, notified UpdateItem, the
    # join row read again after its results manifest is written
    "dynamodb": 5,
    "stepfunctions": 1,  # SendTaskSuccess / SendTaskFailure
    # an output past the callback bound, stored by reference; the join's results manifest
    "s3": 2,
}
# Per status report, before its waiters (each waiter adds one conditional UpdateItem).
STATUS_REPORT_CALLS = {
    "stepfunctions": 1,  # DescribeExecution of a large input
    "dynamodb": 3,  # state GetItem and UpdateItem, waiters Query
    "s3": 3,  # payload read, result and chained body written by reference
    "sqs": 1,  # the next chain step
}
TAIL_FACTOR = 3
BATCH_SHARE = 0.5
PRICES = ROOT / "bench" / "prices.json"


def admitted(template: dict[str, Any], batch: str, window: str) -> bool:
    """Whether the parameter constraints and the Rules let a stack have these batch settings."""
    parameters = template["Parameters"]
    for name, value in (("ProcessBatchSize", batch), ("ProcessBatchingWindowSeconds", window)):
        spec = parameters[name]
        if not spec["MinValue"] <= float(value) <= spec["MaxValue"]:
            return False  # CloudFormation refuses it before the Rules
    values = {"ProcessBatchSize": batch, "ProcessBatchingWindowSeconds": window}
    return not template_rules.refusals(template, values)


def worst_item_ms(calls: dict[str, int]) -> int:
    """Milliseconds one batch item may take: its calls at the assumed latencies, with margin."""
    assumptions = json.loads(PRICES.read_text())["assumptions"]
    latency = assumptions["aws_call_latency_ms"]["value"]
    overhead = int(assumptions["lambda_invocation_overhead_ms"]["value"])
    return TAIL_FACTOR * (sum(int(latency[service]) * n for service, n in calls.items()) + overhead)


def test_batch_rules_are_declared_with_their_reasons(template: dict[str, Any]) -> None:
    rules = template["Rules"]
    assert set(rules) >= {"ProcessBatchSettings", "ProcessBatchOverTenNeedsWindow"}
    for name, rule in rules.items():
        assert rule["Assertions"], name
        for assertion in rule["Assertions"]:
            description = assertion["AssertDescription"]
            # the refusal names the parameter it is about and says why
            assert re.search(r"\bProcess\w+", description), (name, description)
            assert len(description) > 60, (name, description)
            assert referenced_ids(assertion["Assert"]) <= set(template["Parameters"])
    # the window rule applies exactly above 10
    condition = rules["ProcessBatchOverTenNeedsWindow"]["RuleCondition"]
    assert referenced_ids(condition) == {"ProcessBatchSize"}


@pytest.mark.parametrize(
    ("batch", "window", "refused_by"),
    [
        pytest.param("10", "0", set(), id="10-without-window"),
        pytest.param("11", "0", {"ProcessBatchOverTenNeedsWindow"}, id="11-without-window"),
        pytest.param("11", "1", set(), id="11-with-1s"),
        pytest.param("100", "0", {"ProcessBatchOverTenNeedsWindow"}, id="100-without-window"),
        pytest.param("100", "60", set(), id="cap-with-largest-window"),
        pytest.param("101", "1", {"ProcessBatchSettings"}, id="over-the-cap"),
        pytest.param("10000", "60", {"ProcessBatchSettings"}, id="aws-maximum"),
        pytest.param("1", "0", set(), id="smallest"),
        # 0 is "not 1 to 10" too: both rules refuse it
        pytest.param(
            "0", "0", {"ProcessBatchSettings", "ProcessBatchOverTenNeedsWindow"}, id="zero"
        ),
        pytest.param("10.5", "1", {"ProcessBatchSettings"}, id="not-whole"),
        pytest.param("10", "61", {"ProcessBatchSettings"}, id="window-over-60"),
        pytest.param("20", "0.5", {"ProcessBatchSettings"}, id="window-not-whole"),
    ],
)
def test_batch_rules_at_their_boundaries(
    template: dict[str, Any], batch: str, window: str, refused_by: set[str]
) -> None:
    values = {"ProcessBatchSize": batch, "ProcessBatchingWindowSeconds": window}
    assert template_rules.refused_rules(template, values) == refused_by


def test_rules_admit_exactly_what_lambda_accepts_and_the_function_can_finish(
    template: dict[str, Any],
) -> None:
    cap = int(template["Parameters"]["ProcessBatchSize"]["MaxValue"])
    # every whole batch size and window Lambda itself takes (batch sizes sampled past 200)
    batches = [*range(1, 201), 500, 1_000, 5_000, SQS_MAX_BATCH]
    for batch in batches:
        for window in range(SQS_MAX_WINDOW + 1):
            lambda_accepts = batch <= SQS_UNWINDOWED_MAX_BATCH or window >= 1
            expected = lambda_accepts and batch <= cap and window <= 60
            assert admitted(template, str(batch), str(window)) is expected, (batch, window)
    # the defaults deploy
    assert template_rules.refusals(template, {}) == []


def test_process_batch_cap_is_what_the_function_finishes_in_its_timeout(
    template: dict[str, Any], transformed: dict[str, Any]
) -> None:
    timeout_ms = 1000 * int(Stack(transformed).resolved_properties("ProcessFunction")["Timeout"])
    per_message = worst_item_ms(PROCESS_WORST_MESSAGE_CALLS)
    assert per_message == 300, "docs/deploy.md states 0.3 s per message"
    # the cap is the largest batch whose worst case fits the share of the timeout
    cap = int(template["Parameters"]["ProcessBatchSize"]["MaxValue"])
    assert cap == int(timeout_ms * BATCH_SHARE) // per_message
    assert cap <= SQS_MAX_BATCH
    # docs/deploy.md states the bound and the estimate behind it
    deploy = (ROOT / "docs" / "deploy.md").read_text(encoding="utf-8")
    (row,) = [r for r in markdown.table_rows(deploy) if "ProcessBatchSize" in r[0]]
    assert f"1 to {cap} messages" in " ".join(row)
    assert "0.3 s per message" in markdown.section(deploy, "Batch settings")


@pytest.mark.parametrize(
    ("function", "source", "calls"),
    [
        pytest.param("CallbackFunction", "DependencyTable", CALLBACK_WORST_RECORD_CALLS, id="cb"),
        pytest.param("UpdateStateFunction", "StatusReportQueue", STATUS_REPORT_CALLS, id="us"),
    ],
)
def test_fixed_batches_fit_their_function_timeout(
    transformed: dict[str, Any], function: str, source: str, calls: dict[str, int]
) -> None:
    built = Stack(transformed)
    timeout_ms = 1000 * int(built.resolved_properties(function)["Timeout"])
    arns = {built.arn_of(source), built.physical(source).attributes.get("StreamArn")}
    (mapping,) = [
        built.resolved_properties(m)
        for m in built.of_type("AWS::Lambda::EventSourceMapping")
        if built.resolved_properties(m)["EventSourceArn"] in arns
    ]
    assert int(mapping["BatchSize"]) * worst_item_ms(calls) <= timeout_ms * BATCH_SHARE


def test_no_pointer_expires_before_the_longest_wait(template: dict[str, Any]) -> None:
    # GIVEN the payload bucket's lifecycle and the longest wait a parent can make: its
    # callback timeout (MaxWaitSeconds, or the parent's own), within a Standard execution's year
    parameters = template["Parameters"]
    day = 86_400
    longest_wait = max(int(parameters["MaxWaitSeconds"]["MaxValue"]), 365 * day)
    (rule,) = [
        r
        for r in template["Resources"]["PayloadBucket"]["Properties"]["LifecycleConfiguration"][
            "Rules"
        ]
        if "ExpirationInDays" in r
    ]
    # THEN the one expiry rule covers every object (pointers live under several prefixes),
    # and no allowed value of it ends a pointer's life before that wait plus a day
    assert "Prefix" not in rule
    assert "Filter" not in rule
    assert rule["ExpirationInDays"] == {"Ref": "PayloadRetentionDays"}
    assert int(parameters["PayloadRetentionDays"]["MinValue"]) * day >= longest_wait + day
