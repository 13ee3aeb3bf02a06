"""Build the Lambda artifact: the pinned runtime dependencies and the tracker, compiled.

``make build`` (and ``sam build``, through the template's ``BuildMethod: makefile`` and
scripts/sam_build_function.py, once for all the functions) runs::

    python3.13 scripts/build_lambda.py --output build/lambda

1. ``pip install --no-deps`` of ``src/requirements.txt`` (every runtime distribution pinned
   exactly, transitive ones included) as binary wheels for the template's platform
   (``manylinux2014_aarch64``, CPython 3.13), into the output folder;
2. a copy of ``src/dependency_tracker`` without what the handlers never import (the
   embedded stack, the CLI, the demos);
3. ``compileall`` with this interpreter, ``--invalidation-mode unchecked-hash``: Lambda's code
   directory is read-only, so a module without its ``.pyc`` is compiled again on every cold
   start, and an unchecked hash is never re-validated against the source (the source cannot
   change there).

It must run under Python 3.13, the runtime's version, since the ``.pyc`` format is
per-version. ``--platform`` builds the same artifact for another platform (the artifact tests
import the handlers from a host-platform copy: aarch64 extension modules do not load on x86_64).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REQUIREMENTS = ROOT / "src" / "requirements.txt"
PACKAGE = ROOT / "src" / "dependency_tracker"
# template.yaml's Globals.Function: Runtime python3.13, Architectures [arm64]
# (tests/artifact/test_pins.py holds these to it).
PYTHON_VERSION = (3, 13)
PLATFORM = "manylinux2014_aarch64"
# Local mode, the CLI and the demos are packages of their own (dependency_tracker_local,
# dependency_tracker_cli), never copied; in the package, only the alias that keeps
# dependency_tracker.local.EmbeddedStack importable (docs/versioning.md) points at them. The
# contract test (tests/unit/template_contract/test_functions_and_code.py) imports every handler
# with their libraries hidden.
NOT_SHIPPED = frozenset({"local"})
# Where Lambda unpacks the code (its LAMBDA_TASK_ROOT).
LAMBDA_TASK_ROOT = "/var/task"


def ignore_unshipped(folder: str, names: list[str]) -> set[str]:
    """``copytree`` filter: no bytecode from the work tree, nothing in ``NOT_SHIPPED``."""
    ignored = {n for n in names if n == "__pycache__" or n.endswith((".pyc", ".pyo"))}
    if Path(folder).resolve() == PACKAGE.resolve():
        ignored |= NOT_SHIPPED & set(names)
    return ignored


def empty(folder: Path) -> None:
    """Create ``folder`` or empty it (SAM hands over its own artifacts folder)."""
    folder.mkdir(parents=True, exist_ok=True)
    for entry in folder.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def install(output: Path, platform: str) -> None:
    """The pinned wheels for ``platform``, no resolution: the pin list is complete."""
    version = f"{PYTHON_VERSION[0]}.{PYTHON_VERSION[1]}"
    command = [
        sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
        "--root-user-action=ignore",
        "--no-deps", "--no-compile", "--only-binary=:all:", "--platform", platform,
        "--python-version", version, "--implementation", "cp", "--target", str(output),
        "--requirement", str(REQUIREMENTS),
    ]  # fmt: skip
    subprocess.run(command, check=True)  # noqa: S603  (this interpreter's pip)
    # Console scripts point at the builder's interpreter: nothing in Lambda runs them.
    shutil.rmtree(output / "bin", ignore_errors=True)


def compile_all(output: Path) -> None:
    """``.pyc`` for every module, for this interpreter (the runtime's version)."""
    # Each code object names its file as Lambda sees it (tracebacks), not as built here: the
    # .pyc files are then the same wherever the artifact is built.
    command = [
        sys.executable, "-m", "compileall", "-q", "-j", "0",
        "--invalidation-mode", "unchecked-hash", "-s", str(output), "-p", LAMBDA_TASK_ROOT,
        str(output),
    ]  # fmt: skip
    subprocess.run(command, check=True)  # noqa: S603  (this interpreter's compileall)


def main(argv: list[str] | None = None) -> int:
    """Build the artifact into ``--output``; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, required=True, help="folder to (re)create")
    parser.add_argument("--platform", default=PLATFORM, help=f"wheel platform ({PLATFORM})")
    args = parser.parse_args(argv)
    if sys.version_info[:2] != PYTHON_VERSION:
        found = ".".join(map(str, sys.version_info[:3]))
        sys.stderr.write(
            f"build_lambda.py needs Python {'.'.join(map(str, PYTHON_VERSION))} (the Lambda "
            f"runtime's: its .pyc files are per-version); this is {found} ({sys.executable}).\n"
        )
        return 2
    output: Path = args.output.resolve()
    empty(output)
    install(output, args.platform)
    shutil.copytree(PACKAGE, output / PACKAGE.name, ignore=ignore_unshipped)
    compile_all(output)
    size = sum(p.stat().st_size for p in output.rglob("*") if p.is_file())
    print(f"built {output} for {args.platform}: {size / 1e6:.1f} MB unzipped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
