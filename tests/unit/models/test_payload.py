"""Payload ids (the cirrus rule) and payload validation."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from dependency_tracker.core.enums import PayloadState
from dependency_tracker.core.errors import InvalidMessageError
from dependency_tracker.payloads.model import (
    MAX_PAYLOAD_DEPTH,
    Feature,
    ProcessDefinition,
    ProcessPayload,
)
from tests.conftest import load_fixture

LONE = "\ud800"  # half a surrogate pair: JSON can escape it, UTF-8 cannot encode it


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


def nested(levels: int) -> Any:
    """A value that, put under a payload's key, makes the payload ``levels`` deep."""
    value: Any = "leaf"
    for _ in range(levels - 1):
        value = {"a": value}
    return value


def valid(**fields: Any) -> dict[str, Any]:
    return {"features": [feature("a", "c")], "process": [{"workflow": "w"}], **fields}


@pytest.mark.parametrize(
    ("raw", "where"),
    [
        pytest.param(valid(id=f"sx/{LONE}"), "id", id="payload-id"),
        pytest.param(
            {"features": [feature(f"a{LONE}", "c")], "process": [{"workflow": "w"}]},
            "features[0].id",
            id="feature-id-the-id-derives-from",
        ),
        pytest.param(
            {"features": [feature("a", LONE)], "process": [{"workflow": "w"}]},
            "features[0].collection",
            id="feature-collection",
        ),
        pytest.param(
            {"features": [feature("a")], "process": [{"workflow": "w", "collections": [LONE]}]},
            "process[0].collections[0]",
            id="collections-override",
        ),
        pytest.param(
            valid(properties={"title": f"caf{LONE}"}), "properties.title", id="a-property-value"
        ),
        pytest.param(valid(properties={LONE: 1}), "key properties.\\ud800", id="a-property-key"),
    ],
)
def test_a_lone_surrogate_anywhere_is_refused_naming_where(raw: dict[str, Any], where: str) -> None:
    with pytest.raises(ValidationError) as caught:
        ProcessPayload.model_validate(raw)
    message = str(caught.value)
    assert f"{where} is not encodable as UTF-8 (lone surrogate '\\ud800'" in message
    message.encode("utf-8")  # the reason itself can be stored and logged


def test_a_feature_alone_refuses_a_lone_surrogate_in_its_collection() -> None:
    with pytest.raises(ValidationError, match="collection\n  Value error, not encodable as UTF-8"):
        Feature.model_validate({"id": "a", "collection": LONE})


@pytest.mark.parametrize("levels", [MAX_PAYLOAD_DEPTH + 1, 400])
def test_a_payload_deeper_than_the_maximum_is_refused_naming_the_field(levels: int) -> None:
    # GIVEN the deepest payload there may be: it is read and serialised
    deepest = ProcessPayload.model_validate(valid(properties=nested(MAX_PAYLOAD_DEPTH)))
    # (its levels, plus the objects in features and process beside them)
    assert deepest.execution_input().count("{") == MAX_PAYLOAD_DEPTH + 2
    # THEN one level more is refused, naming the field
    with pytest.raises(
        ValidationError,
        match=f"properties nests objects and arrays deeper than the {MAX_PAYLOAD_DEPTH} levels",
    ):
        ProcessPayload.model_validate(valid(properties=nested(levels)))


def test_a_payload_too_deep_to_serialise_is_invalid_not_retryable() -> None:
    # GIVEN a payload built without validation, too deep for the serializer
    unchecked = ProcessPayload.model_construct(
        id="c/workflow-w/a", process=[ProcessDefinition(workflow="w")], properties=nested(400)
    )
    # THEN serialising it says so, as an invalid message, never as an error to retry
    with pytest.raises(InvalidMessageError, match="cannot be serialised") as caught:
        unchecked.execution_input()
    assert (caught.value.retryable, caught.value.payload_id) == (False, "c/workflow-w/a")


@pytest.mark.parametrize("value", ["yes", "true", 1, 0])
def test_replace_is_a_boolean_and_nothing_else(value: object) -> None:
    with pytest.raises(
        ValidationError, match=r"process\.0\.replace\n  Input should be a valid boolean"
    ):
        ProcessPayload.model_validate(valid(process=[{"workflow": "w", "replace": value}]))
    # AND the booleans are read
    for given in (True, False):
        body = valid(process=[{"workflow": "w", "replace": given}])
        assert ProcessPayload.model_validate(body).replace is given


def test_replace_if_names_a_finished_state_and_an_attempt_and_needs_replace() -> None:
    step = {"workflow": "w", "replace": True, "replace_if": {"state": "FAILED", "attempt": 1}}
    model = ProcessPayload.model_validate(valid(process=[step]))
    assert model.replace_if is not None
    assert (model.replace_if.state, model.replace_if.attempt) == (PayloadState.FAILED, 1)
    assert model.replace_if.holds(PayloadState.FAILED, 1)
    assert not model.replace_if.holds(PayloadState.SUCCEEDED, 2)
    assert not model.replace_if.holds(PayloadState.FAILED, 2)
    for bad, where in (
        ({"state": "PROCESSING"}, r"replace_if\.state\n  Value error, a rerun replaces"),
        ({"state": "FAILED", "attempt": "1"}, r"replace_if\.attempt\n  Input should be"),
        ({"state": "FAILED", "seen": 1}, r"replace_if\.seen\n  Extra inputs"),
    ):
        with pytest.raises(ValidationError, match=where):
            ProcessPayload.model_validate(valid(process=[step | {"replace_if": bad}]))
    with pytest.raises(ValidationError, match="replace_if applies to a rerun"):
        ProcessPayload.model_validate(valid(process=[step | {"replace": False}]))
