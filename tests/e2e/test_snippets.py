"""Every fenced code block of README.md, docs/ and examples/ runs as written, or says why not.

A block is treated by its language, or by the ``<!-- snippet: KIND -->`` comment on the line
right before its fence:

* ``python``: run in a subprocess, from a working directory of its page; one that starts the
  stack in cirrus mode (``cirrus=True``) needs cirrus-geo, and the cirrus tier runs it
  (``tests/cirrus/test_snippets_cirrus.py``, in ``.venv-cirrus``);
* ``sh``: run with bash against one ``dependency-tracker serve`` for the module, in the page's
  shell session (its working directory, and the variables its earlier blocks exported), the way
  a reader follows the page; examples/README.md continues README.md's session, as it says;
* ``mermaid``: a diagram, its header checked;
* ``states``: ASL states to paste, created as a state machine on ``serve`` (placeholders filled,
  a stub for each state they name and leave to the reader) and run to success and to failure;
* ``message``: one or more JSON process-queue messages, each read by the tracker's parser;
* ``synopsis``: a command's synopsis, every ``--option`` of it in the command's ``--help``;
* ``output``: what a command prints; after a Python block, the end of what that block printed;
* ``not-run (why)``: not run, for the reason given (an AWS account, a long-running demo, ...).

Any other block fails the test: a new snippet either runs or says why not.

A reader's ``serve`` listens on 127.0.0.1:4600 and writes /tmp/dependency-tracker-serve.json;
the test's ``serve`` has a free port and a file of its own, so the blocks run with those two
replaced (and any other ``/tmp/`` path moved into the page's working directory).
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from typer.testing import CliRunner

from dependency_tracker.intake.parse import read_message
from dependency_tracker_cli.__main__ import app
from tests.conftest import wait_until
from tests.e2e.conftest import dependency
from tests.e2e.serving import Server, serving
from tests.unit.docs_blocks import ROOT, Block, blocks, snippet_files

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.e2e

BLOCKS = [block for path in snippet_files() for block in blocks(path)]
DIAGRAMS = ("flowchart", "graph", "sequenceDiagram", "stateDiagram-v2", "classDiagram")
MARKED = ("output", "states", "message", "synopsis")
# A Python block the cirrus tier runs (it needs cirrus-geo: Python >= 3.12, .venv-cirrus).
CIRRUS_PYTHON = "cirrus python"
# A page whose shell blocks continue another page's session (it says so).
CONTINUES = {"examples/README.md": "README.md"}
RUN_SECONDS = 240
ROLE_ARN = "arn:aws:iam::123456789012:role/snippet"


def kind(block: Block) -> str:
    """How the test treats ``block``: a marker's kind, else what its language implies."""
    if block.marker is not None:
        word = block.marker.split(" ", 1)[0]
        if word == "not-run":
            return word if re.fullmatch(r"not-run \(.+\)", block.marker) else "unexplained"
        return word if word in MARKED else "unknown marker"
    if block.lang == "python" and "cirrus=True" in block.body:
        return CIRRUS_PYTHON
    return {"python": "python", "sh": "shell", "mermaid": "diagram"}.get(block.lang, "unmarked")


def shown_after(block: Block) -> list[str] | None:
    """The lines of the output block right after ``block`` on its page, if there is one."""
    following = BLOCKS[BLOCKS.index(block) + 1 :]
    if following and following[0].path == block.path and kind(following[0]) == "output":
        return following[0].body.strip().splitlines()
    return None


def counts() -> Counter[str]:
    """Blocks by kind."""
    return Counter(kind(block) for block in BLOCKS)


def relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def of_kind(name: str) -> list[Any]:
    return [pytest.param(block, id=block.where) for block in BLOCKS if kind(block) == name]


def fresh_terminal(tmpdir: Path) -> dict[str, str]:
    """A reader's new terminal: nothing of AWS or the tracker set, temporary files in ``tmpdir``."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("AWS_", "DEPTRACK_", "MOTO_"))
    }
    # Never this machine's AWS profile: only what the page exports.
    env["AWS_CONFIG_FILE"] = env["AWS_SHARED_CREDENTIALS_FILE"] = os.devnull
    # What a page writes with mktemp stays with the test's files.
    env["TMPDIR"] = str(tmpdir)
    return env


# ---------------------------------------------------------------------------- the pages' sessions


@dataclass
class Session:
    """A reader's terminal for one page: a working directory and what was exported in it."""

    workdir: Path
    env_file: Path
    ran: set[str] = field(default_factory=set)


class Reader:
    """Runs blocks as a reader of the docs would, against the module's ``serve``."""

    def __init__(self, server: Server, root: Path) -> None:
        self.server = server
        self.root = root
        self.sessions: dict[str, Session] = {}

    def session(self, page: str) -> Session:
        """The page's session; a page that continues another first runs that one's blocks."""
        if page in CONTINUES:
            first = CONTINUES[page]
            for block in BLOCKS:
                same_page = relative(block.path) == first and kind(block) == "shell"
                if same_page and block.where not in self.session(first).ran:
                    self.run_shell(block)
            return self.session(first)
        if page not in self.sessions:
            workdir = self.root / page.replace("/", "_")
            workdir.mkdir()
            # The commands are written for a shell in the checkout.
            for name in (".venv", "examples"):
                (workdir / name).symlink_to(ROOT / name)
            env_file = workdir / ".env.sh"
            env_file.write_text("")
            self.sessions[page] = Session(workdir, env_file)
        return self.sessions[page]

    def environment(self) -> dict[str, str]:
        """A fresh terminal's (:func:`fresh_terminal`), the checkout's tools on PATH."""
        env = fresh_terminal(self.root)
        env["PATH"] = f"{ROOT / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        return env

    def as_run(self, text: str, workdir: Path) -> str:
        """``text`` with the reader's endpoint and files replaced by the test's."""
        replacements = {
            "http://127.0.0.1:4600": self.server.endpoint,
            "/tmp/dependency-tracker-serve.json": str(self.server.outputs_file),  # noqa: S108
            "/tmp/": f"{workdir}/",  # noqa: S108 - replaced, not used
        }
        pattern = "|".join(re.escape(old) for old in replacements)
        return re.sub(pattern, lambda match: replacements[match[0]], text)

    def run_shell(self, block: Block) -> subprocess.CompletedProcess[str]:
        """``block`` in its page's session, once; its exports are kept for the next blocks."""
        session = self.session(relative(block.path))
        # The terminal keeps what earlier blocks set (exported or not): the variables bash
        # did not start with are saved after each block and restored before the next.
        script = f"""__start=$(compgen -v | sort)
source {session.env_file}
cd {session.workdir}
# inherit_errexit: a failing command inside $(...) fails the block too.
set -eo pipefail
shopt -s inherit_errexit
{self.as_run(block.body, session.workdir)}
set +e
__set=$(comm -13 <(echo "$__start") <(compgen -v | sort) | grep -Ev '^(__|PIPESTATUS$|BASH)')
{{ export -p; [ -z "$__set" ] || declare -p $__set; }} > {session.env_file}
"""
        done = subprocess.run(  # noqa: S603 - our own docs, as a reader runs them
            ["bash", "-c", script],  # noqa: S607
            env=self.environment(),
            capture_output=True,
            text=True,
            timeout=RUN_SECONDS,
            check=False,
        )
        session.ran.add(block.where)
        assert done.returncode == 0, f"{block.where}: exit {done.returncode}\n{done.stderr}"
        return done

    def run_python(self, block: Block, python: Path) -> str:
        """``block`` in a subprocess from its page's working directory; what it printed."""
        session = self.session(relative(block.path))
        script = session.workdir / f"block_{block.line}.py"
        script.write_text(self.as_run(block.body, session.workdir))
        done = subprocess.run(  # noqa: S603 - our own docs, as a reader runs them
            [str(python), script.name],
            cwd=session.workdir,
            env=self.environment(),
            capture_output=True,
            text=True,
            timeout=RUN_SECONDS,
            check=False,
        )
        assert done.returncode == 0, f"{block.where}: exit {done.returncode}\n{done.stderr}"
        return done.stdout


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    # The snippets' parents are the test's own: deployed with them in ExtraParentStateMachineArns
    # (the IAM model answers their tokens only then, as AWS does).
    parents = "arn:aws:states:us-east-1:123456789012:stateMachine:snippet-*"
    own = {"ExtraParentStateMachineArns": parents}
    with pytest.MonkeyPatch.context() as env:
        env.setenv("DEPTRACK_STACK_PARAMETERS", json.dumps(own))
        with serving(tmp_path_factory.mktemp("serve")) as running:
            yield running


@pytest.fixture(scope="module")
def reader(server: Server, tmp_path_factory: pytest.TempPathFactory) -> Reader:
    return Reader(server, tmp_path_factory.mktemp("pages"))


# ---------------------------------------------------------------------------- every block


def test_every_block_runs_or_says_why_not() -> None:
    # GIVEN every fenced block of README.md, docs/ and examples/
    # WHEN each is classified
    found = counts()
    # THEN each is one this module runs or checks, or says why it is not run
    wrong = [
        f"{block.where} ({block.lang or 'no language'}, marker {block.marker!r})"
        for block in BLOCKS
        if kind(block) in {"unmarked", "unknown marker", "unexplained"}
    ]
    assert not wrong, "blocks neither run nor marked `<!-- snippet: not-run (why) -->`:\n" + (
        "\n".join(wrong)
    )
    # AND most blocks are run or checked, not waved through
    assert found["not-run"] < sum(found.values()) / 2, found


@pytest.mark.parametrize("block", of_kind("shell"))
def test_shell_block_runs_against_serve(reader: Reader, block: Block) -> None:
    # GIVEN the tools the block calls, and the page's earlier shell blocks run in its session
    for tool in ("aws", "jq"):
        if re.search(rf"(^|[\s(]){tool} ", block.body) and shutil.which(tool) is None:
            pytest.skip(f"needs {tool} on PATH")
    page = relative(block.path)
    for earlier in BLOCKS:
        if earlier is block:
            break
        same_page = relative(earlier.path) == page and kind(earlier) == "shell"
        if same_page and earlier.where not in reader.session(page).ran:
            reader.run_shell(earlier)
    # WHEN the block runs as written (bash, set -e) THEN every command succeeds
    if block.where not in reader.session(page).ran:
        reader.run_shell(block)


@pytest.mark.parametrize("block", of_kind("python"))
def test_python_block_runs_and_prints_what_the_page_shows(reader: Reader, block: Block) -> None:
    # GIVEN a Python block WHEN it runs as written
    printed = reader.run_python(block, Path(sys.executable))
    # THEN it exits 0, and an output block right after it shows the end of what it printed
    shown = shown_after(block)
    if shown is not None:
        assert printed.strip().splitlines()[-len(shown) :] == shown, printed


@pytest.mark.parametrize("block", of_kind("diagram"))
def test_diagram_block_names_a_mermaid_diagram(block: Block) -> None:
    assert block.body.split(maxsplit=1)[0] in DIAGRAMS, block.where


@pytest.mark.parametrize("block", of_kind("message"))
def test_message_block_is_read_by_the_tracker(block: Block) -> None:
    # GIVEN one or more JSON messages WHEN each is read as a process-queue body THEN it parses
    decoder, text, at = json.JSONDecoder(), block.body.strip(), 0
    while at < len(text):
        message, at = decoder.raw_decode(text, at)
        read_message(json.dumps(message))
        at = len(text) - len(text[at:].lstrip())


@pytest.mark.parametrize("block", of_kind("synopsis"))
def test_synopsis_names_only_options_the_command_has(block: Block) -> None:
    # GIVEN a synopsis `dependency-tracker COMMAND [--option ...]`
    command = block.body.split()[1]
    shown = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "250"})
    assert shown.exit_code == 0, shown.output
    # WHEN its options are read THEN the command's --help lists each one
    options = set(re.findall(r"--[a-z][a-z0-9-]*", block.body))
    assert options, block.where
    missing = {option for option in options if option not in shown.stdout}
    assert not missing, (block.where, missing)


def _substituted(states: dict[str, Any], server: Server) -> dict[str, Any]:
    text = json.dumps(states)
    for name, value in {
        "${ProcessQueueUrl}": server.outputs["ProcessQueueUrl"],
        "${Partition}": "aws",
        "${WaitForDependenciesStateMachineArn}": server.outputs["StateMachines"][
            "wait-for-dependencies"
        ],
    }.items():
        text = text.replace(name, value)
    pasted: dict[str, Any] = json.loads(text)
    return pasted


def _named(states: dict[str, Any]) -> set[str]:
    """Every state the pasted states go to (``Next``, ``Default``, a ``Catch``'s or choice's)."""
    names: set[str] = set()
    for state in states.values():
        names.update(
            target["Next"]
            for target in [state, *state.get("Catch", []), *state.get("Choices", [])]
            if "Next" in target
        )
        names.update([state["Default"]] if "Default" in state else [])
    return names


@pytest.mark.parametrize("block", of_kind("states"))
def test_pasted_states_run_on_the_stack(server: Server, block: Block) -> None:
    # GIVEN the states to paste, in a state machine with a stub for each state they leave to you
    pasted = _substituted(json.loads(block.body), server)
    stubs = {
        name: {"Type": "Pass", "Result": name, "ResultPath": "$.reached", "End": True}
        for name in _named(pasted) - set(pasted)
    }
    sfn = server.client("stepfunctions")
    machine = sfn.create_state_machine(
        name=f"snippet-{block.line}",
        roleArn=ROLE_ARN,
        definition=json.dumps({"StartAt": next(iter(pasted)), "States": {**pasted, **stubs}}),
    )["stateMachineArn"]
    # WHEN it waits on a tile that succeeds and on one that fails (no optional field given)
    runs = {
        outcome: sfn.start_execution(
            stateMachineArn=machine,
            name=f"snippet-{block.line}-{outcome}",
            input=json.dumps(
                {"tile": dependency(f"snippet-{block.line}-{outcome}", outcome=outcome)}
            ),
        )["executionArn"]
        for outcome in ("succeed", "fail")
    }

    def ended(arn: str) -> dict[str, Any] | None:
        described: dict[str, Any] = sfn.describe_execution(executionArn=arn)
        return None if described["status"] == "RUNNING" else described

    # THEN the first goes on to the next state, the second to the state of its error
    reached = {}
    for outcome, arn in runs.items():
        described = wait_until(functools.partial(ended, arn), timeout=60)
        assert described["status"] == "SUCCEEDED", described
        reached[outcome] = json.loads(described["output"])["reached"]
    assert reached == {"succeed": "HasItems", "fail": "DependencyFailed"}
