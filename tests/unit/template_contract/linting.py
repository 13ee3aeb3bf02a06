"""cfn-lint on a template file, its findings as one line each (empty: clean)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path


def lint(path: Path, parameters: dict[str, str] | None = None) -> list[str]:
    """cfn-lint's findings for ``path``; ``parameters`` weigh its conditions with those values.

    cfn-lint does not hold given parameter values to their ``AllowedPattern``: to check
    values, write them as the parameters' ``Default`` (its rule E2015 then does).
    """
    from cfnlint.api import lint_file  # noqa: PLC0415  (slow import, only here)
    from cfnlint.config import ManualArgs  # noqa: PLC0415

    config = ManualArgs(parameters=[parameters]) if parameters else None
    return [f"{m.rule.id} line {m.linenumber}: {m.message}" for m in lint_file(path, config)]
