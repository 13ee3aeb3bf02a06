"""The IAM evaluator against AWS's policy-evaluation rules (its "Policy evaluation logic")."""

from __future__ import annotations

from typing import Any

import pytest

from dependency_tracker_local.iam.conditions import UnknownOperatorError
from dependency_tracker_local.iam.policy import Decision, Request, Statement, evaluate

BUCKET = "arn:aws:s3:::bucket"


def statements(*raw: dict[str, Any]) -> list[Statement]:
    return [Statement.parse(entry) for entry in raw]


def allow(action: Any, resource: Any = "*", **extra: Any) -> dict[str, Any]:
    return {"Effect": "Allow", "Action": action, "Resource": resource, **extra}


def decide(policy: list[Statement], action: str, resource: str, **keys: Any) -> Decision:
    return evaluate(policy, Request.of(action, resource, keys))


def test_nothing_allowed_is_an_implicit_deny() -> None:
    assert decide([], "s3:GetObject", f"{BUCKET}/k") is Decision.IMPLICIT_DENY


def test_an_explicit_deny_wins_over_any_allow() -> None:
    policy = statements(
        allow("s3:*", f"{BUCKET}/*"),
        {"Effect": "Deny", "Action": "s3:GetObject", "Resource": f"{BUCKET}/secret/*"},
    )
    assert decide(policy, "s3:GetObject", f"{BUCKET}/open/k") is Decision.ALLOW
    assert decide(policy, "s3:GetObject", f"{BUCKET}/secret/k") is Decision.EXPLICIT_DENY


def test_actions_match_case_insensitively_with_both_wildcards() -> None:
    policy = statements(allow(["S3:getobject", "sqs:Send?essage", "dynamodb:Batch*"]))
    assert decide(policy, "s3:GetObject", "x") is Decision.ALLOW
    assert decide(policy, "sqs:SendMessage", "x") is Decision.ALLOW
    assert decide(policy, "dynamodb:BatchGetItem", "x") is Decision.ALLOW
    # ? is exactly one character; * does not reach past the pattern's end
    assert decide(policy, "sqs:SendMessages", "x") is Decision.IMPLICIT_DENY
    assert decide(policy, "s3:GetObjectVersion", "x") is Decision.IMPLICIT_DENY


def test_resources_match_case_sensitively_and_dots_are_literal() -> None:
    policy = statements(allow("s3:GetObject", "arn:aws:s3:::my.bucket/Payloads/*"))
    assert decide(policy, "s3:GetObject", "arn:aws:s3:::my.bucket/Payloads/a") is Decision.ALLOW
    assert decide(policy, "s3:GetObject", "arn:aws:s3:::my.bucket/payloads/a") is (
        Decision.IMPLICIT_DENY
    )
    assert decide(policy, "s3:GetObject", "arn:aws:s3:::myxbucket/Payloads/a") is (
        Decision.IMPLICIT_DENY
    )


def test_not_action_and_not_resource_match_what_they_do_not_name() -> None:
    policy = statements(
        {"Effect": "Allow", "NotAction": "s3:DeleteObject", "Resource": f"{BUCKET}/*"},
        {"Effect": "Deny", "Action": "s3:PutObject", "NotResource": f"{BUCKET}/ok/*"},
    )
    assert decide(policy, "s3:GetObject", f"{BUCKET}/k") is Decision.ALLOW
    assert decide(policy, "s3:DeleteObject", f"{BUCKET}/k") is Decision.IMPLICIT_DENY
    assert decide(policy, "s3:PutObject", f"{BUCKET}/ok/k") is Decision.ALLOW
    assert decide(policy, "s3:PutObject", f"{BUCKET}/elsewhere") is Decision.EXPLICIT_DENY


def test_an_unmet_condition_of_an_allow_is_no_allow_not_a_deny() -> None:
    # moto's evaluator reads it as an explicit Deny; AWS simply does not apply the statement.
    policy = statements(
        allow("s3:ListBucket", BUCKET, Condition={"StringLike": {"s3:prefix": ["sweeper/*"]}}),
        allow("s3:ListBucket", BUCKET, Condition={"StringEquals": {"s3:prefix": "open"}}),
    )
    assert decide(policy, "s3:ListBucket", BUCKET, **{"s3:prefix": "open"}) is Decision.ALLOW
    assert decide(policy, "s3:ListBucket", BUCKET, **{"s3:prefix": "sweeper/c.json"}) is (
        Decision.ALLOW
    )
    assert decide(policy, "s3:ListBucket", BUCKET, **{"s3:prefix": "other/"}) is (
        Decision.IMPLICIT_DENY
    )


def test_an_absent_key_fails_a_positive_operator_unless_if_exists() -> None:
    like = statements(allow("s3:ListBucket", BUCKET, Condition={"StringLike": {"s3:prefix": "*"}}))
    if_exists = statements(
        allow("s3:ListBucket", BUCKET, Condition={"StringLikeIfExists": {"s3:prefix": "a/*"}})
    )
    assert decide(like, "s3:ListBucket", BUCKET) is Decision.IMPLICIT_DENY
    assert decide(if_exists, "s3:ListBucket", BUCKET) is Decision.ALLOW
    assert decide(if_exists, "s3:ListBucket", BUCKET, **{"s3:prefix": "b/"}) is (
        Decision.IMPLICIT_DENY
    )


def test_a_negated_operator_holds_for_an_absent_key_and_is_a_nor_of_its_values() -> None:
    policy = statements(
        allow("*"),
        {
            "Effect": "Deny",
            "Action": "*",
            "Resource": "*",
            "Condition": {"StringNotEquals": {"aws:RequestedRegion": ["us-east-1", "eu-west-1"]}},
        },
    )
    assert decide(policy, "sqs:SendMessage", "q") is Decision.EXPLICIT_DENY  # key absent
    assert decide(policy, "sqs:SendMessage", "q", **{"aws:RequestedRegion": "eu-west-1"}) is (
        Decision.ALLOW
    )
    assert decide(policy, "sqs:SendMessage", "q", **{"aws:RequestedRegion": "ap-south-1"}) is (
        Decision.EXPLICIT_DENY
    )


def test_operators_and_keys_are_and_values_are_or() -> None:
    policy = statements(
        allow(
            "s3:ListBucket",
            BUCKET,
            Condition={
                "StringLike": {"s3:prefix": ["a/*", "b/*"], "s3:delimiter": "/"},
                "NumericLessThanEquals": {"s3:max-keys": "10"},
            },
        )
    )
    ok = {"s3:prefix": "b/x", "s3:delimiter": "/", "s3:max-keys": "5"}
    assert decide(policy, "s3:ListBucket", BUCKET, **ok) is Decision.ALLOW
    assert decide(policy, "s3:ListBucket", BUCKET, **{**ok, "s3:max-keys": "11"}) is (
        Decision.IMPLICIT_DENY
    )
    assert decide(policy, "s3:ListBucket", BUCKET, **{**ok, "s3:delimiter": ","}) is (
        Decision.IMPLICIT_DENY
    )


def test_condition_key_names_are_case_insensitive_and_bool_and_null() -> None:
    deny_plain = {
        "Effect": "Deny",
        "Action": "*",
        "Resource": "*",
        "Condition": {"Bool": {"AWS:SecureTransport": "false"}},
    }
    policy = statements(allow("*"), deny_plain)
    assert decide(policy, "s3:GetObject", "o", **{"aws:securetransport": "true"}) is Decision.ALLOW
    assert decide(policy, "s3:GetObject", "o", **{"aws:SecureTransport": "false"}) is (
        Decision.EXPLICIT_DENY
    )
    null = statements(allow("*", Condition={"Null": {"s3:prefix": "true"}}))
    assert decide(null, "s3:ListBucket", BUCKET) is Decision.ALLOW
    assert decide(null, "s3:ListBucket", BUCKET, **{"s3:prefix": ""}) is Decision.IMPLICIT_DENY


def test_arn_operators_compare_field_by_field() -> None:
    policy = statements(
        allow(
            "sqs:SendMessage",
            Condition={"ArnLike": {"aws:SourceArn": "arn:aws:sns:*:123456789012:topic-*"}},
        )
    )
    good = "arn:aws:sns:us-east-1:123456789012:topic-a"
    assert decide(policy, "sqs:SendMessage", "q", **{"aws:SourceArn": good}) is Decision.ALLOW
    other_account = "arn:aws:sns:us-east-1:999999999999:topic-a"
    assert decide(policy, "sqs:SendMessage", "q", **{"aws:SourceArn": other_account}) is (
        Decision.IMPLICIT_DENY
    )


def test_for_any_value_and_for_all_values_on_a_multivalued_key() -> None:
    any_policy = statements(allow("*", Condition={"ForAnyValue:StringEquals": {"k:tags": "a"}}))
    all_policy = statements(
        allow("*", Condition={"ForAllValues:StringEquals": {"k:tags": ["a", "b"]}})
    )
    assert decide(any_policy, "x:Y", "r", **{"k:tags": ("c", "a")}) is Decision.ALLOW
    assert decide(any_policy, "x:Y", "r") is Decision.IMPLICIT_DENY
    assert decide(all_policy, "x:Y", "r", **{"k:tags": ("a", "b")}) is Decision.ALLOW
    assert decide(all_policy, "x:Y", "r", **{"k:tags": ("a", "c")}) is Decision.IMPLICIT_DENY
    # AWS: ForAllValues holds for an absent key
    assert decide(all_policy, "x:Y", "r") is Decision.ALLOW


def test_a_resource_policy_deny_for_everyone_applies_to_the_role() -> None:
    identity = statements(allow("sqs:SendMessage", "arn:aws:sqs:us-east-1:1:q"))
    bucket_policy = statements(
        {
            "Sid": "DenyInsecureTransport",
            "Effect": "Deny",
            "Principal": "*",
            "Action": "sqs:*",
            "Resource": "arn:aws:sqs:us-east-1:1:q",
            "Condition": {"Bool": {"aws:SecureTransport": "false"}},
        }
    )
    secure = Request.of(
        "sqs:SendMessage", "arn:aws:sqs:us-east-1:1:q", {"aws:SecureTransport": "true"}
    )
    plain = Request.of(
        "sqs:SendMessage", "arn:aws:sqs:us-east-1:1:q", {"aws:SecureTransport": "false"}
    )
    assert evaluate(identity, secure, bucket_policy) is Decision.ALLOW
    assert evaluate(identity, plain, bucket_policy) is Decision.EXPLICIT_DENY


def test_an_unknown_operator_raises_rather_than_deciding() -> None:
    policy = statements(allow("*", Condition={"IpAddress": {"aws:SourceIp": "10.0.0.0/8"}}))
    with pytest.raises(UnknownOperatorError, match="IpAddress"):
        decide(policy, "s3:GetObject", "o", **{"aws:SourceIp": "10.0.0.1"})
