"""Deterministic execution names."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from dependency_tracker.core import naming


@given(payload_id=st.text(min_size=1, max_size=600), attempt=st.integers(1, 10**6))
def test_names_are_valid_and_reversible(payload_id: str, attempt: int) -> None:
    name = naming.execution_name(payload_id, attempt)
    assert len(name) <= naming.MAX_NAME_LENGTH
    assert re.fullmatch(r"[A-Za-z0-9_-]+", name)
    assert naming.execution_name(payload_id, attempt) == name
    assert naming.attempt_of(name, payload_id) == attempt


def test_attempts_and_ids_give_different_names() -> None:
    assert naming.execution_name("a/b", 1) != naming.execution_name("a/b", 2)
    assert naming.execution_name("a/b", 1) != naming.execution_name("a_b", 1)


def test_foreign_names_have_no_attempt() -> None:
    assert naming.attempt_of("manual-run", "a/b") is None
    assert naming.attempt_of("manual-run-3", "a/b") is None
    other = naming.execution_name("other", 3)
    assert naming.attempt_of(other, "a/b") is None


def test_execution_arn_from_state_machine_arn() -> None:
    arn = "arn:aws:states:us-east-1:123456789012:stateMachine:deptrack-w"
    assert naming.execution_arn(arn, "n-1") == (
        "arn:aws:states:us-east-1:123456789012:execution:deptrack-w:n-1"
    )


def test_the_embedded_stack_keeps_its_first_name_and_leaves_localstacks_port() -> None:
    # GIVEN the embedded stack's own name and the name the public contract gives it
    import dependency_tracker_local as local  # noqa: PLC0415 (the local extra)
    from dependency_tracker_cli.commands import serve  # noqa: PLC0415 (the cli extra)

    # THEN both name one class, and serve does not listen on the LocalStack product's port
    assert local.LocalStack is local.EmbeddedStack
    assert serve.DEFAULT_PORT != 4566
    assert not 4510 <= serve.DEFAULT_PORT <= 4559
