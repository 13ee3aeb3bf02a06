"""The names docs/versioning.md promises import where it says they do.

The runtime, local mode and the CLI are three packages now; these are the addresses a
program outside the repository uses, so they must not move with the code.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import subprocess
import sys

import pytest

import dependency_tracker_local
from dependency_tracker_cli.__main__ import main


def test_the_embedded_stack_imports_from_its_documented_place() -> None:
    from dependency_tracker.local import EmbeddedStack, LocalStack  # noqa: PLC0415

    assert EmbeddedStack is dependency_tracker_local.EmbeddedStack
    assert LocalStack is EmbeddedStack


def test_an_unknown_name_of_the_alias_is_an_attribute_error() -> None:
    local = importlib.import_module("dependency_tracker.local")
    with pytest.raises(AttributeError, match="NoSuchThing"):
        local.NoSuchThing  # noqa: B018


def test_the_payload_model_and_the_version_import_from_their_documented_places() -> None:
    from dependency_tracker import __version__  # noqa: PLC0415
    from dependency_tracker.models import ProcessPayload  # noqa: PLC0415

    payload = ProcessPayload.model_validate(
        {"features": [{"id": "a", "collection": "c"}], "process": [{"workflow": "w"}]}
    )
    assert payload.id == "c/workflow-w/a"
    assert __version__


def test_the_command_is_the_cli() -> None:
    (script,) = importlib.metadata.entry_points(group="console_scripts", name="dependency-tracker")
    assert script.load() is main


def test_the_runtime_imports_without_local_mode_or_the_cli() -> None:
    # GIVEN a fresh interpreter WHEN every handler and the alias module are imported
    code = (
        "import sys, dependency_tracker.local, dependency_tracker.models\n"
        "import dependency_tracker.handlers.process, dependency_tracker.handlers.callback\n"
        "import dependency_tracker.handlers.update_state, dependency_tracker.handlers.sweeper\n"
        "import dependency_tracker.handlers.cirrus_events\n"
        "print(sorted(m for m in sys.modules if m.startswith(('dependency_tracker_', 'moto'))))"
    )
    out = subprocess.run(  # noqa: S603  (this interpreter, our own code)
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout
    # THEN neither local mode, the CLI nor moto was loaded
    assert out.strip() == "[]"


def test_the_results_manifest_reader_imports_from_its_documented_place() -> None:
    # GIVEN the names versioning.md promises for a join's results manifest
    from dependency_tracker import MemberResult, read_results  # noqa: PLC0415
    from dependency_tracker.joins import results  # noqa: PLC0415

    # THEN they are the reader and its line model
    assert read_results is results.read_results
    assert MemberResult is results.MemberResult
    assert MemberResult(payload_id="p").state is None
