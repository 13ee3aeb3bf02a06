"""The docs' cirrus-mode Python blocks run as written, in this tier's Python (cirrus-geo).

tests/e2e/test_snippets.py classifies every block of the docs and runs the others; a block
that starts the stack with ``cirrus=True`` needs cirrus-geo, which only this tier's
environment (``.venv-cirrus``) has, so it runs here.
"""

from __future__ import annotations

import subprocess
import sys
from typing import TYPE_CHECKING, Any

import pytest

from tests.e2e.test_snippets import BLOCKS, CIRRUS_PYTHON, fresh_terminal, kind, shown_after

if TYPE_CHECKING:
    from pathlib import Path

    from tests.unit.docs_blocks import Block

RUN_SECONDS = 240
CIRRUS_BLOCKS = [block for block in BLOCKS if kind(block) == CIRRUS_PYTHON]


def test_the_docs_have_cirrus_mode_blocks_for_this_tier() -> None:
    assert CIRRUS_BLOCKS, "no Python block starts the stack with cirrus=True"


@pytest.mark.parametrize("block", [pytest.param(block, id=block.where) for block in CIRRUS_BLOCKS])
def test_cirrus_mode_block_runs_and_prints_what_the_page_shows(
    block: Block, tmp_path: Path
) -> None:
    # GIVEN a cirrus-mode Python block, written to a file in a directory of its own
    script = tmp_path / f"block_{block.line}.py"
    script.write_text(block.body, encoding="utf-8")
    # WHEN it runs as written, in this tier's Python
    done: Any = subprocess.run(  # noqa: S603 - our own docs, as a reader runs them
        [sys.executable, script.name],
        cwd=tmp_path,
        env=fresh_terminal(tmp_path),
        capture_output=True,
        text=True,
        timeout=RUN_SECONDS,
        check=False,
    )
    # THEN it exits 0, and the output block after it shows the end of what it printed
    assert done.returncode == 0, f"{block.where}: exit {done.returncode}\n{done.stderr}"
    shown = shown_after(block)
    if shown is not None:
        assert done.stdout.strip().splitlines()[-len(shown) :] == shown, done.stdout
