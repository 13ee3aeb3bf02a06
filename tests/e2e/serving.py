"""``dependency-tracker serve`` in a subprocess, as a user runs it, for the CLI's e2e tests."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from typer.testing import CliRunner

from dependency_tracker.payloads.state_table import StateTable
from dependency_tracker.table.dependency_table import DependencyTable
from dependency_tracker_cli.__main__ import app
from tests.conftest import wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from typer.testing import Result

STARTUP_SECONDS = 60


@dataclass
class Server:
    """A running ``serve`` subprocess and what it published."""

    process: subprocess.Popen[bytes]
    outputs: dict[str, Any]
    outputs_file: Path
    stdout: Path
    stderr: Path

    @property
    def endpoint(self) -> str:
        return str(self.outputs["EndpointUrl"])

    def client(self, service: str) -> Any:
        """A plain boto3 client of this endpoint: nothing from the tracker's code."""
        return boto3.session.Session().client(  # type: ignore[call-overload]
            service, endpoint_url=self.endpoint, region_name=self.outputs["Region"]
        )

    def states(self) -> StateTable:
        return StateTable(self.client("dynamodb"), self.outputs["StateTableName"])

    def dependencies(self) -> DependencyTable:
        return DependencyTable(self.client("dynamodb"), self.outputs["DependencyTableName"])

    def cli(self, *args: str) -> Result:
        """``dependency-tracker ARGS --endpoint-url <serve>``, in this process."""
        return CliRunner().invoke(
            app,
            [*args, "--endpoint-url", self.endpoint],
            env={"DEPTRACK_PREFIX": None, "DEPTRACK_STACK_NAME": None},
        )

    def stop(self, timeout: float = 30) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
        return self.process.wait(timeout=timeout)


@contextlib.contextmanager
def serving(folder: Path, *options: str) -> Iterator[Server]:
    """``serve --port 0 --prefix deptrack OPTIONS`` until the block ends (Ctrl-C, then kill)."""
    outputs_file = folder / "outputs.json"
    stdout, stderr = folder / "stdout", folder / "stderr"
    command = [sys.executable, "-m", "dependency_tracker_cli", "serve", "--port", "0"]
    command += ["--prefix", "deptrack", "--outputs-file", str(outputs_file)]
    command += ["--log-file", str(folder / "serve.log"), "--json", *options]
    with stdout.open("wb") as out, stderr.open("wb") as err:
        process = subprocess.Popen(command, stdout=out, stderr=err)  # noqa: S603
    try:

        def started() -> bool:
            if process.poll() is not None:
                pytest.fail(f"serve exited {process.returncode}: {stderr.read_text()}")
            return outputs_file.exists()

        wait_until(started, timeout=STARTUP_SECONDS)
        outputs = json.loads(outputs_file.read_text())
        yield Server(process, outputs, outputs_file, stdout, stderr)
    finally:
        interrupt(process)


def interrupt(process: subprocess.Popen[bytes]) -> None:
    """Ctrl-C a ``serve`` subprocess; kill it if it has not stopped within 30 s."""
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def write(folder: Path, name: str, document: Any) -> str:
    """``document`` as JSON in ``folder/name``; the path."""
    path = folder / name
    path.write_text(json.dumps(document))
    return str(path)
