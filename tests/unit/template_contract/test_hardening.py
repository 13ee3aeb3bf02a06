"""Hardening: stacks of different prefixes stay apart, tables survive, transport is TLS only.

Checked on the template as written and after the SAM transform (``transformed``).
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import re
from typing import TYPE_CHECKING, Any

import pytest

from dependency_tracker.core import settings
from dependency_tracker.core.errors import ConfigurationError
from dependency_tracker.table import schema as table_schema
from dependency_tracker_local.filters import CALLBACK_STREAM_FILTER
from tests.unit.template_contract import iam, markdown
from tests.unit.template_contract.cfn import ACCOUNT, REGION, ROOT, Stack
from tests.unit.template_contract.parameters import ALARM_KEY, EVERYTHING_ON, OTHER_STACK
from tests.unit.template_contract.security_doc import security_doc
from tests.unit.template_contract.step_functions import (
    SFN_SERVICE_STATEMENTS,
    SFN_XRAY_ACTIONS,
    STATE_MACHINE,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

DEPLOY_DOC = ROOT / "docs" / "deploy.md"
# Prefixes a reviewer would try: each pair where one is the other plus "-" and more is
# what a separator-admitting pattern let overlap ("deptrack" reaching "deptrack-b-*").
CANDIDATE_PREFIXES = (
    "deptrack",
    "deptrack-b",
    "deptrackb",
    "deptrack2",
    "d",
    "de",
    "a-b",
    "pipeline",
    "p" * 20,
    "p" * 19,
)
# ARNs a stack names but does not own by design: IAM (CloudFormation names the roles
# from the stack name; the tests' Stack gives every stack the same made-up role names)
# and AWS-managed policies. User-given ARNs (Extra*, keys, topics) are left unset.
SHARED_ARN = re.compile(r"^arn:[a-z-]+:iam::")
TEMPLATES = ("template", "transformed")


def document(name: str, template: dict[str, Any], transformed: dict[str, Any]) -> dict[str, Any]:
    return template if name == "template" else transformed


def prefix_pattern(template: dict[str, Any]) -> str:
    pattern: str = template["Parameters"]["Prefix"]["AllowedPattern"]
    return pattern


def admitted_prefixes(template: dict[str, Any]) -> list[str]:
    return [p for p in CANDIDATE_PREFIXES if re.fullmatch(prefix_pattern(template), p)]


def arn_strings(value: Any) -> Iterator[str]:
    """Every ARN (or ARN pattern) in resolved data; EventBridge prefixes as ``prefix*``."""
    if isinstance(value, dict):
        if set(value) == {"prefix"} and isinstance(value["prefix"], str):
            yield f"{value['prefix']}*"
            return
        for item in value.values():
            yield from arn_strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from arn_strings(item)
    elif isinstance(value, str):
        if value.startswith("arn:"):
            yield value
        elif value.lstrip().startswith("{"):  # an event pattern or filter kept as JSON text
            with contextlib.suppress(ValueError):
                yield from arn_strings(json.loads(value))


def stack_arns(stack: Stack) -> tuple[set[str], set[str]]:
    """(what the stack grants or matches, the names it owns) as ARNs or ARN patterns.

    The first: every ARN in its deployed resources' resolved properties (IAM statements,
    trust and resource-policy conditions, rule patterns, permissions, mappings,
    environment). The second: the same plus each resource's own ARN attributes.
    """
    used: set[str] = set()
    owned: set[str] = set()
    for logical_id, resource in stack.resources.items():
        condition = resource.get("Condition")
        if condition is not None and not stack.condition(condition):
            continue
        used.update(arn_strings(stack.resolved_properties(logical_id)))
        physical = stack.physical(logical_id)
        owned.update(v for v in (physical.ref, *physical.attributes.values()) if "arn:" in v[:4])
    used = {arn for arn in used if not SHARED_ARN.match(arn)}
    owned = {arn for arn in owned if not SHARED_ARN.match(arn)} | used
    return used, owned


def may_overlap(first: str, second: str) -> bool:
    """Whether some ARN could match both IAM-style patterns (``*``, ``?``); never misses one.

    Two patterns can share a match only if the literal text before the first wildcard of
    one starts the other's; a literal matches a pattern as IAM matches it.
    """
    fixed = [re.split(r"[*?]", arn, maxsplit=1)[0] for arn in (first, second)]
    wild = [fixed[0] != first, fixed[1] != second]
    if not any(wild):
        return first == second
    if not all(wild):
        literal, pattern = (first, second) if wild[1] else (second, first)
        return fnmatch.fnmatchcase(literal, pattern)
    return fixed[0].startswith(fixed[1]) or fixed[1].startswith(fixed[0])


def test_prefix_pattern_is_the_code_s_and_has_no_separator(
    template: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN the template's Prefix pattern
    pattern = prefix_pattern(template)
    # THEN it is the one the code validates against
    assert pattern == settings.PREFIX_PATTERN
    # AND no character it admits after the first is the separator "-" (or anything but
    # a lower-case letter or digit): "{p}-" then never starts "{q}-" for another prefix q
    admitted_tails = {chr(c) for c in range(32, 127) if re.fullmatch(pattern, f"a{chr(c)}")}
    assert admitted_tails == set("abcdefghijklmnopqrstuvwxyz0123456789")
    assert re.fullmatch(pattern, "a" * 20)
    assert not re.fullmatch(pattern, "a" * 21)
    # AND the code refuses a prefix the template refuses
    monkeypatch.setenv(settings.ENV_STATE_TABLE, "t")
    monkeypatch.setenv(settings.ENV_DEPENDENCY_TABLE, "d")
    monkeypatch.setenv(settings.ENV_WORKFLOW_ARN_PREFIX, "arn:aws:states:::stateMachine:x-")
    monkeypatch.setenv(settings.ENV_PREFIX, "deptrack-b")
    with pytest.raises(ConfigurationError):
        settings.Settings.from_env()
    monkeypatch.setenv(settings.ENV_PREFIX, "deptrackb")
    assert settings.Settings.from_env().prefix == "deptrackb"


@pytest.mark.parametrize("name", TEMPLATES)
def test_no_two_prefixes_reach_each_others_names(
    template: dict[str, Any], transformed: dict[str, Any], name: str
) -> None:
    # GIVEN two stacks in one account and region, for every pair of admitted prefixes
    doc = document(name, template, transformed)
    prefixes = admitted_prefixes(template)
    assert len(prefixes) >= 6
    arns = {
        p: stack_arns(Stack(doc, {"Prefix": p, "AlarmEmail": "ops@example.com"})) for p in prefixes
    }
    crossings = [
        (mine, theirs, pattern, name_)
        for mine in prefixes
        for theirs in prefixes
        if mine != theirs
        for pattern in arns[mine][0]
        for name_ in arns[theirs][1]
        if may_overlap(pattern, name_)
    ]
    # THEN no ARN or pattern one grants or matches (IAM, trust and queue policies, the
    # status-change rule, permissions) can match a name or pattern of the other
    assert crossings[:5] == []
    # AND the check sees the patterns that would cross: the managed workflows and the rule
    used = arns["deptrack"][0]
    assert f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:deptrack-*" in used
    assert f"arn:aws:states:{REGION}:{ACCOUNT}:execution:deptrack-*:*" in used


@pytest.mark.parametrize("name", TEMPLATES)
def test_tables_are_retained_and_protected_from_deletion(
    template: dict[str, Any], transformed: dict[str, Any], name: str
) -> None:
    doc = document(name, template, transformed)
    for logical_id in Stack(doc).of_type("AWS::DynamoDB::Table"):
        resource = doc["Resources"][logical_id]
        # CloudFormation keeps the table (and its waits) on stack deletion and when an
        # update would replace it (DynamoDB tables take no Snapshot policy)
        assert resource["DeletionPolicy"] == "Retain", logical_id
        assert resource["UpdateReplacePolicy"] == "Retain", logical_id
        # AND deletion protection is on unless the parameter turns it off
        protected = Stack(doc).resolved_properties(logical_id)
        assert protected["DeletionProtectionEnabled"] is True, logical_id
        off = Stack(doc, {"TableDeletionProtection": "false"}).resolved_properties(logical_id)
        assert off["DeletionProtectionEnabled"] is False, logical_id


def stack_policy_allows(policy: dict[str, Any], action: str, logical_id: str) -> bool:
    """A CloudFormation stack policy's verdict: an explicit Deny wins; nothing allowed is denied."""

    def applies(statement: dict[str, Any]) -> bool:
        actions = (
            statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        )
        resources = statement["Resource"]
        resources = resources if isinstance(resources, list) else [resources]
        assert statement["Principal"] == "*", "a stack policy's principal is always *"
        return any(fnmatch.fnmatchcase(action, a) for a in actions) and any(
            fnmatch.fnmatchcase(f"LogicalResourceId/{logical_id}", r) for r in resources
        )

    verdicts = {s["Effect"] for s in policy["Statement"] if applies(s)}
    return "Allow" in verdicts and "Deny" not in verdicts


def test_a_prefix_change_is_refused_by_the_documented_stack_policy(
    template: dict[str, Any],
) -> None:
    # GIVEN the stack policy docs/deploy.md ("Changing Prefix") has you set once
    section = markdown.section(DEPLOY_DOC.read_text(encoding="utf-8"), "Changing Prefix")
    (block,) = re.findall(r"```json\n(.*?)```", section, flags=re.DOTALL)
    policy = json.loads(block)
    before, after = Stack(template), Stack(template, {"Prefix": "renamed"})
    tables = before.of_type("AWS::DynamoDB::Table")
    # WHEN Prefix changes, the tables' names change: CloudFormation replaces them (a new
    # TableName is a replacement), and the functions would read new, empty tables
    for table in tables:
        assert before.physical(table).ref != after.physical(table).ref, table
    # THEN the policy refuses replacing or removing either table, so CloudFormation fails
    # the whole update and rolls it back before any wait is stranded
    for table in tables:
        assert not stack_policy_allows(policy, "Update:Replace", table), table
        assert not stack_policy_allows(policy, "Update:Delete", table), table
        # AND in-place changes (the stream view type, deletion protection) still deploy
        assert stack_policy_allows(policy, "Update:Modify", table), table
    # AND every other resource may still be modified, replaced and removed
    for logical_id in set(before.resources) - set(tables):
        for action in ("Update:Modify", "Update:Replace", "Update:Delete"):
            assert stack_policy_allows(policy, action, logical_id), (action, logical_id)


@pytest.mark.parametrize("name", TEMPLATES)
def test_the_stream_carries_new_images_only(
    template: dict[str, Any], transformed: dict[str, Any], name: str
) -> None:
    # GIVEN the dependency table as deployed and as the embedded stack creates it
    stack = Stack(document(name, template, transformed))
    deployed = stack.resolved_properties("DependencyTable")["StreamSpecification"]
    local = table_schema.dependency_table_definition("t")["StreamSpecification"]
    # THEN both write new images only: the one image the callback reads and filters on
    assert deployed == {"StreamViewType": "NEW_IMAGE"}
    assert local == {"StreamEnabled": True, "StreamViewType": "NEW_IMAGE"}
    assert set(CALLBACK_STREAM_FILTER["dynamodb"]) == {"NewImage"}
    # AND no code reads an old image (it would be one more copy of every task token)
    readers = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "src").rglob("*.py")
        if "OldImage" in path.read_text(encoding="utf-8")
    ]
    assert readers == []


def state_machine_trust(stack: Stack, logical_id: str) -> list[dict[str, Any]]:
    role = stack.role_of(logical_id)
    assert role is not None, f"{logical_id} needs its own AWS::IAM::Role"
    statements: list[dict[str, Any]] = stack.resolved_properties(role)["AssumeRolePolicyDocument"][
        "Statement"
    ]
    return statements


def test_state_machine_roles_are_explicit_and_trust_only_their_own_machine(
    template: dict[str, Any],
) -> None:
    # GIVEN another prefix in another region (the condition must follow both)
    stack = Stack(template, OTHER_STACK, region="eu-west-1")
    roles = set()
    for logical_id in stack.of_type(STATE_MACHINE):
        # THEN each state machine runs with a role of the template's own, used by it alone
        role = stack.role_of(logical_id)
        assert role not in roles
        roles.add(role)
        assert "Policies" not in stack.properties(logical_id)
        assert "ManagedPolicyArns" not in stack.properties(str(role))
        # AND Step Functions may assume it only for that state machine, in this account
        # (the confused-deputy guard of the Step Functions developer guide)
        assert state_machine_trust(stack, logical_id) == [
            {
                "Effect": "Allow",
                "Principal": {"Service": "states.amazonaws.com"},
                "Action": "sts:AssumeRole",
                "Condition": {
                    "StringEquals": {"aws:SourceAccount": ACCOUNT},
                    "ArnEquals": {"aws:SourceArn": stack.physical(logical_id).ref},
                },
            }
        ]
        # AND Step Functions' own statements are log delivery and X-Ray upload on "*",
        # X-Ray no wider than the AWSXrayWriteOnlyAccess SAM used to attach
        statements = {s.sid: s for s in stack.statements(logical_id)}
        for sid, actions in SFN_SERVICE_STATEMENTS.items():
            assert set(statements[sid].actions) == actions, (logical_id, sid)
            assert statements[sid].resources == ("*",), (logical_id, sid)
        assert set(iam.MANAGED_POLICIES["AWSXrayWriteOnlyAccess"]) >= SFN_XRAY_ACTIONS
    # AND SAM adds nothing to any role of the stack
    assert [g for g in iam.role_grants(Stack(template, EVERYTHING_ON)) if g.sam_managed] == []


@pytest.mark.parametrize("name", TEMPLATES)
def test_every_queue_refuses_plain_http(
    template: dict[str, Any], transformed: dict[str, Any], name: str
) -> None:
    stack = Stack(document(name, template, transformed), EVERYTHING_ON)
    queues = stack.of_type("AWS::SQS::Queue")
    assert (
        len(queues) == 10
    )  # with cirrus mode's cirrus-events queue, its DLQ and the subscription's
    policies = {
        logical_id: stack.resolved_properties(logical_id)
        for logical_id in stack.of_type("AWS::SQS::QueuePolicy")
    }
    for queue in queues:
        # GIVEN the one policy of each queue (SQS keeps one per queue)
        physical = stack.physical(queue)
        (policy,) = [p for p in policies.values() if physical.ref in p["Queues"]]
        statements = [
            {k: v for k, v in s.items() if k != "Sid"}
            for s in policy["PolicyDocument"]["Statement"]
        ]
        # THEN it denies every request to that queue made without TLS, whoever makes it
        assert {
            "Effect": "Deny",
            "Principal": "*",
            "Action": "sqs:*",
            "Resource": physical.attributes["Arn"],
            "Condition": {"Bool": {"aws:SecureTransport": "false"}},
        } in statements, queue
    # AND the update-state DLQ keeps admitting its EventBridge rule beside the deny
    dlq = policies["UpdateStateDlqPolicy"]["PolicyDocument"]["Statement"]
    assert [s["Sid"] for s in dlq] == ["StatusChangeRuleDeadLetters", "DenyInsecureTransport"]


def test_alarm_topic_is_encrypted_with_the_key_given(template: dict[str, Any]) -> None:
    email = {"AlarmEmail": "ops@example.com"}
    # GIVEN a customer-managed key: the topic the stack creates is encrypted with it
    keyed = Stack(template, {**email, "AlarmTopicKmsKeyArn": ALARM_KEY})
    assert keyed.resolved_properties("AlarmTopic")["KmsMasterKeyId"] == ALARM_KEY
    # AND without one it is not (alias/aws/sns would not let CloudWatch publish)
    assert "KmsMasterKeyId" not in Stack(template, email).resolved_properties("AlarmTopic")
    # AND the parameter takes a key ARN only: not an alias, not the AWS-managed SNS key
    pattern = template["Parameters"]["AlarmTopicKmsKeyArn"]["AllowedPattern"]
    assert re.fullmatch(pattern, "")
    assert re.fullmatch(pattern, ALARM_KEY)
    assert re.fullmatch(pattern, f"arn:aws:kms:{REGION}:{ACCOUNT}:key/mrk-0123456789abcdef")
    for refused in ("alias/aws/sns", f"arn:aws:kms:{REGION}:{ACCOUNT}:alias/aws/sns", "1234"):
        assert not re.fullmatch(pattern, refused), refused
    # AND docs/security.md gives the key policy statement CloudWatch needs to publish
    section = security_doc("Alarm topic key")
    (block,) = re.findall(r"```json\n(.*?)```", section, flags=re.DOTALL)
    statement = json.loads(block)
    assert statement["Effect"] == "Allow"
    assert statement["Principal"] == {"Service": "cloudwatch.amazonaws.com"}
    assert set(statement["Action"]) == {"kms:Decrypt", "kms:GenerateDataKey*"}
