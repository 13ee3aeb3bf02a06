"""Docs that cannot drift: numbers and lists checked against the code and the template.

Every figure the docs take from ``template.yaml`` (parameters and their defaults, alarms,
failure queues, alarm metrics and their price, queues, functions) or from the demo (its
default parents, dependencies and join size) is compared with its source here, so a change
to either fails a test until the docs follow. The docs' code blocks are checked as far as
is fast and robust: Python blocks compile, JSON blocks parse (unless they are schematic),
shell blocks pass ``bash -n``, every ``dependency-tracker`` command line parses against the
real CLI, the payloads the deploy guide writes are valid messages with the ids it states,
and the callback output architecture.md shows is a valid ``CallbackSuccess``.
"""

from __future__ import annotations

import inspect
import itertools
import json
import re
import shutil
import subprocess
import tomllib
from functools import cache
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import pytest
from typer.testing import CliRunner

from dependency_tracker.core.enums import DependencyError, PayloadState
from dependency_tracker.intake.parse import read_message
from dependency_tracker.payloads.model import ProcessPayload
from dependency_tracker.payloads.results import result_items
from dependency_tracker.waits.messages import ProcessMessage
from dependency_tracker.waits.outputs import CallbackSuccess
from dependency_tracker_cli.__main__ import app
from dependency_tracker_cli.commands.demo import demo
from dependency_tracker_cli.waitgraph import Hold
from dependency_tracker_local.demo import build_scenario
from tests.unit.docs_blocks import ROOT, Block, blocks, cli_invocations, markdown_files
from tests.unit.template_contract.cfn import Stack, load_template

if TYPE_CHECKING:
    from pathlib import Path

README = ROOT / "README.md"
DOCS = ROOT / "docs"
NUMBER_WORDS = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight"}
# CloudWatch: $0.10 per standard-resolution alarm metric a month (a metric-math alarm
# counts each metric it reads), as deploy.md's cost section says.
ALARM_METRIC_PRICE = 0.10
_LINK = re.compile(r"\[[^\]]*\]\((?P<target>[^)\s]+)\)")
# Placeholders that make a JSON block a schema, not an example.
_SCHEMATIC = ("...", "…", '" | "')


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def words(path: Path) -> str:
    """The text with every run of whitespace as one space (sentences wrap across lines)."""
    return " ".join(read(path).split())


@cache
def template() -> dict[str, Any]:
    return load_template()


def resources(kind: str) -> dict[str, dict[str, Any]]:
    """The resources of one type a deployment with the default parameters creates.

    Cirrus mode's (``Condition: CirrusMode``) are left out: deploy.md counts them in its
    own section, checked by ``template_contract/test_cirrus_mode.py``.
    """
    stack = Stack(template())
    return {
        name: resource
        for name, resource in template()["Resources"].items()
        if resource["Type"] == kind
        and ("Condition" not in resource or stack.condition(resource["Condition"]))
    }


def alarm_names() -> set[str]:
    """``{Prefix}-...`` names of the template's alarms."""
    names = set()
    for alarm in resources("AWS::CloudWatch::Alarm").values():
        name = alarm["Properties"]["AlarmName"]
        names.add(name["Fn::Sub"].replace("${Prefix}", "{Prefix}"))
    return names


def section(text: str, heading: str) -> str:
    """The text under a Markdown heading, up to the next heading of any level."""
    start = text.index(heading)
    following = re.search(r"^#", text[start + len(heading) :], re.MULTILINE)
    return text[start : start + len(heading) + (following.start() if following else len(text))]


def table_rows(text: str, header: str) -> list[list[str]]:
    """Cells of the Markdown table whose header row starts with ``header``."""
    lines = text[text.index(header) :].splitlines()
    rows = []
    for line in lines[2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split(" | ")])
    return rows


def ticked(cell: str) -> list[str]:
    """The `code` spans of a table cell."""
    return re.findall(r"`([^`]*)`", cell)


# ---------------------------------------------------------------------------- template → deploy.md


def test_deploy_md_lists_every_template_parameter_with_its_default() -> None:
    # GIVEN the parameter table of docs/deploy.md and the template's Parameters
    rows = table_rows(read(DOCS / "deploy.md"), "| Parameter | Default | Meaning |")
    documented: dict[str, str] = {}
    for name_cell, default_cell, _ in rows:
        names = ticked(name_cell)
        defaults = ticked(default_cell) or [""] * len(names)  # "empty"
        assert len(names) == len(defaults), name_cell
        documented.update(zip(names, defaults, strict=True))
    # WHEN they are compared
    parameters = template()["Parameters"]
    # THEN every parameter is documented once, with the template's default, and nothing else
    assert sorted(documented) == sorted(parameters)
    for name, parameter in parameters.items():
        default = parameter.get("Default", "")
        expected = str(default).lower() if isinstance(default, bool) else str(default)
        assert documented[name] == expected, name


def test_deploy_md_and_troubleshooting_name_every_alarm_of_the_template() -> None:
    # GIVEN the template's alarms
    names = alarm_names()
    # WHEN deploy.md's operations table and troubleshooting.md are read
    operations = table_rows(
        section(read(DOCS / "deploy.md"), "## 5. Operations"), "| Alarm | What it means |"
    )
    in_operations = {name for row in operations for name in ticked(row[0])}
    troubleshooting = read(DOCS / "troubleshooting.md")
    # THEN each names exactly the template's alarms
    assert in_operations == names
    assert {name for name in names if f"`{name}`" in troubleshooting} == names


def test_deploy_md_counts_queues_alarms_alarm_metrics_and_functions_as_the_template_does() -> None:
    # GIVEN the template's queues, alarms and functions
    alarms = resources("AWS::CloudWatch::Alarm").values()
    queue_depth = [
        alarm
        for alarm in alarms
        if alarm["Properties"].get("MetricName") == "ApproximateNumberOfMessagesVisible"
    ]
    metrics = sum(
        1
        if "MetricName" in alarm["Properties"]
        else sum("MetricStat" in metric for metric in alarm["Properties"]["Metrics"])
        for alarm in alarms
    )
    queues = len(resources("AWS::SQS::Queue"))
    functions = len(resources("AWS::Serverless::Function"))
    deploy, readme = words(DOCS / "deploy.md"), words(README)
    # WHEN the counts deploy.md and the README state are looked for
    # THEN each is the template's
    assert f"each of the {NUMBER_WORDS[len(queue_depth)]} failure queues" in deploy
    assert f"summed over the {NUMBER_WORDS[functions]} functions: {len(alarms)} alarms." in deploy
    assert f"{metrics} alarm metrics ({len(alarms)} alarms;" in deploy
    assert f"\u00d7 $0.10 = ${metrics * ALARM_METRIC_PRICE:.2f} a month" in deploy  # x: times
    assert f"All {NUMBER_WORDS[queues]} queues" in deploy
    assert f"The {NUMBER_WORDS[functions]} functions run" in deploy
    assert f"the {NUMBER_WORDS[functions]} functions" in readme


# ------------------------------------------------------------------ demo → README, local.md


def test_readme_and_local_md_give_the_demo_s_default_counts() -> None:
    # GIVEN the scenario `make demo` runs: the demo command's own defaults
    defaults = {
        name: parameter.default
        for name, parameter in inspect.signature(demo).parameters.items()
        if name in {"parents", "dependencies", "seed", "join_members"}
    }
    if defaults["join_members"] is None:  # the command leaves it to the scenario (200)
        defaults["join_members"] = (
            inspect.signature(build_scenario).parameters["join_members"].default
        )
    scenario = build_scenario(**defaults)
    parents, dependencies = len(scenario.parents), len(scenario.dependencies)
    readme, local = words(README), words(DOCS / "local.md")
    # WHEN the README and local.md describe it
    # THEN they give the counts the demo prints ("N parents, M dependencies")
    assert f"{parents} parents on {dependencies} dependencies (by default)" in readme
    assert f"all-of join over {defaults['join_members']} members" in readme
    assert f"(defaults: {parents} parents, {dependencies} dependencies)" in local
    # AND the same measured wall time and date
    (readme_time,) = re.findall(r"(\d+ s) on (\d{4}-\d\d-\d\d)", readme)
    (local_time,) = re.findall(r"(\d+ s) wall time on (\d{4}-\d\d-\d\d)", local)
    assert readme_time == local_time
    # AND the words around it agree with the figure ("about half a minute": 20 to 45 s)
    seconds = int(readme_time[0].split()[0])
    if "about half a minute" in readme:
        assert 20 <= seconds <= 45, readme_time


def test_the_readme_names_each_outcome_the_demo_checks_and_whose_it_is() -> None:
    # GIVEN the outcomes the demo holds its parents to, and the refusal it holds the
    # cycle's dependency to (DependencyCycle on the dependency, not on the parent)
    scenario = build_scenario(parents=0, dependencies=1, join_members=0)
    expected = {p.expected_error for p in scenario.parents if p.expected_error}
    cycle = next(p for p in scenario.parents if any(d.waits_for for d in p.dependencies))
    readme = words(README)
    shows = readme[readme.index("What `make demo` shows") :].split(" Options:")[0]
    # WHEN the README says what `make demo` shows
    named = set(re.findall(r"`((?:Dependency|Quorum)[A-Za-z]+)`", shows))
    # THEN it names every outcome a parent ends with, and no other but the cycle's refusal
    assert named == expected | {"DependencyCycle"}
    # AND it says the cycle's parent ends with its own outcome, not the dependency's
    assert f"the parent gets `{cycle.expected_error}`" in shows
    assert "DependencyCycle" not in {p.expected_error for p in scenario.parents}
    # AND so does the demo's own row for it
    assert "the dependency fails" in cycle.story


# ---------------------------------------------------------------------------- links and layout


def test_readme_links_every_doc() -> None:
    readme = read(README)
    missing = [p.name for p in DOCS.glob("*.md") if f"](docs/{p.name})" not in readme]
    assert missing == []


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: p.name)
def test_relative_links_point_at_files_that_exist(path: Path) -> None:
    targets = [match["target"] for match in _LINK.finditer(read(path))]
    local = [t.split("#")[0] for t in targets if not re.match(r"[a-z]+:|#", t)]
    broken = [target for target in local if not (path.parent / target).exists()]
    assert broken == []


# ---------------------------------------------------------------------------- code blocks


def every_block(*langs: str) -> list[Block]:
    return [block for path in markdown_files() for block in blocks(path) if block.lang in langs]


@pytest.mark.parametrize("block", every_block("python"), ids=lambda b: b.where)
def test_python_blocks_compile(block: Block) -> None:
    compile(block.body, block.where, "exec")


def example_json() -> list[Block]:
    """JSON blocks that are examples: schematic ones (with placeholders) are left out."""
    return [b for b in every_block("json") if not any(m in b.body for m in _SCHEMATIC)]


@pytest.mark.parametrize("block", example_json(), ids=lambda b: b.where)
def test_json_blocks_that_are_examples_parse(block: Block) -> None:
    json.loads(block.body)


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_shell_blocks_pass_bash_syntax_check() -> None:
    # One bash for all blocks: each becomes a function body, so a syntax error names its block.
    shell = every_block("sh", "bash")
    script = "\n".join(f"block_{n}() {{\n{block.body}\n:\n}}" for n, block in enumerate(shell))
    checked = subprocess.run(
        ["bash", "-n"],  # noqa: S607
        input=script,
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    assert checked.returncode == 0, checked.stderr


def test_every_cli_command_line_in_the_docs_parses() -> None:
    # GIVEN every `dependency-tracker ...` line of README and docs (shell and terminal blocks)
    lines = [
        (block.where, args)
        for block in every_block("sh", "bash", "text", "")
        for args in cli_invocations(block.body, prompted_only=block.lang in {"text", ""})
    ]
    assert len(lines) > 10
    # WHEN each is parsed by the real CLI (with --help: nothing runs)
    failures = [
        (where, args, result.output.strip().splitlines()[-2:])
        for where, args in lines
        if (result := CliRunner().invoke(app, [*args, "--help"])).exit_code != 0
    ]
    # THEN every command and option named exists
    assert failures == []


def heredocs(block: Block) -> dict[str, str]:
    """``cat > NAME <<'EOF' ... EOF`` bodies of a shell block, by file name."""
    pattern = r"cat > (\S+) <<'EOF'\n(.*?)\nEOF\n"
    return dict(re.findall(pattern, block.body, re.DOTALL))


def test_the_deploy_guide_s_files_are_valid_messages_with_the_ids_it_states() -> None:
    # GIVEN the files the deploy guide writes with heredocs
    files: dict[str, str] = {}
    for block in blocks(DOCS / "deploy.md"):
        files.update(heredocs(block))
    deploy = read(DOCS / "deploy.md")
    # WHEN the payload and the parent's input are read as the tracker reads them
    tile = read_message(files["tile-1.json"])
    assert isinstance(tile, ProcessMessage)
    parent = json.loads(files["parent.json"])
    # THEN the payload is valid with the id the guide names, and so is each dependency
    assert f"its payload id is {tile.payload_id}" in deploy
    assert f'{{"payload_id": {{"S": "{tile.payload_id}"}}}}' in deploy
    ids = [ProcessPayload.model_validate(d).id for d in parent["dependencies"]]
    assert ids == ["demo/workflow-simulate/tile-2", "demo/workflow-simulate/tile-3"]


def test_architecture_s_success_output_is_a_valid_callback_output() -> None:
    # GIVEN the single-wait success output architecture.md shows
    (block,) = [
        b
        for b in blocks(DOCS / "architecture.md")
        if b.lang == "json" and '"replayed"' in b.body and '"result"' in b.body
    ]
    shown = json.loads(block.body)
    # WHEN it is read as the callback flow writes it
    output = CallbackSuccess.model_validate(shown)
    # THEN every field survives, and its result's items are what the tracker derives
    assert json.loads(output.to_json()) == shown
    assert output.result is not None
    assert output.result["items"] == result_items(output.result["output"])


# ------------------------------------------------------------------ troubleshooting, versions


def test_troubleshooting_covers_every_error_name_and_every_stuck_reason() -> None:
    # GIVEN the error names a parent can catch, and the reasons `stuck` gives (each state)
    text = read(DOCS / "troubleshooting.md")
    reasons = set()
    # (each row state, each dependency state, and the answer refused by Step Functions or not)
    for edge_state, refused in itertools.product(PayloadState, (None, "AccessDeniedException")):
        for dependency_state in [None, *PayloadState]:
            hold = Hold(
                dependency=SimpleNamespace(state=dependency_state),  # type: ignore[arg-type]
                edge=SimpleNamespace(state=edge_state, refused=refused),  # type: ignore[arg-type]
            )
            reason = hold.reason
            for state in PayloadState:  # "<STATE>" stands for any state
                reason = reason.replace(str(state), "<STATE>")
            reasons.add(reason)
    # WHEN troubleshooting.md is read
    # THEN each has a row
    assert {name for name in DependencyError if f"`{name}`" in text} == set(DependencyError)
    assert {reason for reason in reasons if f"`{reason}`" in text} == reasons


def test_versioning_states_the_ranges_of_pyproject_and_the_tested_versions() -> None:
    # GIVEN pyproject.toml's ranges and constraints.txt's pins
    pyproject = tomllib.loads(read(ROOT / "pyproject.toml"))["project"]
    pins = dict(
        line.split("==")
        for line in read(ROOT / "constraints.txt").splitlines()
        if "==" in line and not line.startswith("#")
    )
    pythons = [c.rsplit(":: ", 1)[1] for c in pyproject["classifiers"] if "Python :: 3." in c]
    text = words(DOCS / "versioning.md")
    # WHEN versioning.md is read
    # THEN its Python range, lower bounds and tested versions are the project's
    assert f'`requires-python = "{pyproject["requires-python"]}"`' in text
    assert f"{', '.join(pythons[:-1])} and {pythons[-1]}" in text
    assert f"`python{read(ROOT / 'template.yaml').split('Runtime: python')[1].split()[0]}`" in text
    requirements = " ".join(pyproject["dependencies"])
    assert "boto3>=1.40" in requirements
    assert "| boto3 / botocore | ≥ 1.40 (`pyproject.toml`) |" in text
    for package in ("boto3", "pydantic", "moto"):
        assert f"| {pins[package]} |" in text, package
    assert f"| {pins['aws_lambda_powertools']} |" in text
    assert f"Typer {pins['typer']}, Rich {pins['rich']}" in text
    cirrus = read(ROOT / "constraints-cirrus.txt")
    assert "cirrus-geo==2.0.0" in cirrus
    assert "| cirrus-geo | **2.0.0, in cirrus mode**" in text
