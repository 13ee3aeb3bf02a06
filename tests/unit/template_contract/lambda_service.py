"""What Lambda itself needs from each function's role (not the handler's calls)."""

from __future__ import annotations

import pytest

from tests.unit.template_contract.cfn import Stack, referenced_ids
from tests.unit.template_contract.functions import CIRRUS_EVENTS_FUNCTION

# The statements of each function's role that Lambda uses, not the handler: the event
# source mapping's polling, log delivery to the function's own log group, failure
# destinations and X-Ray. The handlers cannot exercise them offline, so the dynamic IAM
# test leaves exactly these Sids out of its "every grant is used" check, and
# test_lambda_service_statements_grant_exactly_what_lambda_needs holds each of them to
# the actions and resources the function's own configuration calls for.
LAMBDA_SERVICE_STATEMENTS: dict[str, frozenset[str]] = {
    "ProcessFunction": frozenset({"WriteOwnLogs", "PollProcessQueue", "UploadTraces"}),
    "UpdateStateFunction": frozenset(
        {"WriteOwnLogs", "PollStatusReports", "DeliverFailedInvocations", "UploadTraces"}
    ),
    "CallbackFunction": frozenset(
        {
            "WriteOwnLogs",
            "ReadDependencyStream",
            "ListStreams",
            "DeliverFailedBatches",
            "UploadTraces",
        }
    ),
    "SweeperFunction": frozenset({"WriteOwnLogs", "UploadTraces"}),
    # cirrus mode only (template_contract/test_cirrus_mode.py holds them to what Lambda needs)
    CIRRUS_EVENTS_FUNCTION: frozenset({"WriteOwnLogs", "PollCirrusEvents", "UploadTraces"}),
}
# What Lambda does with a function's role, per feature (Lambda developer guide: with-sqs,
# with-ddb, services-xray; AWS::Lambda::EventSourceMapping / EventInvokeConfig OnFailure).
LOG_WRITE_ACTIONS = ("logs:CreateLogStream", "logs:PutLogEvents")
SQS_POLL_ACTIONS = ("sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes")
STREAM_READ_ACTIONS = (
    "dynamodb:DescribeStream",
    "dynamodb:GetRecords",
    "dynamodb:GetShardIterator",
)
XRAY_UPLOAD_ACTIONS = ("xray:PutTraceSegments", "xray:PutTelemetryRecords")
DESTINATION_ACTIONS = {"SQS": "sqs:SendMessage"}


def lambda_service_needs(stack: Stack, function: str) -> set[tuple[str, str]]:
    """(action, resource) pairs Lambda itself needs from the function's role."""
    properties = stack.resolved_properties(function)
    raw = stack.properties(function)
    (log_group,) = referenced_ids(raw["LoggingConfig"]["LogGroup"])
    assert stack.resources[log_group]["Type"] == "AWS::Logs::LogGroup", "its own log group"
    needs = {(action, stack.arn_of(log_group)) for action in LOG_WRITE_ACTIONS}
    if properties.get("Tracing") == "Active":
        needs |= {(action, "*") for action in XRAY_UPLOAD_ACTIONS}
    destinations = [
        properties.get("EventInvokeConfig", {}).get("DestinationConfig", {}).get(outcome)
        for outcome in ("OnSuccess", "OnFailure")
    ]
    for event in properties["Events"].values():
        source = event["Properties"]
        if event["Type"] == "SQS":
            needs |= {(action, source["Queue"]) for action in SQS_POLL_ACTIONS}
        elif event["Type"] == "DynamoDB":
            needs |= {(action, source["Stream"]) for action in STREAM_READ_ACTIONS}
            needs.add(("dynamodb:ListStreams", "*"))
            destinations.append(source.get("DestinationConfig", {}).get("OnFailure"))
        elif event["Type"] not in ("EventBridgeRule", "Schedule"):
            # EventBridgeRule and Schedule push: a resource policy on the function, no grant
            pytest.fail(f"{function}: teach lambda_service_needs the {event['Type']} event")
    assert "DeadLetterQueue" not in properties, "teach lambda_service_needs DeadLetterQueue"
    for destination in filter(None, destinations):
        needs.add((DESTINATION_ACTIONS[destination["Type"]], destination["Destination"]))
    return needs
