"""The template's functions against the code they deploy.

Template hygiene (cfn-lint finds no error), handler paths that import from the packaged
folder with only the runtime dependencies, settings every function needs, and the runtime,
architecture and partial batch failures each function is deployed with.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import tomllib
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from dependency_tracker.core import observability, settings
from tests.artifact.pins import installed_closure
from tests.unit.template_contract.cfn import REGION, ROOT, TEMPLATE_PATH, Stack
from tests.unit.template_contract.functions import (
    FUNCTIONS,
    HANDLERS,
    POWERTOOLS_VARIABLES,
    environment,
    event_properties,
    setting_variables,
)
from tests.unit.template_contract.parameters import OTHER_STACK
from tests.unit.template_contract.step_functions import state_machines

# ---------------------------------------------------------------------- template hygiene


def test_cfn_lint_reports_no_errors() -> None:
    from cfnlint.api import lint_file  # noqa: PLC0415  (slow import, only here)

    found = lint_file(TEMPLATE_PATH)
    errors = [f"{m.rule.id} line {m.linenumber}: {m.message}" for m in found]
    assert [e for e in errors if e.startswith("E")] == []


# ---------------------------------------------------------------------- functions and code


def test_handlers_import_from_code_uri_and_need_only_the_runtime_dependencies(
    stack: Stack,
) -> None:
    # GIVEN the handler paths and the folder SAM packages
    handlers = {f: str(stack.properties(f)["Handler"]) for f in FUNCTIONS}
    code_uri = {ROOT / str(stack.properties(f)["CodeUri"]) for f in FUNCTIONS}
    assert len(code_uri) == 1
    (source,) = code_uri
    for path in handlers.values():
        assert (source / path.rpartition(".")[0].replace(".", "/")).with_suffix(".py").is_file()
    assert handlers == {f: f"{HANDLERS[f].__module__}.{HANDLERS[f].__name__}" for f in FUNCTIONS}, (
        "the template must deploy the handlers the local stack runs"
    )
    # WHEN a fresh interpreter imports them from there, with no tracker settings and
    # with every installed library that src/requirements.txt does not bring hidden
    # (as in the Lambda package: no moto, typer, rich, PyYAML, ...)
    shipped = installed_closure(runtime_requirements())
    hidden = sorted(
        module
        for module, names in importlib.metadata.packages_distributions().items()
        if not {canonicalize_name(name) for name in names} & shipped
        and module != "dependency_tracker"
    )
    assert "moto" in hidden
    assert "pydantic" not in hidden
    script = (
        "import importlib, importlib.abc, json, sys\n"
        "hidden = set(json.loads(sys.argv[1]))\n"
        "class NotShipped(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.partition('.')[0] in hidden:\n"
        "            raise ModuleNotFoundError(f'{name} is not shipped', name=name)\n"
        "sys.meta_path.insert(0, NotShipped())\n"
        "found = {}\n"
        "for path in sys.argv[2:]:\n"
        "    module, _, name = path.rpartition('.')\n"
        "    loaded = importlib.import_module(module)\n"
        "    found[path] = [callable(getattr(loaded, name)), loaded.__file__]\n"
        "print(json.dumps(found))\n"
    )
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("DEPTRACK_", "AWS_"))}
    result = subprocess.run(  # noqa: S603  (our own interpreter and script)
        [sys.executable, "-c", script, json.dumps(hidden), *handlers.values()],
        cwd=source,
        env=clean,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    # THEN each imports, is callable and comes from the packaged folder
    assert result.returncode == 0, result.stderr[-2000:]
    for path, (is_callable, filename) in json.loads(result.stdout).items():
        assert is_callable, path
        assert filename.startswith(str(source)), filename


def runtime_requirements() -> list[Requirement]:
    lines = (ROOT / "src" / "requirements.txt").read_text().splitlines()
    return [Requirement(line) for line in (raw.partition("#")[0].strip() for raw in lines) if line]


def test_runtime_requirements_pin_each_project_dependency() -> None:
    # src/requirements.txt pins exact versions (tests/artifact/test_pins.py holds them to
    # constraints.txt); each must sit inside the range pyproject.toml gives library users
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = {canonicalize_name(r.name): r.specifier for r in runtime_requirements()}
    for spec in project["dependencies"]:
        dependency = Requirement(spec)
        (pin,) = pins[canonicalize_name(dependency.name)]
        assert dependency.specifier.contains(pin.version), (spec, str(pin))


@pytest.mark.parametrize("function", FUNCTIONS)
def test_every_variable_the_code_reads_is_set(stack: Stack, function: str) -> None:
    # the DEPTRACK_CIRRUS_* variables are set in cirrus mode only (template_contract/
    # test_cirrus_mode.py); absent, the code runs in normal mode
    optional = {name for name in setting_variables() if name.startswith("DEPTRACK_CIRRUS_")}
    required = setting_variables(function) - optional | POWERTOOLS_VARIABLES
    missing = required - set(environment(stack, function))
    assert not missing, f"{function} lacks {sorted(missing)}"


@pytest.mark.parametrize("region", [REGION, "eu-central-1"])
@pytest.mark.parametrize("function", FUNCTIONS)
def test_settings_built_from_the_template_point_at_the_stack(
    template: dict[str, Any], monkeypatch: pytest.MonkeyPatch, function: str, region: str
) -> None:
    # GIVEN the function's environment exactly as the template sets it (another prefix too)
    stack = Stack(template, OTHER_STACK, region=region)
    for name in setting_variables() | POWERTOOLS_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in environment(stack, function).items():
        monkeypatch.setenv(name, value)
    # WHEN the code reads its settings
    built = settings.Settings.from_env()
    # THEN they name this stack's tables and its managed state machines
    assert built.state_table == stack.physical("StateTable").ref
    assert built.dependency_table == stack.physical("DependencyTable").ref
    assert built.prefix == "pipeline"
    assert built.waiter_retention_days == int(str(stack.parameter("WaiterRetentionDays")))
    for workflow, logical_id in state_machines(stack).items():
        assert built.state_machine_arn(workflow) == stack.physical(logical_id).ref
        assert built.workflow_of(stack.physical(logical_id).attributes["Name"]) == workflow
    assert settings.metrics_namespace() == os.environ["POWERTOOLS_METRICS_NAMESPACE"]
    assert os.environ["POWERTOOLS_SERVICE_NAME"] == observability.SERVICE
    assert os.environ["POWERTOOLS_LOG_LEVEL"] == stack.parameter("LogLevel")


def test_functions_are_python_arm64_with_partial_batch_failures(stack: Stack) -> None:
    for function in FUNCTIONS:
        properties = stack.resolved_properties(function)
        assert properties["Runtime"] == "python3.13"
        assert properties["Architectures"] == ["arm64"]
    for function, kind, name in (
        ("ProcessFunction", "SQS", "ProcessQueue"),
        ("ProcessFunction", "SQS", "JoinQueue"),
        ("CallbackFunction", "DynamoDB", None),
    ):
        assert event_properties(stack, function, kind, name)["FunctionResponseTypes"] == [
            "ReportBatchItemFailures"
        ]
