"""``--help`` shows examples that parse, and ``--version`` prints the version."""

from __future__ import annotations

import pytest
import typer
import typer.core
import typer.main
from typer.testing import CliRunner

from dependency_tracker import __version__
from dependency_tracker_cli.__main__ import app
from tests.unit.docs_blocks import cli_invocations
from tests.unit.test_cli_docs import registered_commands

# Every registered command but `version`, whose help has no examples to parse.
COMMANDS = sorted(registered_commands() - {"version"})


def test_version_is_a_top_level_option_and_still_a_command() -> None:
    # GIVEN the CLI
    # WHEN asked for its version both ways
    option = CliRunner().invoke(app, ["--version"])
    command = CliRunner().invoke(app, ["version"])
    # THEN both print the package version and exit 0
    assert (option.exit_code, option.stdout) == (0, f"{__version__}\n")
    assert (command.exit_code, command.stdout) == (0, f"{__version__}\n")


@pytest.mark.parametrize("command", COMMANDS)
def test_each_command_s_help_shows_examples_that_parse(command: str) -> None:
    # GIVEN a command's help, wide enough for one example a line
    shown = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    _, _, examples = shown.stdout.partition("Examples:")
    # WHEN its example lines are read as shell commands
    invocations = cli_invocations(examples.partition("╭")[0])
    # THEN there are some, each runs this command, and each parses (its options exist)
    assert invocations, shown.stdout
    for args in invocations:
        assert args[0] == command, args
        parsed = CliRunner().invoke(app, [*args, "--help"])
        assert parsed.exit_code == 0, (args, parsed.output)


def _all_commands() -> list[str]:
    group = typer.main.get_command(app)
    assert isinstance(group, typer.core.TyperGroup)
    return sorted(group.commands)


@pytest.mark.parametrize("command", [None, *_all_commands()])
def test_flags_show_no_type_in_help(command: str | None) -> None:
    # GIVEN the root help and every command's help
    args = ["--help"] if command is None else [command, "--help"]
    # WHEN shown
    shown = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    # THEN no flag (--help, --version, --json, --wait, ...) shows a `<bool>` value
    assert shown.exit_code == 0, shown.output
    assert "<bool>" not in shown.stdout
    assert "--help" in shown.stdout
