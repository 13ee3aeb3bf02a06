"""The Lambda artifact itself: what ships is what the suite tested, and nothing else.

Runs in the artifact tier only (conftest.py). The aarch64 artifact is checked for its
contents; its handlers are imported from the host-platform twin (same pins, same copy, same
compile step), in a bare Python 3.13 whose ``sys.path`` is that folder and the standard
library. Writes build/artifact-report.json: size, versions, each handler's import time.
"""

from __future__ import annotations

import email.parser
import json
import os
import re
import shutil
import subprocess
import zipfile
from typing import TYPE_CHECKING, Any

import pytest
from packaging.utils import canonicalize_name

from tests.artifact.conftest import REPORT
from tests.artifact.pins import REQUIREMENTS, build_script, pinned, template_functions

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

# Lambda's limit for a function's unzipped deployment package.
UNZIPPED_LIMIT = 250 * 1024 * 1024
# Never in the package: the embedded stack, the CLI and what only they or the dev tools use.
NOT_SHIPPED_MODULES = {"moto", "typer", "rich", "click", "aws_xray_sdk", "wrapt", "flask", "yaml"}
EM_AARCH64 = 183
# Fresh interpreters per handler and mode; the fastest run is reported (the others pay for
# a cold page cache or a busy core).
IMPORT_RUNS = 2

IMPORT_SCRIPT = """
import importlib, json, sys, sysconfig, time
root = sys.argv[1]
sys.path.insert(0, root)
module, _, name = sys.argv[2].rpartition(".")
start = time.perf_counter()
loaded = importlib.import_module(module)
seconds = time.perf_counter() - start
stdlib = tuple({sysconfig.get_path("stdlib"), sysconfig.get_path("platstdlib")})
outside = sorted(
    key for key, value in list(sys.modules.items())
    if (path := getattr(value, "__file__", None)) and not path.startswith((root, *stdlib))
)
print(json.dumps({
    "callable": callable(getattr(loaded, name)), "file": loaded.__file__,
    "outside": outside, "seconds": seconds,
}))
"""


def distributions(folder: Path) -> dict[str, str]:
    """Canonical name → version of every ``*.dist-info`` in ``folder``."""
    found: dict[str, str] = {}
    for metadata in folder.glob("*.dist-info/METADATA"):
        headers = email.parser.Parser().parsestr(metadata.read_text(), headersonly=True)
        found[canonicalize_name(headers["Name"])] = headers["Version"]
    return found


def handlers() -> list[str]:
    """Every ``Handler`` property in template.yaml."""
    return sorted({str(f["Properties"]["Handler"]) for f in template_functions().values()})


def import_handler(python: str, folder: Path, handler: str) -> dict[str, Any]:
    """Import ``handler`` in a fresh, isolated interpreter from ``folder`` alone."""
    # -I: no PYTHON* variables, no user site, no current folder; -S: no site-packages;
    # -B: nothing written, as in Lambda's read-only code folder
    result = subprocess.run(  # noqa: S603  (the build's interpreter, our script)
        [python, "-I", "-S", "-B", "-c", IMPORT_SCRIPT, str(folder), handler],
        env={"PATH": os.environ.get("PATH", ""), "LANG": "C.UTF-8"},
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, f"{handler}: {result.stderr[-3000:]}"
    found: dict[str, Any] = json.loads(result.stdout)
    return found


@pytest.fixture(scope="module")
def without_pyc(host_artifact: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The host artifact with every ``.pyc`` removed: each import compiles its modules."""
    copy = tmp_path_factory.mktemp("artifact") / "source-only"
    shutil.copytree(host_artifact, copy, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


@pytest.fixture(scope="module")
def report(artifact: Path) -> Iterator[dict[str, Any]]:
    """The report the tests fill in, written when the module is done."""
    data: dict[str, Any] = {"artifact": str(artifact), "import_seconds": {}}
    yield data
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text(json.dumps(data, indent=2) + "\n")


@pytest.mark.parametrize("which", ["artifact", "host_artifact"])
def test_packaged_versions_are_the_pins(
    request: pytest.FixtureRequest, which: str, report: dict[str, Any]
) -> None:
    folder: Path = request.getfixturevalue(which)
    packaged = distributions(folder)
    assert packaged == pinned(REQUIREMENTS)
    if which == "artifact":
        report["versions"] = packaged


def test_only_the_runtime_is_packaged(artifact: Path) -> None:
    # GIVEN the top-level entries each packaged distribution installed (its RECORD)
    owned = {"dependency_tracker", "__pycache__"}
    for record in artifact.glob("*.dist-info/RECORD"):
        owned |= {line.split("/", 1)[0].split(",", 1)[0] for line in record.read_text().split()}
    # THEN the artifact holds those and nothing else
    entries = {entry.name for entry in artifact.iterdir()}
    assert entries <= owned, sorted(entries - owned)
    modules = {name.removesuffix(".py") for name in entries}
    assert not modules & NOT_SHIPPED_MODULES
    # AND the tracker comes without what the handlers never import
    package = artifact / "dependency_tracker"
    assert (package / "handlers" / "process.py").is_file()
    shipped = {entry.name for entry in package.iterdir()}
    assert not shipped & build_script().NOT_SHIPPED
    # AND no local, CLI or demo code: not their packages, nor a module that imports them
    assert not entries & {"dependency_tracker_local", "dependency_tracker_cli"}
    tooling = re.compile(
        r"^\s*(from|import)\s+(dependency_tracker_(local|cli)|moto|typer|rich)\b", re.M
    )
    importing = [
        str(path.relative_to(package))
        for path in package.rglob("*.py")
        if tooling.search(path.read_text())
    ]
    assert importing == []
    # AND the state machine definitions the package carries are real files
    assert list((package / "stepfunctions").glob("*.asl.json"))
    assert not (package / "stepfunctions").is_symlink()


def test_extension_modules_are_built_for_the_lambda_runtime(artifact: Path) -> None:
    extensions = list(artifact.rglob("*.so"))
    assert extensions  # pydantic-core's
    for extension in extensions:
        assert extension.name.endswith(("cpython-313-aarch64-linux-gnu.so", ".abi3.so")), extension
        header = extension.read_bytes()[:20]
        assert header[:4] == b"\x7fELF", extension
        assert int.from_bytes(header[18:20], "little") == EM_AARCH64, extension


def test_every_module_has_an_unchecked_pyc_for_the_runtime(
    artifact: Path, lambda_python: str
) -> None:
    magic = bytes.fromhex(
        subprocess.run(  # noqa: S603  (the build's interpreter)
            [lambda_python, "-c", "import importlib.util as u; print(u.MAGIC_NUMBER.hex())"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    sources = list(artifact.rglob("*.py"))
    assert len(sources) > 100
    missing, checked = [], []
    for source in sources:
        compiled = source.parent / "__pycache__" / f"{source.stem}.cpython-313.pyc"
        if not compiled.is_file():
            missing.append(str(source.relative_to(artifact)))
            continue
        header = compiled.read_bytes()[:8]
        # PEP 552: flags 0b01 = hash-based and never checked against the source
        if header[:4] != magic or int.from_bytes(header[4:8], "little") != 0b01:
            checked.append(str(source.relative_to(artifact)))
    assert not missing, missing[:20]
    assert not checked, checked[:20]


def test_size_is_within_lambda_s_limit(artifact: Path, report: dict[str, Any]) -> None:
    files = [p for p in artifact.rglob("*") if p.is_file()]
    unzipped = sum(p.stat().st_size for p in files)
    assert unzipped < UNZIPPED_LIMIT
    archive = REPORT.with_name("lambda.zip")
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zipped:
        for path in files:
            zipped.write(path, path.relative_to(artifact))
    report.update(unzipped_bytes=unzipped, zipped_bytes=archive.stat().st_size, files=len(files))
    archive.unlink()


@pytest.mark.parametrize("handler", handlers())
def test_handler_imports_from_the_artifact_alone(
    handler: str,
    host_artifact: Path,
    without_pyc: Path,
    lambda_python: str,
    report: dict[str, Any],
) -> None:
    times = {}
    for mode, folder in (("with_pyc", host_artifact), ("without_pyc", without_pyc)):
        runs = [import_handler(lambda_python, folder, handler) for _ in range(IMPORT_RUNS)]
        first = runs[0]
        # THEN it imports, is callable, comes from the artifact and loads nothing from outside
        # it but the standard library
        assert first["callable"], handler
        assert first["file"].startswith(str(folder)), first["file"]
        assert first["outside"] == [], first["outside"]
        times[mode] = min(run["seconds"] for run in runs)
    report["import_seconds"][handler] = times
