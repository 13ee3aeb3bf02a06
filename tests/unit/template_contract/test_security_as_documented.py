"""IAM least privilege and encryption, held to docs/security.md's tables.

Every grant names its actions; Resource ``"*"`` only where AWS offers nothing narrower;
the Lambda-service statements grant exactly what Lambda needs; scoped resources stay inside
the stack. The checks also cover the grants SAM adds to the roles it generates
(``template_contract.iam``) and hold docs/security.md to the template
(``template_contract.markdown``).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import pytest

from tests.unit.template_contract import iam, markdown
from tests.unit.template_contract.cfn import LOG_DELIVERY_ACTIONS, Stack
from tests.unit.template_contract.functions import FUNCTIONS
from tests.unit.template_contract.lambda_service import (
    LAMBDA_SERVICE_STATEMENTS,
    LOG_WRITE_ACTIONS,
    SQS_POLL_ACTIONS,
    STREAM_READ_ACTIONS,
    XRAY_UPLOAD_ACTIONS,
    lambda_service_needs,
)
from tests.unit.template_contract.parameters import EVERYTHING_ON, OTHER_STACK
from tests.unit.template_contract.security_doc import security_doc
from tests.unit.template_contract.step_functions import SFN_XRAY_ACTIONS, STATE_MACHINE

if TYPE_CHECKING:
    from collections.abc import Callable

# The only actions any role may hold on Resource "*": each is one AWS offers no narrower
# resource for (no resource-level permissions). Every entry must have its row in
# docs/security.md, answered "Yes".
STAR_RESOURCE_ACTIONS = frozenset(
    {
        # every role's UploadTraces (the state machines' also read sampling rules)
        *SFN_XRAY_ACTIONS,
        # the callback function's ListStreams (its stream's event source mapping)
        "dynamodb:ListStreams",
    }
    # Step Functions log delivery (the state machines' DeliverExecutionLogs)
    | LOG_DELIVERY_ACTIONS
)
# Resource types that keep data, with what makes each encrypted at rest.
ENCRYPTED_AT_REST: dict[str, Callable[[dict[str, Any]], bool]] = {
    "AWS::SQS::Queue": lambda p: p.get("SqsManagedSseEnabled") is True or "KmsMasterKeyId" in p,
    "AWS::DynamoDB::Table": lambda p: p.get("SSESpecification", {}).get("SSEEnabled") is True,
    "AWS::S3::Bucket": lambda p: all(
        rule["ServerSideEncryptionByDefault"]["SSEAlgorithm"] in {"AES256", "aws:kms"}
        for rule in p["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    ),
    "AWS::SNS::Topic": lambda p: "KmsMasterKeyId" in p,
    # CloudWatch Logs encrypts every log group at rest; a KmsKeyId only changes the key.
    "AWS::Logs::LogGroup": lambda p: int(p["RetentionInDays"]) > 0,
}
# Data stores deliberately left without SSE; docs/security.md names each and says why.
# (The alarm topic is encrypted when AlarmTopicKmsKeyArn is given, as in EVERYTHING_ON;
# test_alarm_topic_is_encrypted_with_the_key_given checks it without one too.)
UNENCRYPTED_BY_DESIGN: set[str] = set()
# Resource types that keep no data of their own (or whose service always encrypts it).
NO_DATA_AT_REST = {
    "AWS::Serverless::Function",  # code and resource names; Lambda encrypts both
    "AWS::IAM::Role",
    "AWS::Serverless::StateMachine",  # execution history: Step Functions encrypts it
    "AWS::SQS::QueuePolicy",
    "AWS::S3::BucketPolicy",
    "AWS::CloudWatch::Alarm",
    "AWS::SNS::Subscription",  # cirrus mode: a topic's delivery to the cirrus-events queue
}


def grant_stacks(template: dict[str, Any]) -> list[Stack]:
    return [Stack(template), Stack(template, EVERYTHING_ON)]


def test_every_grant_names_each_action(template: dict[str, Any]) -> None:
    for stack in grant_stacks(template):
        grants = iam.role_grants(stack)
        holders = {grant.holder for grant in grants}
        machines = stack.of_type(STATE_MACHINE)
        conditions = {m: stack.resources[m].get("Condition") for m in machines}
        deployed = {m for m, c in conditions.items() if c is None or stack.condition(c)}
        assert holders >= {*FUNCTIONS, *deployed}
        for grant in grants:
            where = (grant.holder, grant.source)
            assert grant.effect == "Allow", where
            assert not {"NotAction", "NotResource", "NotPrincipal"} & set(grant.raw), where
            assert grant.actions, where
            assert grant.resources, where
            # no "*", no "dynamodb:*", no "dynamodb:Get*": one API action each
            assert [a for a in grant.actions if not iam.is_named_action(a)] == [], where


def test_star_resources_are_the_documented_allow_list(template: dict[str, Any]) -> None:
    star: dict[str, set[iam.Grant]] = {}
    for stack in grant_stacks(template):
        for grant in iam.role_grants(stack):
            if "*" in grant.resources:
                for action in grant.actions:
                    star.setdefault(action, set()).add(grant)
    # GIVEN every action some role holds on Resource "*"
    # THEN it is one of the allow-list (actions AWS offers no narrower resource for),
    # and every entry is still needed
    assert sorted(set(star) - STAR_RESOURCE_ACTIONS) == [], "a new wildcard resource"
    assert sorted(STAR_RESOURCE_ACTIONS - set(star)) == [], "a stale allow-list entry"
    # AND each entry has one row in docs/security.md, saying that AWS requires "*" and why
    rows = markdown.table_rows(security_doc("Wildcard resources"))
    for action in STAR_RESOURCE_ACTIONS:
        found = [row for row in rows if action in markdown.code_spans(" ".join(row))]
        assert len(found) == 1, f"docs/security.md needs one row for {action}"
        *_, answer, reason = found[0]
        assert answer.lower().startswith("yes"), action
        assert len(reason) > 20, f"say why {action} is on *"


@pytest.mark.parametrize("function", FUNCTIONS)
def test_lambda_service_statements_grant_exactly_what_lambda_needs(
    template: dict[str, Any], function: str
) -> None:
    for stack in grant_stacks(template):
        # GIVEN the function's explicit role: SAM adds nothing to it (no managed policy,
        # no event-source or destination statement), so the role must hold it all
        iam.assert_own_lambda_role(stack, function)
        assert "Policies" not in stack.properties(function)
        statements = {s.sid: s for s in stack.statements(function)}
        names = LAMBDA_SERVICE_STATEMENTS[function]
        assert names <= set(statements), sorted(names - set(statements))
        # WHEN the Lambda-service statements are read, pair by pair
        granted = [
            (action, resource)
            for sid in names
            for action in statements[sid].actions
            for resource in statements[sid].resources
        ]
        # THEN they grant exactly what its log group, tracing, event sources and failure
        # destinations need, each on that resource (only X-Ray and ListStreams on "*")
        assert len(granted) == len(set(granted)), "a pair granted twice"
        assert set(granted) == lambda_service_needs(stack, function)
        # AND nothing else in the role writes logs or reads an event source: the handler
        # statements hold only calls the code makes (the dynamic IAM test)
        service_actions = {
            *LOG_WRITE_ACTIONS,
            *SQS_POLL_ACTIONS,
            *STREAM_READ_ACTIONS,
            *XRAY_UPLOAD_ACTIONS,
            "dynamodb:ListStreams",
            "logs:CreateLogGroup",
        }
        code = [s for sid, s in statements.items() if sid not in names]
        assert not [(s.sid, a) for s in code for a in s.actions if a in service_actions]


def test_scoped_resources_stay_inside_the_stack(template: dict[str, Any]) -> None:
    stack = Stack(template, OTHER_STACK)
    prefix = f"{stack.parameter('Prefix')}-"
    outside = []
    for grant in iam.role_grants(stack):
        for resource in grant.resources:
            if resource == "*":
                continue  # test_star_resources_are_the_documented_allow_list
            fixed = re.split(r"[*?]", resource, maxsplit=1)[0]
            if prefix not in fixed:
                outside.append((grant.holder, grant.source, resource))
    # every ARN names this stack's resources before any wildcard in it
    assert outside == []


def test_docs_list_every_statement_of_every_role(template: dict[str, Any]) -> None:
    stack = Stack(template, EVERYTHING_ON)
    grants = iam.role_grants(stack)
    ids = set(stack.resources)

    def parse(rows: list[list[str]]) -> dict[str, tuple[set[str], set[str]]]:
        """Source (first code span of the first cell) → (roles, actions) of each row."""
        return {
            markdown.code_spans(source)[0]: (
                {span for span in markdown.code_spans(roles) if span in ids},
                {span for span in markdown.code_spans(actions) if iam.is_named_action(span)},
            )
            for source, roles, actions, *_ in rows
        }

    # the template's own statements: one row per holder and Sid, with exactly its actions
    own = markdown.table_rows(security_doc("Statements in the template"))
    documented = {}
    for row in own:
        (holder,) = markdown.code_spans(row[0])
        (sid,) = markdown.code_spans(row[1])
        documented[holder, sid] = {s for s in markdown.code_spans(row[2]) if iam.is_named_action(s)}
    expected = {
        (grant.holder, grant.source.removeprefix("Policies/")): set(grant.actions)
        for grant in grants
        if grant.source.startswith("Policies/")
    }
    assert documented == expected
    # what SAM adds: one row per managed policy or destination, naming its holders and actions
    added: dict[str, tuple[set[str], set[str]]] = {}
    for grant in grants:
        if not grant.source.startswith("Policies/"):
            source = grant.source.removeprefix("managed/")
            holders, actions = added.setdefault(source, (set(), set()))
            holders.add(grant.holder)
            actions.update(grant.actions)
    assert parse(markdown.table_rows(security_doc("Added by SAM"))) == added


def test_resource_policies_grant_named_actions_and_the_bucket_refuses_plain_http(
    stack: Stack,
) -> None:
    statements = iam.resource_policy_statements(stack)
    for logical_id, statement in statements:
        if statement["Effect"] == "Deny":
            continue  # a deny may be as wide as it likes
        actions = (
            statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        )
        assert all(iam.is_named_action(a) for a in actions), logical_id
        assert statement["Principal"] not in ("*", {"AWS": "*"}), logical_id
        assert "Condition" in statement, f"{logical_id}: scope a service principal to its source"
    # GIVEN the payload bucket
    bucket = stack.physical("PayloadBucket")
    arn = bucket.attributes["Arn"]
    policies = [
        stack.resolved_properties(p)
        for p in stack.of_type("AWS::S3::BucketPolicy")
        if stack.resolved_properties(p)["Bucket"] == bucket.ref
    ]
    (policy,) = policies
    # THEN every request over plain HTTP is denied, on the bucket and on each object
    assert {
        "Effect": "Deny",
        "Principal": "*",
        "Action": "s3:*",
        "Resource": [arn, f"{arn}/*"],
        "Condition": {"Bool": {"aws:SecureTransport": "false"}},
    } in [{k: v for k, v in s.items() if k != "Sid"} for s in policy["PolicyDocument"]["Statement"]]
    # AND nothing about it is public
    properties = stack.resolved_properties("PayloadBucket")
    assert set(properties["PublicAccessBlockConfiguration"].values()) == {True}
    assert len(properties["PublicAccessBlockConfiguration"]) == 4
    assert properties["OwnershipControls"] == {
        "Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]
    }
    assert properties["LifecycleConfiguration"]["Rules"]


def test_every_data_store_is_encrypted_at_rest(template: dict[str, Any]) -> None:
    stack = Stack(template, EVERYTHING_ON)
    doc = security_doc("Data at rest")
    kinds = {resource["Type"] for resource in stack.resources.values()}
    assert sorted(kinds - set(ENCRYPTED_AT_REST) - NO_DATA_AT_REST) == [], (
        "classify the new resource type: does it keep data, and how is it encrypted?"
    )
    for kind, encrypted in ENCRYPTED_AT_REST.items():
        for logical_id in stack.of_type(kind):
            # each store is named in docs/security.md, with its encryption
            assert f"`{logical_id}`" in doc, f"docs/security.md, Data at rest: {logical_id}"
            properties = stack.resolved_properties(logical_id)
            if logical_id in UNENCRYPTED_BY_DESIGN:
                assert not encrypted(properties), f"{logical_id} is encrypted now: update the doc"
            else:
                assert encrypted(properties), logical_id
    assert stack.of_type("AWS::SQS::Queue")
    assert stack.of_type("AWS::DynamoDB::Table")
    assert stack.of_type("AWS::S3::Bucket")
