"""Shared options and one-line errors."""

# No ``from __future__ import annotations``: Typer reads the probe's annotations at runtime.

import typer
from botocore.exceptions import ClientError, NoRegionError
from typer.testing import CliRunner

from dependency_tracker.core.errors import PayloadNotFoundError
from dependency_tracker_cli.__main__ import app
from dependency_tracker_cli.options import aws_command
from dependency_tracker_cli.target import Target

probe = typer.Typer()
seen: dict[str, object] = {}


@probe.command()
@aws_command
def show(target: Target, *, name: str = "x") -> None:
    seen.update(options=target.options, name=name)
    if name == "missing":
        raise PayloadNotFoundError(name)
    if name == "denied":
        raise ClientError({"Error": {"Code": "AccessDenied", "Message": "not\nallowed"}}, "GetItem")
    if name == "noregion":
        raise NoRegionError


def test_every_aws_command_takes_the_connection_options() -> None:
    for command in ("publish", "status", "waiters", "graph", "stuck", "redrive"):
        result = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "200"})
        assert result.exit_code == 0, result.output
        for option in ("--endpoint-url", "--region", "--profile", "--stack-name", "--prefix"):
            assert option in result.output, (command, option)
        assert "--json" in result.output


def test_options_reach_the_target() -> None:
    result = CliRunner().invoke(
        probe,
        [
            *("--name", "n", "--endpoint-url", "http://127.0.0.1:9", "--region", "eu-west-1"),
            *("--profile", "p", "--stack-name", "s", "--prefix", "pre"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert repr(seen["options"]) == (
        "ConnectionOptions(endpoint_url='http://127.0.0.1:9', region='eu-west-1', "
        "profile='p', stack_name='s', prefix='pre')"
    )
    assert seen["name"] == "n"


def test_prefix_and_stack_name_come_from_the_environment() -> None:
    result = CliRunner().invoke(
        probe, [], env={"DEPTRACK_PREFIX": "envp", "DEPTRACK_STACK_NAME": "envs"}
    )
    assert result.exit_code == 0, result.output
    assert "prefix='envp'" in repr(seen["options"])
    assert "stack_name='envs'" in repr(seen["options"])


def test_errors_are_one_line_with_the_error_s_exit_code_and_a_hint_when_one_helps() -> None:
    runner = CliRunner()
    missing = runner.invoke(probe, ["--name", "missing"])
    assert missing.exit_code == PayloadNotFoundError.exit_code
    assert missing.stderr == "error: payload not found: missing\n"
    denied = runner.invoke(probe, ["--name", "denied"])
    assert denied.exit_code == 1
    assert denied.stderr == (
        "error: GetItem: AccessDenied: not allowed\n"
        "hint: the caller lacks a permission: docs/cli.md lists what each command needs\n"
    )
    no_region = runner.invoke(probe, ["--name", "noregion"])
    assert no_region.exit_code == 1
    assert no_region.stderr == (
        "error: You must specify a region.\n"
        "hint: pass --region or set $AWS_REGION (a profile with a region works too)\n"
    )
