"""One ``sam build`` function target: make build's artifact, built once, copied to its folder.

Every function in ``template.yaml`` has ``Metadata: BuildMethod: makefile``, and SAM builds
each such function on its own: it never shares a makefile build between functions (SAM CLI,
``FunctionBuildDefinition.__eq__``), and ``sam build --parallel`` runs the five at once. So
each ``build-<Function>`` target runs this::

    python3 scripts/sam_build_function.py --artifacts-dir DIR --lambda-dir build/lambda -- \
        make build

It takes a lock beside the artifact (``fcntl.flock``: released when the process ends,
however it ends), runs ``make build`` under it, which builds the artifact only when its
inputs changed (the first function; the next four find it current), then copies the
artifact into the function's ``ARTIFACTS_DIR``. The five folders SAM packages are
byte-identical, so ``sam deploy`` uploads one zip: SAM names an upload by its folder's
checksum and skips one already in the bucket.
"""

from __future__ import annotations

import argparse
import fcntl
import shutil
import subprocess
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    """Build (once, under the lock) and copy; the exit code of the build if it failed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--artifacts-dir", type=Path, required=True, help="SAM's ARTIFACTS_DIR")
    parser.add_argument("--lambda-dir", type=Path, required=True, help="make build's output")
    parser.add_argument("build", nargs=argparse.REMAINDER, help="-- the command that builds it")
    args = parser.parse_args(argv)
    command = args.build[1:] if args.build[:1] == ["--"] else args.build
    if not command:
        parser.error("the build command is missing (after --)")
    lambda_dir: Path = args.lambda_dir
    lock = lambda_dir.with_name(f"{lambda_dir.name}.lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    with lock.open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        built = subprocess.run(command, check=False)  # noqa: S603 - the Makefile's own command
        if built.returncode != 0:
            return built.returncode
        shutil.copytree(lambda_dir, args.artifacts_dir, symlinks=True, dirs_exist_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
