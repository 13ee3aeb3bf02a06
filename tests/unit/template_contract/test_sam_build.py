"""``sam build`` builds make build's artifact once, and every function packages that one.

SAM builds each ``BuildMethod: makefile`` function on its own, all five at once with
``--parallel``: it runs ``make build-<Function>`` once per function, each with its own
``ARTIFACTS_DIR``. Here the five targets run at once as SAM runs them, with a stand-in for
Python 3.13 that writes a small artifact and logs each build, so the test needs neither SAM
nor a real build (the artifact tier, tests/artifact, checks the real one).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import TYPE_CHECKING

import pytest

from tests.unit.template_contract.cfn import ROOT
from tests.unit.template_contract.functions import CIRRUS_EVENTS_FUNCTION, FUNCTIONS

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
# Every function of the template, cirrus mode's too.
ALL_FUNCTIONS = (*FUNCTIONS, CIRRUS_EVENTS_FUNCTION)

# Stands in for PYTHON_LAMBDA: `$py scripts/build_lambda.py --output DIR`, logged per build.
FAKE_PYTHON = """#!/bin/sh
out=$3
mkdir -p "$out/dependency_tracker"
echo "handlers" > "$out/dependency_tracker/__init__.py"
echo "pins" > "$out/requirements.txt"
echo "$out" >> "{log}"
"""


def tree(folder: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(folder)): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def test_the_function_targets_build_once_and_package_the_same_artifact(tmp_path: Path) -> None:
    # GIVEN the five functions' build targets, run at once as sam build --parallel runs them
    log = tmp_path / "builds.log"
    python = tmp_path / "python3.13"
    python.write_text(FAKE_PYTHON.format(log=log))
    python.chmod(0o755)
    lambda_dir = tmp_path / "lambda"
    variables = [
        f"LAMBDA_DIR={lambda_dir}",
        f"LAMBDA_STAMP={tmp_path / 'lambda.stamp'}",
        f"PYTHON_LAMBDA={python}",
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAKE", "ARTIFACTS_DIR"))}
    running = [
        subprocess.Popen(  # noqa: S603 - fixed arguments
            ["make", "--no-print-directory", "-s", f"build-{function}", *variables],  # noqa: S607
            cwd=ROOT,
            env={**env, "ARTIFACTS_DIR": str(tmp_path / "aws-sam" / function)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for function in ALL_FUNCTIONS
    ]
    results = [(process.wait(timeout=120), *process.communicate()) for process in running]
    # THEN every target succeeded
    assert all(code == 0 for code, _, _ in results), results
    # AND the artifact was built once, into make build's folder
    assert log.read_text().splitlines() == [str(lambda_dir)]
    # AND each function's folder holds exactly that artifact (so sam deploy uploads one zip)
    artifact = tree(lambda_dir)
    assert artifact
    for function in ALL_FUNCTIONS:
        assert tree(tmp_path / "aws-sam" / function) == artifact, function


def test_every_function_has_a_build_target(template: dict[str, object]) -> None:
    resources = template["Resources"]
    assert isinstance(resources, dict)
    functions = {
        name for name, entry in resources.items() if entry["Type"] == "AWS::Serverless::Function"
    }
    assert functions == set(ALL_FUNCTIONS)
