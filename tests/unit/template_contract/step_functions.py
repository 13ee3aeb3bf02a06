"""The template's state machines: workflow names, rendered definitions, Step Functions' grants."""

from __future__ import annotations

from dependency_tracker_local import definitions
from tests.unit.template_contract.cfn import LOG_DELIVERY_ACTIONS, ROOT, Stack

STATE_MACHINE = "AWS::Serverless::StateMachine"
# What Step Functions itself does with a state machine's role, by Sid: deliver the
# execution logs (no resource-level permissions) and upload X-Ray traces ("IAM policies
# for AWS X-Ray", Step Functions developer guide), both on "*".
SFN_XRAY_ACTIONS = frozenset(
    {
        "xray:PutTraceSegments",
        "xray:PutTelemetryRecords",
        "xray:GetSamplingRules",
        "xray:GetSamplingTargets",
    }
)
SFN_SERVICE_STATEMENTS = {
    "DeliverExecutionLogs": LOG_DELIVERY_ACTIONS,
    "UploadTraces": SFN_XRAY_ACTIONS,
}


def state_machines(stack: Stack) -> dict[str, str]:
    """Workflow name (the definition file's stem) → logical id of its state machine."""
    found = {}
    for logical_id in stack.of_type(STATE_MACHINE):
        uri = stack.properties(logical_id)["DefinitionUri"]
        found[str(uri).removeprefix("stepfunctions/").removesuffix(definitions.SUFFIX)] = logical_id
    return found


def rendered_definition(stack: Stack, logical_id: str) -> str:
    """The state machine's definition with the template's substitutions filled in."""
    properties = stack.resolved_properties(logical_id)
    substitutions = {k: str(v) for k, v in properties["DefinitionSubstitutions"].items()}
    return definitions.render(ROOT / properties["DefinitionUri"], substitutions)
