"""Every relative link in the docs leads somewhere: an existing file and, for an anchor, a heading.

Anchors follow GitHub's rule for heading ids (lowercase; punctuation other than ``-`` and
``_`` dropped; each space a ``-``; a repeated heading gets ``-1``, ``-2``), so a heading
renamed or moved to another page fails here until every link to it follows. docs/index.md,
the entry page, must link every page under docs/.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
INDEX = DOCS / "index.md"
# Fenced blocks (``` or ~~~) hold code, not links or headings.
_FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.MULTILINE | re.DOTALL)
_INLINE_CODE = re.compile(r"`[^`\n]*`")
_LINK = re.compile(
    r"(?<!!)\[(?:[^\[\]]|\[[^\]]*\])*\]\((?P<target><[^>]*>|[^)\s]+)(?:\s+\"[^\"]*\")?\)"
)
_HEADING = re.compile(r"^#{1,6}[ \t]+(?P<text>.+?)[ \t]*#*[ \t]*$", re.MULTILINE)
_LINK_TEXT = re.compile(r"\[(?P<text>[^\]]*)\]\([^)]*\)")
# Targets with a scheme (https:, mailto:) are not checked here.
_SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)


def linked_files() -> list[Path]:
    """The pages whose links are checked: the README, every page of docs/, the examples' README."""
    return [ROOT / "README.md", *sorted(DOCS.glob("*.md")), ROOT / "examples" / "README.md"]


def prose(text: str) -> str:
    """``text`` without fenced blocks (line count kept) and without inline code."""
    text = _FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    return _INLINE_CODE.sub("", text)


def slug(heading: str) -> str:
    """The id GitHub gives a heading (before a repeat's ``-N`` suffix)."""
    text = _LINK_TEXT.sub(r"\g<text>", heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading id of a Markdown file, repeats numbered as GitHub numbers them."""
    text = _FENCE.sub("", path.read_text(encoding="utf-8"))
    seen: dict[str, int] = {}
    ids = set()
    for match in _HEADING.finditer(text):
        base = slug(match["text"])
        count = seen.get(base, 0)
        ids.add(base if count == 0 else f"{base}-{count}")
        seen[base] = count + 1
    return ids


def targets(path: Path) -> list[str]:
    """The relative link targets of a Markdown file, in order."""
    found = []
    for match in _LINK.finditer(prose(path.read_text(encoding="utf-8"))):
        target = match["target"].strip("<>")
        if not _SCHEME.match(target):
            found.append(target)
    return found


def broken_links(path: Path) -> list[str]:
    """Links of ``path`` to a file that does not exist or to a heading its page lacks."""
    broken = []
    for target in targets(path):
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target}: no heading #{anchor} in {linked.name}")
    return broken


@pytest.mark.parametrize("path", linked_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(path: Path) -> None:
    # GIVEN a page of the docs WHEN its relative links are followed
    # THEN each names a file that exists and, for an anchor, a heading of that page
    assert broken_links(path) == []


def test_the_index_links_every_page_of_the_docs() -> None:
    # GIVEN the entry page and the pages under docs/
    linked = {
        (INDEX.parent / target.partition("#")[0]).resolve()
        for target in targets(INDEX)
        if target.partition("#")[0]
    }
    # WHEN its links are read THEN every other page is among them
    missing = [
        p.name for p in sorted(DOCS.glob("*.md")) if p != INDEX and p.resolve() not in linked
    ]
    assert missing == []


def test_a_broken_link_is_reported(tmp_path: Path) -> None:
    # GIVEN a page with a good link, a link to a missing file and one to a missing heading
    (tmp_path / "other.md").write_text("# Other\n\n## The `naming.py` rules: 2 of them\n")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n"
        "[ok](other.md#the-namingpy-rules-2-of-them) [self](#page)\n"
        "[gone](missing.md) [moved](other.md#old-heading) [here](#nowhere)\n"
        "```sh\n[in code](not-checked.md)\n```\n"
    )
    # WHEN it is checked THEN exactly the three broken ones are reported
    assert broken_links(page) == [
        "missing.md: no such file",
        "other.md#old-heading: no heading #old-heading in other.md",
        "#nowhere: no heading #nowhere in page.md",
    ]


def test_repeated_headings_are_numbered_as_github_numbers_them(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# A\n\n## Handler costs\n\n## Handler costs\n\n```\n# not a heading\n```\n")
    assert anchors(page) == {"a", "handler-costs", "handler-costs-1"}
