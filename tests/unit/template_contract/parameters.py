"""Parameter sets the contract tests deploy the template with."""

from __future__ import annotations

from tests.unit.template_contract.cfn import ACCOUNT, REGION

# Another stack's prefix, to catch names the template spells out instead of deriving.
OTHER_STACK = {"Prefix": "pipeline"}
# Parameter values under which every conditional resource and statement exists.
ALARM_KEY = f"arn:aws:kms:{REGION}:{ACCOUNT}:key/1234abcd-12ab-34cd-56ef-1234567890ab"
EVERYTHING_ON = {
    "ExtraParentStateMachineArns": f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:my-parent",
    "ExtraPayloadReadArns": "arn:aws:s3:::shared-payloads/incoming/*",
    "AlarmEmail": "ops@example.com",
    "AlarmTopicKmsKeyArn": ALARM_KEY,
    "CirrusPrefix": "cirrus",
    "DeployExamples": "true",
}
