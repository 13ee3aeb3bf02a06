"""Hints the commands print: commands a user can paste and run as printed.

After the README's steps the CLI is ``.venv/bin/dependency-tracker`` and the venv is not
activated, so a hint that says plain ``dependency-tracker`` fails with "command not found".
A hint names the program the way this process was started (plain only when that is what
``PATH`` finds), and quotes each argument for a POSIX shell.
"""

from __future__ import annotations

import shlex
import shutil
import sys
from pathlib import Path

PROGRAM = "dependency-tracker"


def program(argv0: str | None = None, *, cwd: Path | None = None) -> str:
    """How to run this CLI again from the current directory, as a shell word.

    ``argv0`` is ``sys.argv[0]`` by default. The bare name when ``PATH`` finds the same
    executable; else the path that was run, relative to ``cwd`` when below it (``.venv/
    bin/dependency-tracker``); else the bare name (``python -m``, or an unknown start).
    """
    started = Path(argv0 if argv0 is not None else sys.argv[0])
    if started.name != PROGRAM or not started.exists():
        return PROGRAM
    found = shutil.which(PROGRAM)
    if found is not None and _same(Path(found), started):
        return PROGRAM
    here = (cwd or Path.cwd()).resolve()
    absolute = started.absolute()
    try:
        relative = absolute.relative_to(here)
    except ValueError:
        return shlex.quote(str(absolute))
    return shlex.quote(str(relative) if relative.parent != Path() else f"./{relative}")


def command(*words: str) -> str:
    """``dependency-tracker WORD...`` as a pasteable line: the program, then each word quoted."""
    return " ".join([program(), *(shlex.quote(word) for word in words)])


def _same(one: Path, other: Path) -> bool:
    try:
        return one.samefile(other)
    except OSError:
        return False
