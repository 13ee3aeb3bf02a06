"""Errors an operator can fix get a hint: an endpoint that does not answer, credentials, names."""

# No ``from __future__ import annotations``: Typer reads the probe's annotations at runtime.

import socket
import time

import pytest
import typer
from botocore.exceptions import (
    ClientError,
    EndpointConnectionError,
    NoCredentialsError,
    NoRegionError,
    ProfileNotFound,
)
from typer.testing import CliRunner

from dependency_tracker_cli.__main__ import app
from dependency_tracker_cli.options import aws_command
from dependency_tracker_cli.target import Target

probe = typer.Typer()


@probe.command()
@aws_command
def fails(target: Target, *, what: str = "connect") -> None:
    errors: dict[str, Exception] = {
        "connect": EndpointConnectionError(endpoint_url=f"{target.options.endpoint_url}/"),
        "credentials": NoCredentialsError(),
        "profile": ProfileNotFound(profile="nope"),
        "region": NoRegionError(),
        "refused": ClientError(
            {"Error": {"Code": "UnrecognizedClientException", "Message": "bad token"}}, "Query"
        ),
        "stack": ClientError(
            {"Error": {"Code": "ValidationError", "Message": "Stack with id s does not exist"}},
            "DescribeStacks",
        ),
        "table": ClientError(
            {"Error": {"Code": "ResourceNotFoundException", "Message": "no table"}}, "GetItem"
        ),
        "other": ClientError({"Error": {"Code": "Boom", "Message": "no"}}, "GetItem"),
    }
    raise errors[what]


def run(*args: str) -> tuple[int, str, str]:
    """Exit code, error line and hint line (``""`` when there is none)."""
    result = CliRunner().invoke(probe, list(args))
    lines = result.stderr.splitlines()
    assert 1 <= len(lines) <= 2, result.stderr
    assert lines[0].startswith("error: ")
    hint = lines[1] if len(lines) == 2 else ""
    assert hint == "" or hint.startswith("hint: ")
    return result.exit_code, lines[0], hint


def test_an_unreachable_local_endpoint_asks_whether_serve_runs() -> None:
    # GIVEN a loopback endpoint nothing answers on
    # WHEN a command cannot connect
    code, error, hint = run("--endpoint-url", "http://127.0.0.1:9")
    # THEN the error names the endpoint, and the hint says what to check
    assert code == 1
    assert "http://127.0.0.1:9/" in error
    assert "is `dependency-tracker serve` running?" in hint
    assert "--endpoint-url" in hint


def test_an_unreachable_remote_endpoint_points_at_the_endpoint_option() -> None:
    code, _, hint = run("--endpoint-url", "https://vpce.example.com")
    assert code == 1
    assert "check --endpoint-url" in hint
    assert "serve" not in hint


def test_an_unreachable_aws_points_at_the_network_and_region() -> None:
    _, _, hint = run()
    assert "--region" in hint
    assert "--endpoint-url" in hint


@pytest.mark.parametrize("what", ["credentials", "profile"])
def test_missing_credentials_say_how_to_give_them_or_use_serve(what: str) -> None:
    code, _, hint = run("--what", what)
    assert code == 1
    assert "aws configure" in hint
    assert "--profile" in hint
    assert "--endpoint-url" in hint


def test_a_missing_region_names_the_option() -> None:
    _, error, hint = run("--what", "region")
    assert error == "error: You must specify a region."
    assert hint == "hint: pass --region or set $AWS_REGION (a profile with a region works too)"


def test_refused_credentials_and_missing_names_get_hints() -> None:
    # GIVEN credentials AWS does not know, a stack that is not there, a table that is not there
    # WHEN each is met
    _, refused_error, refused = run("--what", "refused")
    _, _, stack = run("--what", "stack", "--stack-name", "s")
    _, _, table = run("--what", "table", "--prefix", "mine")
    # THEN the error keeps AWS's words, and each hint names what to check
    assert refused_error == "error: Query: UnrecognizedClientException: bad token"
    assert "credentials were refused" in refused
    assert "check --stack-name and --region" in stack
    assert "--prefix mine" in table


def test_other_aws_errors_have_no_hint() -> None:
    code, error, hint = run("--what", "other")
    assert code == 1
    assert error == "error: GetItem: Boom: no"
    assert hint == ""


def test_a_real_command_against_a_closed_port_fails_fast_with_the_hint() -> None:
    # GIVEN a local port with nothing listening (bound, then closed)
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    # WHEN `status` runs against it
    started = time.monotonic()
    result = CliRunner().invoke(app, ["status", "a", "--endpoint-url", f"http://127.0.0.1:{port}"])
    # THEN no traceback: an error line and the hint, within botocore's few quick retries
    assert result.exit_code == 1
    assert result.exception is None or isinstance(result.exception, SystemExit)
    error, hint = result.stderr.splitlines()
    assert error.startswith(
        f'error: Could not connect to the endpoint URL: "http://127.0.0.1:{port}'
    )
    assert hint.startswith("hint: is `dependency-tracker serve` running?")
    assert time.monotonic() - started < 10


@pytest.mark.parametrize(
    ("args", "env", "given", "example"),
    [
        (["--endpoint-url", "127.0.0.1:4600"], {}, "127.0.0.1:4600", "http://127.0.0.1:4600"),
        ([], {"AWS_ENDPOINT_URL": "localhost:4600"}, "localhost:4600", "http://localhost:4600"),
    ],
)
def test_an_endpoint_url_without_a_scheme_is_a_usage_error_that_shows_the_fix(
    args: list[str], env: dict[str, str], given: str, example: str
) -> None:
    # GIVEN an endpoint written as host:port, on the command line or in the environment
    # WHEN a command is given it
    result = CliRunner().invoke(app, ["status", "a/b", *args], env=env)
    # THEN it stops at once with exit 2 and one line saying what to write instead
    assert result.exit_code == 2
    expected = (
        f"error: --endpoint-url (or $AWS_ENDPOINT_URL) {given} needs a scheme and a host, "
        f"e.g. {example}"
    )
    assert result.stderr.splitlines() == [expected]
