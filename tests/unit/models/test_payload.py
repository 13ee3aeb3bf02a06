"""Payload ids (the cirrus rule) and payload validation."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from dependency_tracker.models import ProcessPayload
from tests.conftest import load_fixture


def feature(item_id: str, collection: str | None = None) -> dict[str, object]:
    body: dict[str, object] = {"type": "Feature", "id": item_id}
    if collection is not None:
        body["collection"] = collection
    return body


@pytest.mark.parametrize(
    ("features", "process", "expected"),
    [
        pytest.param([feature("a", "c1")], {"workflow": "w"}, "c1/workflow-w/a", id="one-feature"),
        pytest.param(
            [feature("b", "c1"), feature("a", "c1")],
            {"workflow": "w"},
            "c1/workflow-w/a/b",
            id="items-sorted",
        ),
        pytest.param(
            [feature("a", "c2"), feature("b", "c1"), feature("c", "c2")],
            {"workflow": "w"},
            "c1/c2/workflow-w/a/b/c",
            id="collections-sorted-unique",
        ),
        pytest.param(
            [feature("a", "c1")],
            {"workflow": "w", "collections": ["z", "y"]},
            "z/y/workflow-w/a",
            id="collections-override-kept-in-order",
        ),
        pytest.param(
            [feature("a", "c1")],
            {"workflow": "w", "collections": "only"},
            "only/workflow-w/a",
            id="collections-override-string",
        ),
        pytest.param([feature("a")], {"workflow": "w"}, "none/workflow-w/a", id="no-collection"),
    ],
)
def test_payload_id_follows_cirrus_rule(
    features: list[dict[str, object]], process: dict[str, object], expected: str
) -> None:
    # GIVEN a payload without id  WHEN it is validated  THEN the id follows the cirrus rule
    model = ProcessPayload.model_validate({"features": features, "process": [process]})
    assert model.id == expected


def test_legacy_process_object_is_normalized_to_a_list() -> None:
    model = ProcessPayload.model_validate(
        {"features": [feature("a", "c")], "process": {"workflow": "w", "replace": True}}
    )
    assert len(model.process) == 1
    assert model.workflow == "w"
    assert model.replace is True
    assert model.id == "c/workflow-w/a"


def test_explicit_id_is_kept_as_is() -> None:
    model = ProcessPayload.model_validate(
        {"id": "My Id/with spaces", "features": [feature("a", "c")], "process": [{"workflow": "w"}]}
    )
    assert model.id == "My Id/with spaces"


def test_explicit_id_without_features_is_valid() -> None:
    model = ProcessPayload.model_validate({"id": "x", "process": [{"workflow": "w"}]})
    assert model.id == "x"
    assert model.features == []


def test_real_cirrus_payload_keeps_unknown_fields() -> None:
    # GIVEN a cirrus payload with STAC fields and extra process options
    raw = load_fixture("sentinel2_two_items.json")
    model = ProcessPayload.model_validate(raw)
    # THEN the id is derived, and nothing the child needs is lost in the execution input
    assert model.id == (
        "sentinel-2-l2a/workflow-cog-archive/S2A_10SEG_20251231_0_L2A/S2B_10SEG_20260101_0_L2A"
    )
    dumped = model.model_dump(mode="json", exclude_none=True)
    assert dumped["features"][0]["properties"]["eo:cloud_cover"] == 12.5
    assert dumped["features"][0]["assets"]["visual"]["href"].startswith("s3://")
    assert dumped["process"][0]["experimental_flag"] is True
    assert dumped["process"][0]["upload_options"]["public_assets"] == "ALL"
    assert dumped["id"] == model.id


def test_execution_input_is_canonical() -> None:
    one = ProcessPayload.model_validate(
        {
            "features": [{"id": "a", "collection": "c", "z": 1, "b": 2}],
            "process": [{"workflow": "w"}],
        }
    )
    two = ProcessPayload.model_validate(
        {
            "process": [{"workflow": "w"}],
            "features": [{"b": 2, "z": 1, "collection": "c", "id": "a"}],
        }
    )
    assert one.execution_input() == two.execution_input()


@pytest.mark.parametrize(
    ("raw", "match"),
    [
        pytest.param({"process": [{"workflow": "w"}]}, "needs an 'id'", id="no-features-no-id"),
        pytest.param({"features": [], "process": [{"workflow": "w"}]}, "needs an 'id'", id="empty"),
        pytest.param({"features": [feature("a")]}, "process", id="no-process"),
        pytest.param({"features": [feature("a")], "process": []}, "process", id="empty-process"),
        pytest.param({"features": [feature("a")], "process": [{}]}, "workflow", id="no-workflow"),
        pytest.param(
            {"features": [feature("a")], "process": [{"workflow": "has space"}]},
            "workflow",
            id="workflow-not-a-state-machine-name",
        ),
        pytest.param(
            {"features": [{"collection": "c"}], "process": [{"workflow": "w"}]},
            "id",
            id="feature-without-id",
        ),
        pytest.param({"features": "nope", "process": [{"workflow": "w"}]}, "features", id="types"),
    ],
)
def test_invalid_payloads_have_clear_errors(raw: dict[str, object], match: str) -> None:
    with pytest.raises(ValidationError, match=match):
        ProcessPayload.model_validate(raw)


def keyed(key: str, **properties: object) -> dict[str, object]:
    return {
        "features": [{"id": "a", "collection": "c", "properties": properties}],
        "process": [{"workflow": "w", "idempotency_key": key}],
    }


def test_idempotency_key_selects_what_makes_two_payloads_the_same() -> None:
    # GIVEN two payloads that differ only outside the key
    one = ProcessPayload.model_validate(keyed("features[0].properties.scene", scene="S1", x=1))
    two = ProcessPayload.model_validate(keyed("features[0].properties.scene", scene="S1", x=2))
    other = ProcessPayload.model_validate(keyed("features[0].properties.scene", scene="S2"))
    # THEN they share an id, namespaced by workflow; a different key value does not
    assert one.id == two.id
    assert one.id.startswith("workflow-w/key-")
    assert len(one.id) == len("workflow-w/key-") + 64
    assert other.id != one.id


def test_idempotency_key_hashes_canonical_json() -> None:
    one = ProcessPayload.model_validate(keyed("features[0].properties", b=1, a={"y": 2, "x": 1}))
    two = ProcessPayload.model_validate(keyed("features[0].properties", a={"x": 1, "y": 2}, b=1))
    assert one.id == two.id


@pytest.mark.parametrize(
    ("key", "match"),
    [
        ("features[0].properties.missing", "selects nothing"),
        ("features[?", "not a valid JMESPath"),
    ],
)
def test_idempotency_key_errors_are_clear(key: str, match: str) -> None:
    with pytest.raises(ValidationError, match=match):
        ProcessPayload.model_validate(keyed(key, scene="S1"))


def test_explicit_id_beats_the_idempotency_key() -> None:
    body = keyed("features[0].id")
    body["id"] = "given"
    assert ProcessPayload.model_validate(body).id == "given"
