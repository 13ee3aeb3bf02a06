"""``workflow_of``: the workflow a payload id names, by the runtime's own id rule."""

from __future__ import annotations

import pytest

from dependency_tracker.payloads.model import keyed_payload_id
from dependency_tracker_cli.readmodel.view import workflow_of


@pytest.mark.parametrize(
    ("payload_id", "workflow"),
    [
        ("s2/workflow-cog/a", "cog"),
        ("s2/l8/workflow-cog/a/b", "cog"),
        (keyed_payload_id({"x": 1}, "x", "cog"), "cog"),
        # No {collections}, and not an idempotency key's: cirrus's rule names no workflow.
        ("workflow-cog/a", None),
        ("/workflow-cog/a", None),
        ("s2/workflow-cog/", None),
        ("workflow-cog/", None),
        ("s2/xworkflow-cog/a", None),
        ("plain-id", None),
    ],
)
def test_an_id_names_a_workflow_only_by_cirrus_s_rule_or_as_a_keyed_id(
    payload_id: str, workflow: str | None
) -> None:
    # GIVEN an id, WHEN its workflow is read, THEN only a rule the tracker makes ids by names it
    assert workflow_of(payload_id) == workflow
