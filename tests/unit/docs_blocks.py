"""Fenced code blocks of the Markdown docs, and the ``dependency-tracker`` command lines in text.

Shared by the drift guards (tests/unit/test_docs.py) and the ``--help`` tests.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = "dependency-tracker"
_FENCE = re.compile(r"^```(?P<lang>[\w+-]*)[^\n]*\n(?P<body>.*?)^```\s*$", re.MULTILINE | re.DOTALL)
# `<!-- snippet: KIND (why) -->` on the line right before a fence says how the snippet test
# treats the block (tests/e2e/test_snippets.py).
_MARKER = re.compile(r"<!--\s*snippet:\s*(?P<marker>.*?)\s*-->\s*$")
# Ends a command inside a shell line: pipes, redirections, command lists.
_SHELL_BREAKS = {"|", ">", ">>", "<", "&&", "||", ";", "&"}


@dataclass(frozen=True)
class Block:
    """One fenced block: where it is, its language tag and its text."""

    path: Path
    line: int
    lang: str
    body: str
    marker: str | None = None

    @property
    def where(self) -> str:
        """``docs/x.md:12``, for assertion messages."""
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def markdown_files() -> list[Path]:
    """README.md and every page under docs/."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def snippet_files() -> list[Path]:
    """README.md, every page under docs/ and every Markdown file under examples/."""
    return [*markdown_files(), *sorted((ROOT / "examples").rglob("*.md"))]


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of a Markdown file, in order, each with its snippet marker."""
    text = path.read_text(encoding="utf-8")
    found: list[Block] = []
    for match in _FENCE.finditer(text):
        before = text[: match.start()].rstrip("\n").rpartition("\n")[2]
        marker = _MARKER.search(before)
        line = text.count("\n", 0, match.start()) + 1
        found.append(
            Block(path, line, match["lang"], match["body"], marker["marker"] if marker else None)
        )
    return found


def cli_invocations(text: str, *, prompted_only: bool = False) -> list[list[str]]:
    """The arguments of every ``dependency-tracker ...`` command in shell-like text.

    Prompts (``$ ``), environment prefixes (``export``, ``VAR=x``), paths such as
    ``.venv/bin/dependency-tracker`` and what follows a pipe or a redirection are
    handled; ``[...]`` option synopses and ``...`` are not commands and are skipped.
    ``prompted_only``: only lines after a ``$ `` prompt (terminal transcripts, where
    other lines are output).
    """
    found: list[list[str]] = []
    for raw in _logical_lines(text):
        if prompted_only and not raw.startswith("$ "):
            continue
        line = raw.strip().removeprefix("$ ")
        if PROGRAM not in line or "[" in line or "..." in line or line.startswith("#"):
            continue
        try:
            words = shlex.split(line, comments=True)
        except ValueError:
            continue
        for start, word in enumerate(words):
            if word.rsplit("/", 1)[-1] != PROGRAM:
                continue
            args: list[str] = []
            for token in words[start + 1 :]:
                if token in _SHELL_BREAKS:
                    break
                args.append(token)
            found.append(args)
    return found


def _logical_lines(text: str) -> list[str]:
    """Lines with backslash continuations joined."""
    return text.replace("\\\n", " ").splitlines()
