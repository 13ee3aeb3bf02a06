"""State machine definitions: valid JSON, known placeholders, substitution."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dependency_tracker import definitions
from dependency_tracker.errors import ConfigurationError

VALUES = dict.fromkeys(definitions.SUBSTITUTION_KEYS, "1") | {
    "ProcessQueueUrl": "https://sqs.us-east-1.amazonaws.com/123456789012/q"
}


def test_every_definition_is_discovered_from_the_package() -> None:
    found = definitions.discover()
    assert {"wait-for-dependencies", "simulate"} <= set(found)
    repo = Path(__file__).parents[2] / "stepfunctions"
    assert sorted(path.name for path in found.values()) == sorted(
        path.name for path in repo.glob("*.asl.json")
    )


@pytest.mark.parametrize("name", sorted(definitions.discover()))
def test_definitions_use_only_known_placeholders_and_render_to_asl(name: str) -> None:
    path = definitions.discover()[name]
    text = path.read_text()
    assert definitions.placeholders(text) <= definitions.SUBSTITUTION_KEYS
    rendered = json.loads(definitions.render(path, VALUES))
    assert rendered["StartAt"] in rendered["States"]
    assert "${" not in json.dumps(rendered)


@pytest.mark.parametrize("name", sorted(definitions.discover()))
def test_no_custom_error_name_is_reserved(name: str) -> None:
    rendered = json.loads(definitions.render(definitions.discover()[name], VALUES))

    def fail_errors(states: dict[str, dict[str, object]]) -> list[str]:
        found = []
        for state in states.values():
            if state.get("Type") == "Fail" and isinstance(state.get("Error"), str):
                found.append(str(state["Error"]))
            processor = state.get("ItemProcessor") or state.get("Iterator")
            if isinstance(processor, dict):
                found.extend(fail_errors(processor["States"]))
        return found

    assert not [error for error in fail_errors(rendered["States"]) if error.startswith("States.")]


def test_missing_substitution_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "x.asl.json"
    path.write_text('{"Comment": "${Nope}"}')
    with pytest.raises(ConfigurationError, match=r"\$\{Nope\}"):
        definitions.render(path, VALUES)
