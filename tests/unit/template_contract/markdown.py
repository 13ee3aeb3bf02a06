"""Just enough Markdown to hold a document to the template: sections, table rows, code spans."""

from __future__ import annotations

import re

_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*$")
_CODE = re.compile(r"`([^`]+)`")


def section(text: str, title: str) -> str:
    """The body of the section headed ``title`` (up to the next heading of its level or above)."""
    lines = text.splitlines()
    for index, line in enumerate(lines):
        found = _HEADING.match(line)
        if found and found.group(2) == title:
            level = len(found.group(1))
            body = []
            for following in lines[index + 1 :]:
                heading = _HEADING.match(following)
                if heading and len(heading.group(1)) <= level:
                    break
                body.append(following)
            return "\n".join(body)
    msg = f"no section {title!r}"
    raise AssertionError(msg)


def table_rows(text: str) -> list[list[str]]:
    """The body rows (header and separator left out) of every table in ``text``."""
    rows: list[list[str]] = []
    block: list[list[str]] = []
    for line in [*text.splitlines(), ""]:
        stripped = line.strip()
        if stripped.startswith("|"):
            block.append([cell.strip() for cell in stripped.strip("|").split("|")])
            continue
        if len(block) >= 2 and all(set(cell) <= set("-: ") for cell in block[1]):
            rows += block[2:]
        block = []
    return rows


def code_spans(text: str) -> list[str]:
    """The contents of every ``code span`` in ``text``."""
    return _CODE.findall(text)
