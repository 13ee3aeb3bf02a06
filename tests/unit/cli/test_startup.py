"""The CLI starts without the local extra, and without paying for moto's import.

``pip install 'dependency-tracker[cli]'`` installs no moto; only ``serve`` and ``demo`` need it.
Importing moto also costs seconds, paid by every command when it was imported at start.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

_WITHOUT_MOTO = """
import sys
sys.modules["moto"] = None  # as if the local extra were not installed: `import moto` fails
sys.argv = ["dependency-tracker", *sys.argv[1:]]
from dependency_tracker_cli.__main__ import main
main()
"""


def test_importing_the_cli_imports_neither_moto_nor_the_local_stack_nor_flask():
    code = (
        "import sys, dependency_tracker_cli.__main__\n"
        "heavy = ('moto', 'dependency_tracker_local', 'flask')\n"
        "print(sorted(m for m in heavy if m in sys.modules))"
    )
    out = subprocess.run(  # noqa: S603  (our own interpreter and code)
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("argv", [["--help"], ["status", "--help"], ["publish", "--help"]])
def test_commands_start_without_the_local_extra(argv):
    out = subprocess.run(  # noqa: S603  (our own interpreter and code)
        [sys.executable, "-c", _WITHOUT_MOTO, *argv],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert "Usage" in out.stdout
