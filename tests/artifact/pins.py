"""The Lambda package's pins (src/requirements.txt), read for the artifact tests."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.unit.template_contract.cfn import load_template

if TYPE_CHECKING:
    from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
REQUIREMENTS = ROOT / "src" / "requirements.txt"
CONSTRAINTS = ROOT / "constraints.txt"


def requirements(path: Path) -> list[Requirement]:
    """Every requirement line of a pip requirements file (comments dropped)."""
    lines = (raw.partition("#")[0].strip() for raw in path.read_text().splitlines())
    return [Requirement(line) for line in lines if line]


def exact_version(requirement: Requirement) -> str | None:
    """The version ``requirement`` pins with ``==``, or None if it is not one exact pin."""
    specifiers = list(requirement.specifier)
    if len(specifiers) != 1 or specifiers[0].operator != "==" or "*" in specifiers[0].version:
        return None
    return specifiers[0].version


def pinned(path: Path) -> dict[str, str]:
    """Canonical distribution name → pinned version, for the exact pins of ``path``."""
    found = {canonicalize_name(r.name): exact_version(r) for r in requirements(path)}
    return {name: version for name, version in found.items() if version is not None}


def project_dependencies() -> list[Requirement]:
    """``[project].dependencies``: the ranges a library user gets."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [Requirement(spec) for spec in project["dependencies"]]


def installed_closure(roots: list[Requirement]) -> set[str]:
    """Canonical names of what ``roots`` install here, transitively, extras and markers applied."""
    seen: set[str] = set()
    pending = list(roots)
    while pending:
        requirement = pending.pop()
        key = f"{canonicalize_name(requirement.name)}[{','.join(sorted(requirement.extras))}]"
        if key in seen:
            continue
        seen.add(key)
        try:
            specs = importlib.metadata.requires(requirement.name) or []
        except importlib.metadata.PackageNotFoundError:
            continue  # not installed here, so nothing imported it
        for spec in specs:
            dependency = Requirement(spec)
            extras = requirement.extras or {""}
            if dependency.marker is None or any(
                dependency.marker.evaluate({"extra": extra}) for extra in extras
            ):
                pending.append(dependency)
    return {key.partition("[")[0] for key in seen}


def build_script() -> ModuleType:
    """scripts/build_lambda.py, imported (scripts/ is not a package)."""
    spec = importlib.util.spec_from_file_location("build_lambda", ROOT / "scripts/build_lambda.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def template_functions() -> dict[str, dict[str, Any]]:
    """Logical id → resource, for every ``AWS::Serverless::Function`` in template.yaml."""
    resources: dict[str, dict[str, Any]] = load_template()["Resources"]
    return {
        name: resource
        for name, resource in resources.items()
        if resource["Type"] == "AWS::Serverless::Function"
    }


def function_globals() -> dict[str, Any]:
    """template.yaml's ``Globals.Function``."""
    found: dict[str, Any] = load_template()["Globals"]["Function"]
    return found
