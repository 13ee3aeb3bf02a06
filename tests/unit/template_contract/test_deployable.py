"""``template.yaml`` deploys on a new account and stays healthy there.

A new account's Lambda concurrency quota is 10, and Lambda keeps 100 executions unreserved
(Lambda Developer Guide, "Configuring reserved concurrency"), so any reservation fails the
stack's creation there. The process queue's trigger caps its own concurrency
(``ScalingConfig.MaximumConcurrency``, 2 to 1000: Lambda API reference, ``ScalingConfig``), and
every function tells Lambda to stop a recursive loop (``RecursiveLoop``: Lambda Developer Guide,
"Use Lambda recursive loop detection to prevent infinite loops"). Every working queue and every
function is alarmed, the example workflows deploy only when asked for, and in cirrus mode what
SNS cannot deliver has a dead-letter queue of its own.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.template_contract.cfn import Stack
from tests.unit.template_contract.functions import environment
from tests.unit.template_contract.parameters import EVERYTHING_ON
from tests.unit.test_transformed_template import mappings

# A new account's concurrent executions quota, and what Lambda keeps unreserved of it.
NEW_ACCOUNT_QUOTA = 10
UNRESERVED_MINIMUM = 100
# Lambda's range for an SQS trigger's ScalingConfig.MaximumConcurrency.
MAXIMUM_CONCURRENCY_RANGE = (2, 1000)
# AWS's advice for a queue feeding Lambda: at least 5 receives before the DLQ.
MIN_RECEIVE_COUNT = 5
CIRRUS = {"CirrusPrefix": "my-cirrus"}
MODES = [
    pytest.param({}, id="defaults"),
    pytest.param(CIRRUS, id="cirrus"),
    pytest.param(EVERYTHING_ON, id="everything-on"),
]
EXAMPLES = {"SimulateStateMachine", "SimulateExpressStateMachine"}


def deployed(stack: Stack, kind: str | None = None, section: str = "Resources") -> set[str]:
    """Logical ids (of one type) the stack creates, conditions evaluated."""
    return {
        logical_id
        for logical_id, entry in stack.template.get(section, {}).items()
        if (kind is None or entry.get("Type") == kind)
        and ("Condition" not in entry or stack.condition(entry["Condition"]))
    }


def reserved(stack: Stack) -> int:
    """Executions the stack's functions reserve in all."""
    return sum(
        int(stack.resolved_properties(function).get("ReservedConcurrentExecutions", 0))
        for function in deployed(stack, "AWS::Lambda::Function")
    )


def accepted_by_a_new_account(stack: Stack) -> bool:
    """Whether a new account (quota 10) can create the stack's concurrency settings."""
    left = NEW_ACCOUNT_QUOTA - reserved(stack)
    return reserved(stack) == 0 or left >= UNRESERVED_MINIMUM


@pytest.mark.parametrize("parameters", MODES)
def test_a_new_account_s_quota_accepts_the_stack_s_concurrency(
    transformed: dict[str, Any], parameters: dict[str, str]
) -> None:
    # GIVEN the stack as CloudFormation receives it
    stack = Stack(transformed, parameters)
    # THEN no function reserves concurrency, so a quota of 10 creates it
    assert reserved(stack) == 0
    assert accepted_by_a_new_account(stack)
    # AND the process queue's trigger, with the join queue's at its lowest (what a new
    # account sets: the default is sized for StartExecution's floor on an account's
    # default quota, docs/performance.md), stays within that quota, leaving the other
    # functions room
    caps = {
        m["EventSourceArn"]: int(m["ScalingConfig"]["MaximumConcurrency"])
        for m in mappings(stack, "ProcessFunction")
    }
    assert len(caps) == 2
    lowest_join = MAXIMUM_CONCURRENCY_RANGE[0]
    assert caps[stack.arn_of("ProcessQueue")] + lowest_join < NEW_ACCOUNT_QUOTA


def test_a_sweeper_reservation_is_opt_in_and_refused_by_a_new_account(
    transformed: dict[str, Any],
) -> None:
    # GIVEN a reservation of one for the sweeper
    stack = Stack(transformed, {"SweeperReservedConcurrency": "1"})
    # THEN the sweeper reserves it, and a new account could not create the stack
    assert stack.resolved_properties("SweeperFunction")["ReservedConcurrentExecutions"] == "1"
    assert not accepted_by_a_new_account(stack)


@pytest.mark.parametrize(
    ("parameter", "queue"),
    [("ProcessMaxConcurrency", "ProcessQueue"), ("JoinMaxConcurrency", "JoinQueue")],
)
def test_the_process_triggers_cap_their_concurrency_within_lambda_s_range(
    template: dict[str, Any], transformed: dict[str, Any], parameter: str, queue: str
) -> None:
    # GIVEN the parameter and the queue's event source mapping
    spec = template["Parameters"][parameter]
    low, high = MAXIMUM_CONCURRENCY_RANGE
    # THEN the parameter accepts exactly Lambda's range, with a default inside it
    assert (spec["MinValue"], spec["MaxValue"]) == (low, high)
    assert low <= int(spec["Default"]) <= high
    for value in (str(low), str(high)):
        stack = Stack(transformed, {parameter: value})
        (mapping,) = [
            m
            for m in mappings(stack, "ProcessFunction")
            if m["EventSourceArn"] == stack.arn_of(queue)
        ]
        # AND the mapping takes it as its ScalingConfig
        assert mapping["ScalingConfig"] == {"MaximumConcurrency": value}


@pytest.mark.parametrize("parameters", MODES)
def test_every_sqs_trigger_caps_its_concurrency(
    transformed: dict[str, Any], parameters: dict[str, str]
) -> None:
    # GIVEN every SQS event source mapping the stack creates
    stack = Stack(transformed, parameters)
    sqs_arns = {stack.arn_of(queue) for queue in deployed(stack, "AWS::SQS::Queue")}
    found = [
        stack.resolved_properties(mapping)
        for mapping in deployed(stack, "AWS::Lambda::EventSourceMapping")
    ]
    triggers = [m for m in found if m["EventSourceArn"] in sqs_arns]
    assert len(triggers) == (4 if "CirrusPrefix" in parameters else 3)
    low, high = MAXIMUM_CONCURRENCY_RANGE
    # THEN each caps its invocations within Lambda's range: past it Lambda leaves messages
    # queued, so no burst of one queue takes the others' share of the account's concurrency
    for mapping in triggers:
        cap = mapping.get("ScalingConfig", {}).get("MaximumConcurrency")
        assert cap is not None, mapping["EventSourceArn"]
        assert low <= int(cap) <= high, mapping["EventSourceArn"]


@pytest.mark.parametrize(
    ("function", "queue"),
    [("UpdateStateFunction", "StatusReportQueue"), ("CirrusEventsFunction", "CirrusEventsQueue")],
)
def test_the_status_event_triggers_take_status_events_max_concurrency(
    template: dict[str, Any], transformed: dict[str, Any], function: str, queue: str
) -> None:
    # GIVEN the parameter, Lambda's range, and the trigger of the events that end payloads
    spec = template["Parameters"]["StatusEventsMaxConcurrency"]
    low, high = MAXIMUM_CONCURRENCY_RANGE
    assert (spec["MinValue"], spec["MaxValue"]) == (low, high)
    assert low <= int(spec["Default"]) <= high
    for value in (str(low), str(high)):
        stack = Stack(transformed, {**CIRRUS, "StatusEventsMaxConcurrency": value})
        (mapping,) = [
            m for m in mappings(stack, function) if m["EventSourceArn"] == stack.arn_of(queue)
        ]
        # THEN the mapping takes it as its ScalingConfig
        assert mapping["ScalingConfig"] == {"MaximumConcurrency": value}


def test_a_good_message_outlasts_throttling_longer_than_the_default_wait(
    template: dict[str, Any],
) -> None:
    stack = Stack(template)
    receives = int(str(stack.parameter("ProcessMaxReceiveCount")))
    queue = stack.resolved_properties("ProcessQueue")
    # GIVEN the receives a message gets, each held for the queue's visibility timeout while
    # Lambda retries a throttled invocation
    held = receives * int(queue["VisibilityTimeout"])
    # THEN there are at least AWS's advised 5, and together they outlast the default wait
    assert receives >= MIN_RECEIVE_COUNT
    assert held > int(str(stack.parameter("MaxWaitSeconds")))
    # AND the queue, and the process function answering on the last receive, use that count
    assert queue["RedrivePolicy"]["maxReceiveCount"] == str(receives)
    variables = environment(stack, "ProcessFunction")
    assert variables["DEPTRACK_PROCESS_MAX_RECEIVE_COUNT"] == str(receives)


@pytest.mark.parametrize("parameters", MODES)
def test_every_function_has_lambda_stop_a_recursive_loop(
    transformed: dict[str, Any], parameters: dict[str, str]
) -> None:
    stack = Stack(transformed, parameters)
    functions = deployed(stack, "AWS::Lambda::Function")
    assert functions
    for function in functions:
        assert stack.resolved_properties(function).get("RecursiveLoop") == "Terminate", function


def alarms_on(stack: Stack, namespace: str, metric: str) -> dict[str, dict[str, Any]]:
    """The alarms on one metric, by the value of their single dimension."""
    found = {}
    for alarm in deployed(stack, "AWS::CloudWatch::Alarm"):
        properties = stack.resolved_properties(alarm)
        if (properties.get("Namespace"), properties.get("MetricName")) == (namespace, metric):
            (dimension,) = properties["Dimensions"]
            found[dimension["Value"]] = properties
    return found


@pytest.mark.parametrize("parameters", [{}, CIRRUS])
def test_every_queue_and_every_function_is_alarmed_and_the_alarms_notify(
    template: dict[str, Any], parameters: dict[str, str]
) -> None:
    stack = Stack(template, {**parameters, "AlarmEmail": "ops@example.com"})
    queues = {
        queue: stack.resolved_properties(queue) for queue in deployed(stack, "AWS::SQS::Queue")
    }
    names = {queue: stack.physical(queue).attributes["QueueName"] for queue in queues}
    working = {queue for queue, properties in queues.items() if "RedrivePolicy" in properties}
    assert {"ProcessQueue", "StatusReportQueue"} <= working
    # GIVEN the alarms on queue age, queue depth and function errors
    age = alarms_on(stack, "AWS/SQS", "ApproximateAgeOfOldestMessage")
    depth = alarms_on(stack, "AWS/SQS", "ApproximateNumberOfMessagesVisible")
    errors = alarms_on(stack, "AWS/Lambda", "Errors")
    # THEN each working queue's oldest message is watched, past QueueAgeAlarmSeconds
    for queue in working:
        alarm = age[names[queue]]
        assert alarm["Threshold"] == stack.parameter("QueueAgeAlarmSeconds"), queue
    # AND every other queue (a dead-letter queue) alarms as soon as it holds a message
    for queue in set(queues) - working:
        assert depth[names[queue]]["Threshold"] == 0, queue
    # AND every function's crashes are alarmed
    functions = deployed(stack, "AWS::Serverless::Function")
    assert set(errors) == {stack.physical(function).ref for function in functions}
    # AND every alarm notifies the topic made for AlarmEmail
    for alarm_id in deployed(stack, "AWS::CloudWatch::Alarm"):
        actions = stack.resolved_properties(alarm_id)["AlarmActions"]
        assert actions == [stack.physical("AlarmTopic").ref], alarm_id


@pytest.mark.parametrize(("value", "examples"), [("false", False), ("true", True)])
def test_deploy_examples_alone_brings_the_example_workflows(
    template: dict[str, Any], value: str, examples: bool
) -> None:
    # GIVEN the default (false), or DeployExamples true
    default = template["Parameters"]["DeployExamples"]["Default"]
    stack = Stack(template, {} if value == default else {"DeployExamples": value})
    machines = deployed(stack, "AWS::Serverless::StateMachine")
    # THEN the parents always deploy, and the examples, their roles, log groups and outputs
    # only when asked for
    assert {"WaitForDependenciesStateMachine", "WaitForJoinStateMachine"} <= machines
    assert (machines >= EXAMPLES) is examples
    assert not (EXAMPLES & machines) or examples
    parts = {
        "SimulateRole",
        "SimulateExpressRole",
        "SimulateLogGroup",
        "SimulateExpressLogGroup",
    }
    assert (parts <= deployed(stack)) is examples
    assert not (parts & deployed(stack)) or examples
    outputs = {"SimulateStateMachineArn", "SimulateExpressStateMachineArn"}
    assert (outputs <= deployed(stack, section="Outputs")) is examples
    # (cfn-lint, `make lint`, refuses a reference to them from what always deploys)
    assert default == "false"


def test_the_cirrus_subscription_has_a_dead_letter_queue_that_is_alarmed(
    template: dict[str, Any],
) -> None:
    stack = Stack(template, CIRRUS)
    # GIVEN cirrus mode's subscription to cirrus's workflow-event topic
    subscription = stack.resolved_properties("CirrusWorkflowEventSubscription")
    dlq = stack.physical("CirrusSubscriptionDlq")
    # THEN what SNS cannot deliver goes to a queue of the stack's own, which is alarmed
    assert subscription["RedrivePolicy"] == {"deadLetterTargetArn": dlq.attributes["Arn"]}
    depth = alarms_on(stack, "AWS/SQS", "ApproximateNumberOfMessagesVisible")
    assert depth[dlq.attributes["QueueName"]]["Threshold"] == 0
    # AND in normal mode none of it exists
    normal = Stack(template)
    assert "CirrusSubscriptionDlq" not in deployed(normal)
