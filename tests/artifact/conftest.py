"""The artifact tier: the Lambda package as built (make build), checked from outside.

``make test`` (after the cirrus tier) and ``make test-artifact`` run ``test_artifact.py``
with ``DEPTRACK_ARTIFACT_TIER=1`` and the built folders and the Python 3.13 they name in the
environment; the main suite does not collect it (it needs the built artifact). In the tier a
missing folder or interpreter is an error, never a skip. ``test_pins.py`` runs everywhere.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.artifact.pins import ROOT

if TYPE_CHECKING:
    from _pytest.terminal import TerminalReporter

TIER_ENV = "DEPTRACK_ARTIFACT_TIER"
IN_TIER = os.environ.get(TIER_ENV) == "1"
REPORT = ROOT / "build" / "artifact-report.json"

if not IN_TIER:
    collect_ignore_glob = ["test_artifact.py"]


def _required(variable: str) -> str:
    value = os.environ.get(variable, "")
    if not value:
        msg = f"{TIER_ENV}=1 needs {variable} (make test-artifact sets it)"
        raise pytest.UsageError(msg)
    return value


def _folder(variable: str) -> Path:
    folder = Path(_required(variable))
    if not (folder / "dependency_tracker").is_dir():
        msg = f"{variable}={folder} holds no built artifact: run make build build-host"
        raise pytest.UsageError(msg)
    return folder.resolve()


def pytest_configure(config: pytest.Config) -> None:
    """In the tier, check its inputs before anything runs, and drop a stale report."""
    if not IN_TIER:
        return
    python = _required("DEPTRACK_LAMBDA_PYTHON")
    found = subprocess.run(  # noqa: S603  (the interpreter make build used)
        [python, "-c", "import sys; print(sys.version_info[:2] == (3, 13))"],
        capture_output=True,
        text=True,
        check=False,
    )
    if found.stdout.strip() != "True":
        msg = f"DEPTRACK_LAMBDA_PYTHON={python} is not a working Python 3.13"
        raise pytest.UsageError(msg)
    _folder("DEPTRACK_ARTIFACT_DIR")
    _folder("DEPTRACK_ARTIFACT_HOST_DIR")
    REPORT.unlink(missing_ok=True)


@pytest.fixture(scope="session")
def lambda_python() -> str:
    """The Python 3.13 the artifact was compiled with."""
    return _required("DEPTRACK_LAMBDA_PYTHON")


@pytest.fixture(scope="session")
def artifact() -> Path:
    """The Lambda artifact (manylinux2014 aarch64), as make build and sam build make it."""
    return _folder("DEPTRACK_ARTIFACT_DIR")


@pytest.fixture(scope="session")
def host_artifact() -> Path:
    """The same build for this machine's platform: its handlers can be imported here."""
    return _folder("DEPTRACK_ARTIFACT_HOST_DIR")


def pytest_terminal_summary(terminalreporter: TerminalReporter) -> None:
    """The artifact's size, versions and import times, from the report the tier wrote."""
    if not IN_TIER or not REPORT.is_file():
        return
    report = json.loads(REPORT.read_text())
    write = terminalreporter.write_line
    terminalreporter.section("Lambda artifact")
    # a failed test leaves its part out: print what was measured
    if "unzipped_bytes" in report:
        write(
            f"{report['unzipped_bytes'] / 1e6:.1f} MB unzipped, "
            f"{report['zipped_bytes'] / 1e6:.1f} MB zipped, {report['files']} files "
            f"({REPORT.relative_to(ROOT)})"
        )
    if "versions" in report:
        versions = sorted(report["versions"].items())
        write("packaged: " + ", ".join(f"{name} {version}" for name, version in versions))
    for handler, seconds in report["import_seconds"].items():
        write(
            f"import {handler}: {seconds['with_pyc']:.2f} s with .pyc, "
            f"{seconds['without_pyc']:.2f} s without"
        )
