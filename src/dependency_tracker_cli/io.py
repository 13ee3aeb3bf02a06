"""What the commands are given to read: files, stdin and JSON, one rule for each.

A FILE argument names a file or, as ``-``, stdin. A path that does not exist or
cannot be read is a usage error (exit 2, ``error: <path>: no such file``); text
that is not UTF-8 or not JSON is an invalid message (exit 3), named by where it
came from (the path, ``stdin``, ``<path>[<index>]`` or ``<path>:<line>``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from dependency_tracker.core.errors import InvalidMessageError
from dependency_tracker_cli.options import fail

STDIN = "-"


def source_name(source: str) -> str:
    """How messages and errors name a FILE argument: its path, or ``stdin`` for ``-``."""
    return "stdin" if source == STDIN else source


def read_source(source: str) -> str:
    """The text of a FILE argument (``-``: stdin), which must be UTF-8.

    Exits 2 when the file does not exist or cannot be read; raises
    :class:`InvalidMessageError` when its bytes are not UTF-8.
    """
    name = source_name(source)
    try:
        if source == STDIN:
            return typer.get_text_stream("stdin").read()
        return Path(source).read_text(encoding="utf-8")
    except FileNotFoundError:
        # A wrong path is a usage error, not a message the tracker would refuse.
        fail(f"{name}: no such file", 2)
    except OSError as exc:
        fail(f"{name}: cannot read: {exc.strerror or exc}", 2)
    except UnicodeDecodeError as exc:
        raise InvalidMessageError(f"{name}: not UTF-8 text") from exc


def load_json(text: str, where: str) -> Any:
    """``text`` parsed as one JSON value; :class:`InvalidMessageError` naming ``where`` if not."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidMessageError(f"{where}: not valid JSON: {exc}") from exc


def documents(source: str) -> list[tuple[str, Any]]:
    """``(where, document)`` for a FILE argument: its one JSON value, or each element of an array.

    ``where`` is the source's name, with ``[<index>]`` for an array's element. An
    empty array is an invalid message: a FILE gives at least one document.
    """
    name = source_name(source)
    document = load_json(read_source(source), name)
    if isinstance(document, list):
        if not document:
            raise InvalidMessageError(f"{name}: empty JSON array")
        return [(f"{name}[{index}]", entry) for index, entry in enumerate(document)]
    return [(name, document)]


def manifest_documents(path: Path) -> list[tuple[str, Any]]:
    """``(where, document)`` for each entry: a directory's ``*.json`` files, or a file's lines.

    A file whose first non-blank character is ``[`` is read as a JSON array;
    any other file as JSON Lines (blank lines skipped).
    """
    if path.is_dir():
        files = sorted((p for p in path.glob("*.json") if p.is_file()), key=lambda p: p.name)
        if not files:
            raise InvalidMessageError(f"{path}: no *.json file in the directory")
        return [(str(file), load_json(_manifest_text(file), str(file))) for file in files]
    text = _manifest_text(path)
    if text.lstrip().startswith("["):
        document = load_json(text, str(path))
        return [(f"{path}[{index}]", entry) for index, entry in enumerate(document)]
    return [
        (f"{path}:{number}", load_json(line, f"{path}:{number}"))
        # Only \n ends a JSON Lines line (str.splitlines breaks at more).
        for number, line in enumerate(text.split("\n"), start=1)
        if line.strip()
    ]


def _manifest_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8-sig")  # a byte order mark is dropped
    except UnicodeDecodeError as exc:
        raise InvalidMessageError(f"{path}: not UTF-8 text") from exc
