"""docs/security.md, read by section."""

from __future__ import annotations

from tests.unit.template_contract import markdown
from tests.unit.template_contract.cfn import ROOT

SECURITY_DOC = ROOT / "docs" / "security.md"


def security_doc(title: str) -> str:
    """The section of docs/security.md under the heading ``title``."""
    return markdown.section(SECURITY_DOC.read_text(encoding="utf-8"), title)
