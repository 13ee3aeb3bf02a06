"""Every command the CLI prints as a hint runs as printed, after the README's steps.

The README runs the CLI as ``.venv/bin/dependency-tracker`` from the checkout, the venv not
activated, and exports ``AWS_ENDPOINT_URL`` to serve's endpoint. Here the CLI is started the
same way (the program beside this interpreter, ``PATH`` without the venv), and each hint it
prints is handed to ``sh`` as it is: serve's "try:", wait's "while it waits", and the pointer
``status`` gives for a waiting parent's own id.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from dependency_tracker_cli.hints import PROGRAM
from tests.conftest import wait_until
from tests.e2e.serving import interrupt

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
# The venv's own script, as `make venv` installs it (the README's `.venv/bin/dependency-tracker`).
CLI = Path(sys.executable).parent / PROGRAM
BARE_PATH = "/usr/bin:/bin"
HINT_SECONDS = 120


def user_env(**more: str) -> dict[str, str]:
    """This machine's environment as a new shell has it: no venv on PATH, no test settings."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("AWS_", "DEPTRACK_")) and key != "VIRTUAL_ENV"
    }
    return {**env, "PATH": BARE_PATH, **more}


def run(command: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``command`` through ``sh``, from the checkout, as a user pastes it."""
    return subprocess.run(  # noqa: S602  (the point: a shell runs the hint as printed)
        command,
        shell=True,
        cwd=ROOT,
        env=user_env(**env),
        capture_output=True,
        text=True,
        timeout=HINT_SECONDS,
        check=False,
    )


@pytest.fixture(scope="module")
def serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """``.venv/bin/dependency-tracker serve``, started from the checkout; (stdout, outputs)."""
    assert CLI.exists(), f"{CLI}: the venv's CLI script (make venv installs it)"
    folder = tmp_path_factory.mktemp("serve")
    outputs, stdout = folder / "outputs.json", folder / "stdout"
    command = [str(CLI), "serve", "--port", "0", "--outputs-file", str(outputs)]
    command += ["--log-file", str(folder / "serve.log")]
    with stdout.open("wb") as out:
        process = subprocess.Popen(  # noqa: S603
            command, cwd=ROOT, env=user_env(), stdout=out, stderr=subprocess.DEVNULL
        )
        try:
            wait_until(lambda: "try:" in stdout.read_text(encoding="utf-8"), timeout=60)
            yield stdout.read_text(encoding="utf-8"), outputs
        finally:
            interrupt(process)


def test_serve_s_try_line_publishes_its_example_as_printed(serve: tuple[str, Path]) -> None:
    # GIVEN serve's output: "try:" and the CLI command, then the AWS CLI's
    printed, _ = serve
    lines = printed.splitlines()
    index = next(i for i, line in enumerate(lines) if line.startswith("try: "))
    publish, aws = lines[index].removeprefix("try: "), lines[index + 1].strip()
    # THEN the hint names the program as the README runs it
    assert publish.startswith(f".venv/bin/{PROGRAM} publish ")
    # WHEN the user pastes it
    done = run(publish)
    # THEN the example payload it names exists and runs to its end
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCEEDED" in done.stdout
    # AND the AWS CLI's line sends the same file, where the AWS CLI is installed
    if shutil.which("aws", path=BARE_PATH):
        sent = run(aws, AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing")
        assert sent.returncode == 0, sent.stdout + sent.stderr
    file = re.search(r"file://(\S+)", aws)
    assert file is not None
    assert json.loads(Path(file[1].strip("'")).read_text(encoding="utf-8"))["process"]


def test_wait_s_hints_and_status_s_pointer_run_as_printed(
    serve: tuple[str, Path], tmp_path: Path
) -> None:
    # GIVEN the README's terminal 2: AWS_ENDPOINT_URL exported, a tile on file
    endpoint = json.loads(serve[1].read_text(encoding="utf-8"))["EndpointUrl"]
    tile = tmp_path / "tile-h.json"
    tile.write_text(
        json.dumps(
            {
                "features": [{"id": "tile-h", "collection": "s2"}],
                "process": [{"workflow": "simulate", "tasks": {"simulate": {"seconds": 3}}}],
            }
        ),
        encoding="utf-8",
    )
    cli = f".venv/bin/{PROGRAM}"
    # WHEN a parent is started as the README starts it
    started = run(
        f"{cli} wait {tile} --payload-id s2/mosaic-h --no-follow", AWS_ENDPOINT_URL=endpoint
    )
    assert started.returncode == 0, started.stderr
    found = re.search(r"while it waits: (.+?); (.+?); to its end: (.+)$", started.stderr.strip())
    assert found is not None, started.stderr
    # THEN each command it suggests runs as printed: the graph, stuck, then follow to its end
    for hint in found.groups():
        assert hint.startswith(f"{cli} "), hint
        done = run(hint, AWS_ENDPOINT_URL=endpoint)
        assert done.returncode == 0, f"{hint}\n{done.stdout}{done.stderr}"
    # AND status on the parent's own id points to commands that run as printed too
    status = run(f"{cli} status s2/mosaic-h", AWS_ENDPOINT_URL=endpoint)
    assert status.returncode == 5
    pointer = re.search(r"What it waits on: (.+?); what holds it: (.+)$", status.stderr, re.M)
    assert pointer is not None, status.stderr
    for hint in pointer.groups():
        done = run(hint, AWS_ENDPOINT_URL=endpoint)
        assert done.returncode == 0, f"{hint}\n{done.stdout}{done.stderr}"
    assert "s2/mosaic-h" in run(pointer[1], AWS_ENDPOINT_URL=endpoint).stdout
