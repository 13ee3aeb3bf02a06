"""The CLI's docs name exactly its commands, show each one at work, and the quickstart stays clean.

The command tables of README.md and docs/cli.md, and docs/cli.md's sections, are held to
the commands the Typer app registers (not to a list kept here), so a new command that the
docs leave out fails here.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import pytest
import typer.core
import typer.main

from dependency_tracker_cli.__main__ import app
from tests.unit.docs_blocks import ROOT, blocks, cli_invocations

if TYPE_CHECKING:
    from pathlib import Path

README = ROOT / "README.md"
CLI_MD = ROOT / "docs" / "cli.md"
_SHELL = {"sh", "bash", "shell"}


def registered_commands() -> set[str]:
    """The command names the CLI registers."""
    group = typer.main.get_command(app)
    assert isinstance(group, typer.core.TyperGroup)
    return set(group.commands)


def command_table(text: str) -> set[str]:
    """Command names in the first column of the Markdown table headed ``| Command |``.

    A cell may name several (`` `demo`, `version` ``) or a synopsis (`` `publish FILE ...` ``):
    the first word of each code span counts.
    """
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| Command |"))
    names: set[str] = set()
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        first_cell = re.split(r"(?<!\\)\|", line)[1]
        names.update(span.split()[0] for span in re.findall(r"`([^`]+)`", first_cell))
    return names


def sections(text: str) -> dict[str, str]:
    """``## heading`` → the text up to the next ``## `` heading (subsections included)."""
    parts = re.split(r"^## ", text, flags=re.MULTILINE)[1:]
    return {part.split("\n", 1)[0].strip(): part for part in parts}


def examples(section: str) -> list[list[str]]:
    """The ``dependency-tracker`` command lines of a section's fenced blocks (no synopses)."""
    found: list[list[str]] = []
    for block in re.finditer(r"^```(\w*)\n(.*?)^```", section, flags=re.MULTILINE | re.DOTALL):
        lang, body = block.group(1), block.group(2)
        found.extend(cli_invocations(body, prompted_only=lang not in _SHELL))
    return found


@pytest.mark.parametrize("page", [README, CLI_MD], ids=lambda path: path.name)
def test_the_command_table_names_exactly_the_registered_commands(page: Path) -> None:
    # GIVEN the CLI's registered commands, and a page's command table
    table = command_table(page.read_text(encoding="utf-8"))
    # WHEN they are compared
    # THEN the table leaves none out and names none the CLI does not have
    assert table == registered_commands()


def test_cli_md_has_a_section_with_an_example_for_every_command() -> None:
    # GIVEN docs/cli.md's `## <command>` sections
    found = sections(CLI_MD.read_text(encoding="utf-8"))
    # WHEN each registered command's section is read
    missing = sorted(registered_commands() - found.keys())
    without_example = sorted(
        command
        for command in registered_commands() & found.keys()
        if not any(args and args[0] == command for args in examples(found[command]))
    )
    # THEN every command has one, with at least one command line running it (not a synopsis)
    assert missing == []
    assert without_example == []


def test_the_quickstart_writes_its_payload_files_to_a_temporary_directory() -> None:
    # GIVEN the README's shell blocks, one shell session (a block keeps an earlier one's mktemp)
    temporary: set[str] = set()
    for block in blocks(README):
        if block.lang not in _SHELL:
            continue
        temporary |= set(re.findall(r"^(\w+)=\$\(mktemp -d\)", block.body, flags=re.MULTILINE))
        # WHEN a command writes a file (a shell redirection)
        code = "\n".join(line.split(" # ", 1)[0] for line in block.body.splitlines())
        targets = re.findall(r"(?<![\d>-])>>?\s*(\"?[^\s\"]+)", code)
        # THEN the file goes under a directory made by mktemp -d, never into the checkout
        for target in targets:
            path = target.strip('"')
            if path == "/dev/null":
                continue
            variable = re.match(r"\$\{?(\w+)\}?/", path)
            assert variable is not None, f"{block.where}: writes {path} into the checkout"
            assert variable.group(1) in temporary, f"{block.where}: {path} is not under mktemp -d"


def test_cirrus_md_names_every_command_that_reads_cirrus_s_state_table() -> None:
    # GIVEN the commands whose options include --cirrus-prefix (they read cirrus's state table)
    group = typer.main.get_command(app)
    assert isinstance(group, typer.core.TyperGroup)
    reading = {
        name
        for name, command in group.commands.items()
        if any("--cirrus-prefix" in param.opts for param in command.params)
    }
    # WHEN docs/cirrus.md's "CLI." limit says which commands read it
    text = (ROOT / "docs" / "cirrus.md").read_text(encoding="utf-8")
    bullet = re.search(r"^\* \*\*CLI\.\*\* (.*?)(?=^\* |\Z)", text, re.M | re.S)
    assert bullet is not None
    spans = re.findall(r"`([^`]+)`", bullet[1])
    named = {span.split()[0] for span in spans if not span.startswith("-")}
    # THEN it names each of them, and no command that does not read it
    assert named == reading


def test_the_docs_entry_page_names_every_command() -> None:
    # GIVEN docs/index.md, the one entry page of the docs
    text = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    # WHEN the commands it names in code spans are read
    named = {span.split()[0] for span in re.findall(r"`([^`]+)`", text)}
    # THEN every registered command is among them
    assert sorted(registered_commands() - named) == []
