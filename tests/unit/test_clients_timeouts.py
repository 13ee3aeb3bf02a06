"""In Lambda, one AWS call ends well inside the invocation, retries and backoff included."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dependency_tracker.core import clients
from dependency_tracker.handlers.deadline import DEADLINE_RESERVE_SECONDS
from tests.unit.template_contract.cfn import load_template

if TYPE_CHECKING:
    import pytest


def function_timeouts() -> dict[str, int]:
    """Every function's timeout in template.yaml (its own, else the Globals')."""
    template = load_template()
    default = int(template["Globals"]["Function"]["Timeout"])
    return {
        name: int(resource["Properties"].get("Timeout", default))
        for name, resource in template["Resources"].items()
        if resource["Type"] == "AWS::Serverless::Function"
    }


def test_in_lambda_a_call_is_bounded_well_under_every_function_timeout() -> None:
    # GIVEN the clients' config in a Lambda function
    config: Any = clients.config(in_lambda=True)  # botocore's Config sets its attributes late
    # THEN connecting and reading are bounded, with botocore's standard retries
    assert config.connect_timeout == clients.CONNECT_TIMEOUT_SECONDS <= 2
    assert config.read_timeout == clients.READ_TIMEOUT_SECONDS <= 5
    assert config.retries == {"mode": "standard", "total_max_attempts": clients.MAX_ATTEMPTS}
    worst = clients.worst_call_seconds()
    assert worst == 3 * (1 + 3) + 1 + 2
    # AND a call whose every attempt hangs ends within what the handlers keep back before
    # their deadline, and within a quarter of the shortest function's timeout
    timeouts = function_timeouts()
    assert timeouts, "no function found in template.yaml"
    assert worst <= DEADLINE_RESERVE_SECONDS
    assert worst <= min(timeouts.values()) / 4, timeouts


def test_outside_lambda_botocore_keeps_its_own_timeouts(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN the CLI or the local stack (no Lambda runtime environment)
    monkeypatch.delenv(clients.LAMBDA_ENV, raising=False)
    config: Any = clients.config()
    # THEN a far region's slow handshake is waited for, as botocore does by default
    assert (config.connect_timeout, config.read_timeout) == (60, 60)
    # AND in a function, the environment says so
    monkeypatch.setenv(clients.LAMBDA_ENV, "deptrack-process")
    in_lambda: Any = clients.config()
    assert in_lambda.read_timeout == clients.READ_TIMEOUT_SECONDS


def test_the_cached_clients_carry_the_config(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a client made in a Lambda function
    monkeypatch.setenv(clients.LAMBDA_ENV, "deptrack-process")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    clients.client.cache_clear()
    try:
        made = clients.client("sqs")
        # THEN its calls are bounded as the config says
        assert made.meta.config.connect_timeout == clients.CONNECT_TIMEOUT_SECONDS
        assert made.meta.config.read_timeout == clients.READ_TIMEOUT_SECONDS
        assert made.meta.config.retries["total_max_attempts"] == clients.MAX_ATTEMPTS
    finally:
        clients.client.cache_clear()
