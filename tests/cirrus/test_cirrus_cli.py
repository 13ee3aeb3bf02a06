"""cirrus-geo's own command line runs in the tier's environment (its ``cli`` extra installed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_the_cirrus_command_shows_its_help() -> None:
    # GIVEN the `cirrus` script beside this interpreter (.venv-cirrus/bin/cirrus)
    cirrus = Path(sys.executable).parent / "cirrus"
    # WHEN asked for its help
    shown = subprocess.run(  # noqa: S603  (the script beside this interpreter)
        [str(cirrus), "--help"], capture_output=True, text=True, timeout=60, check=False
    )
    # THEN it runs: what its CLI imports (backoff, click-option-group) is installed
    assert shown.returncode == 0, shown.stderr
    assert "Usage: cirrus" in shown.stdout
    assert "payload" in shown.stdout
