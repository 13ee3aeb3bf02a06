"""The next step of a chained payload."""

from __future__ import annotations

import json

import pytest

from dependency_tracker.payloads.chaining import ChainError, next_payload
from dependency_tracker.payloads.model import ProcessPayload


def chained(*workflows: str, chain_filter: str | None = None) -> ProcessPayload:
    steps: list[dict[str, object]] = [{"workflow": w} for w in workflows]
    if chain_filter:
        steps[0]["chain_filter"] = chain_filter
    return ProcessPayload.model_validate(
        {
            "features": [
                {"id": "a", "collection": "c", "properties": {"cloud": 5}},
                {"id": "b", "collection": "c", "properties": {"cloud": 50}},
            ],
            "process": steps,
        }
    )


def test_last_step_has_no_next() -> None:
    assert next_payload(chained("one"), None) is None


def test_next_step_takes_the_output_features_and_shifts_process() -> None:
    output = {"id": "ignored", "features": [{"id": "a2", "collection": "c2"}], "process": []}
    body = next_payload(chained("one", "two", "three"), json.dumps(output))
    assert body is not None
    assert body["features"] == [{"id": "a2", "collection": "c2"}]
    assert [step["workflow"] for step in body["process"]] == ["two", "three"]
    assert "id" not in body
    assert ProcessPayload.model_validate(body).id == "c2/workflow-two/a2"


def test_output_that_is_not_a_payload_passes_the_input_features_on() -> None:
    body = next_payload(chained("one", "two"), json.dumps({"status": "done"}))
    assert body is not None
    assert [f["id"] for f in body["features"]] == ["a", "b"]


def test_chain_filter_selects_features() -> None:
    payload = chained("one", "two", chain_filter="$.features[?(@.properties.cloud < 10)]")
    body = next_payload(payload, None)
    assert body is not None
    assert [f["id"] for f in body["features"]] == ["a"]


def test_chain_filter_selecting_nothing_stops_the_chain() -> None:
    payload = chained("one", "two", chain_filter="$.features[?(@.properties.cloud > 99)]")
    assert next_payload(payload, None) is None


def test_bad_chain_filter_is_a_clear_error() -> None:
    with pytest.raises(ChainError, match="not valid JSONPath"):
        next_payload(chained("one", "two", chain_filter="$.features[?("), None)
