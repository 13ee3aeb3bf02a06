"""src/requirements.txt: exact pins, the tested versions, every runtime distribution.

The Lambda package is built from this list with ``pip install --no-deps``
(scripts/build_lambda.py), so a range or a missing transitive pin would ship a version
the suite never ran, or nothing at all.
"""

from __future__ import annotations

import re

from packaging.utils import canonicalize_name

from tests.artifact.pins import (
    CONSTRAINTS,
    REQUIREMENTS,
    ROOT,
    build_script,
    exact_version,
    function_globals,
    installed_closure,
    pinned,
    project_dependencies,
    requirements,
    template_functions,
)


def test_every_requirement_is_one_exact_pin() -> None:
    loose = [
        str(r)
        for r in requirements(REQUIREMENTS)
        if exact_version(r) is None or r.extras or r.marker
    ]
    assert not loose, f"src/requirements.txt must pin name==version only: {loose}"


def test_pins_are_the_versions_the_suite_runs_with() -> None:
    # GIVEN the Lambda pins and the suite's constraints
    lambda_pins, tested = pinned(REQUIREMENTS), pinned(CONSTRAINTS)
    # THEN each pin is the constrained version (make constraints refreshes constraints.txt:
    # bring src/requirements.txt along)
    drift = {
        name: (version, tested.get(name))
        for name, version in lambda_pins.items()
        if tested.get(name) != version
    }
    assert not drift, f"src/requirements.txt vs constraints.txt (pin, tested): {drift}"


def test_every_runtime_distribution_is_pinned_and_nothing_else() -> None:
    # GIVEN what [project].dependencies install, transitively (as installed here, at the
    # constrained versions)
    needed = installed_closure(project_dependencies())
    lambda_pins = pinned(REQUIREMENTS)
    # THEN the pins are exactly that set (no Tracer extra: aws-xray-sdk is not shipped)
    assert "aws-xray-sdk" not in needed
    assert set(lambda_pins) == needed, (
        f"missing pins: {sorted(needed - set(lambda_pins))}, "
        f"not needed: {sorted(set(lambda_pins) - needed)}"
    )
    # AND every pin is inside the range a library user gets
    for dependency in project_dependencies():
        version = lambda_pins[canonicalize_name(dependency.name)]
        assert dependency.specifier.contains(version), (str(dependency), version)


def test_the_build_targets_the_template_s_runtime_and_sam_builds_it_with_make() -> None:
    script = build_script()
    defaults = function_globals()
    assert defaults["Runtime"] == "python{}.{}".format(*script.PYTHON_VERSION)
    assert defaults["Architectures"] == ["arm64"]
    assert script.PLATFORM == "manylinux2014_aarch64"
    assert defaults["CodeUri"] == "src/"
    # sam build runs src/Makefile (the Makefile in CodeUri), which is the project's, in the
    # project root: each function's build-<logical id> target is make build's script
    assert (
        "include $(dir $(lastword $(MAKEFILE_LIST)))../Makefile"
        in (ROOT / "src" / "Makefile").read_text()
    )
    targets = set(re.findall(r"\bbuild-(\w+Function)\b", (ROOT / "Makefile").read_text()))
    for name, resource in template_functions().items():
        # no function overrides the package or the runtime the artifact is built for
        assert {"CodeUri", "Runtime", "Architectures"}.isdisjoint(resource["Properties"]), name
        assert resource.get("Metadata") == {"BuildMethod": "makefile", "WorkingDirectory": "."}
        assert name in targets, f"the Makefile has no build-{name} target for sam build"
