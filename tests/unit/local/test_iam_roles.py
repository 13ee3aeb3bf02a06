"""The roles the IAM model reads from template.yaml, and decisions on them."""

from __future__ import annotations

from dependency_tracker_local import template as template_reader
from dependency_tracker_local.iam import roles
from dependency_tracker_local.iam.policy import Decision, Request, evaluate

BUCKET = "arn:aws:s3:::deptrack-payloads-123456789012-us-east-1"


def deployed(**parameters: str) -> template_reader.Deployed:
    return template_reader.Deployed(template_reader.load_template(), parameters)


def decide(role: roles.Role, action: str, resource: str, **keys: str) -> Decision:
    return evaluate(role.statements, Request.of(action, resource, keys))


def test_every_function_and_state_machine_has_a_role_of_its_own() -> None:
    cirrus = deployed(CirrusPrefix="cirrus")
    functions = roles.function_roles(cirrus)
    assert set(functions) == {"process", "update-state", "callback", "sweeper", "cirrus-events"}
    machines = roles.state_machine_roles(deployed(DeployExamples="true"))
    assert {arn.rpartition(":")[2] for arn in machines} == {
        "deptrack-wait-for-dependencies",
        "deptrack-wait-for-join",
        "deptrack-simulate",
        "deptrack-simulate-express",
    }
    # without DeployExamples: the two parents only
    assert len(roles.state_machine_roles(cirrus)) == 2
    every = [*functions.values(), *machines.values()]
    assert len({role.arn for role in every}) == len(every)


def test_a_versioned_manifest_may_be_read_in_the_bucket_and_the_extra_arns() -> None:
    extra = "arn:aws:s3:::shared/manifests/*"
    process = roles.function_roles(deployed(ExtraPayloadReadArns=extra))["process"]
    for resource in (f"{BUCKET}/manifests/m.jsonl", "arn:aws:s3:::shared/manifests/m.jsonl"):
        assert decide(process, "s3:GetObjectVersion", resource) is Decision.ALLOW, resource
    assert decide(process, "s3:GetObjectVersion", "arn:aws:s3:::shared/other/m") is (
        Decision.IMPLICIT_DENY
    )


def test_the_sweeper_may_list_only_under_its_cursor_prefix() -> None:
    sweeper = roles.function_roles(deployed())["sweeper"]
    assert decide(sweeper, "s3:ListBucket", BUCKET, **{"s3:prefix": "sweeper/cursor.json"}) is (
        Decision.ALLOW
    )
    # a GetObject's NoSuchKey check carries no s3:prefix: S3 would answer AccessDenied
    assert decide(sweeper, "s3:ListBucket", BUCKET) is Decision.IMPLICIT_DENY
    assert decide(sweeper, "s3:ListBucket", BUCKET, **{"s3:prefix": "payloads/"}) is (
        Decision.IMPLICIT_DENY
    )


def test_the_process_role_may_publish_a_recovered_chain_step() -> None:
    process = roles.function_roles(deployed())["process"]
    queue = "arn:aws:sqs:us-east-1:123456789012:deptrack-process"
    assert decide(process, "sqs:SendMessage", queue) is Decision.ALLOW
    assert decide(process, "s3:PutObject", f"{BUCKET}/chained/x.json") is Decision.ALLOW


def test_the_bucket_policy_denies_plain_http_even_to_an_allowed_role() -> None:
    process = roles.function_roles(deployed())["process"]
    denies = [s for s in roles.resource_policy_statements(deployed()) if s.effect == "Deny"]
    request = Request.of("s3:GetObject", f"{BUCKET}/payloads/p.json")
    secure = request.with_keys({"aws:SecureTransport": ("true",)})
    plain = request.with_keys({"aws:SecureTransport": ("false",)})
    assert evaluate(process.statements, secure, denies) is Decision.ALLOW
    assert evaluate(process.statements, plain, denies) is Decision.EXPLICIT_DENY
