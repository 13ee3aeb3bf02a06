"""The closed set of process-queue message kinds, and which one a document is.

A message is about exactly one thing: a payload to run (or its ``{"url"}``), a wait on a
payload someone else runs, a join, a chunk of a join's registration, or a join's
cancellation (the tracker's own, when a join's parent is gone). :func:`kind_of` says
which, or refuses the document naming why; the models themselves are built by the feature
that owns the kind (``waits/messages.py``, ``joins/messages.py``).
"""

from __future__ import annotations

from enum import StrEnum, unique
from typing import Any

from dependency_tracker.core.enums import DependencyError
from dependency_tracker.core.errors import InvalidMessageError
from dependency_tracker.payloads.documents import id_of, join_token_of, lift_payload, token_of
from dependency_tracker.payloads.model import document_problem


@unique
class MessageKind(StrEnum):
    """What a message is about, by the key that says so."""

    PAYLOAD = "payload"
    JOIN = "join"
    WAIT = "wait_for"
    JOIN_CHUNK = "join_chunk"
    JOIN_CANCEL = "join_cancel"


# In the order the contract names them (a refusal lists them so).
MESSAGE_KINDS = tuple(kind.value for kind in MessageKind)


def kind_of(document: Any) -> MessageKind:
    """Which kind a decoded, SNS-unwrapped body is; anything not a JSON object is a payload.

    A join or join chunk says so at the top level; a wait may sit inside a ``payload``
    envelope (how a parent's Map sends one). Whatever is not one of them is a payload,
    left to the payload model to refuse.

    Raises:
        InvalidMessageError: The document carries more than one kind, or holds what AWS
            cannot carry (``InvalidJoin`` when a join is involved).
    """
    if not isinstance(document, dict):
        return MessageKind.PAYLOAD
    _check(document)
    if MessageKind.JOIN_CHUNK in document:
        return MessageKind.JOIN_CHUNK
    if MessageKind.JOIN_CANCEL in document:
        return MessageKind.JOIN_CANCEL
    if MessageKind.JOIN in document:
        return MessageKind.JOIN
    if MessageKind.WAIT in lift_payload(document):
        return MessageKind.WAIT
    return MessageKind.PAYLOAD


def _check(document: dict[str, Any]) -> None:
    """Refuse, naming the field, a message about more than one thing or that AWS cannot carry.

    Each kind used to take precedence over the others, silently dropping the
    rest (a payload sent beside a ``wait_for`` never ran). The parent hears
    why: ``InvalidJoin`` when a join is involved, ``DependencyInvalid`` otherwise.
    """
    kinds = _kinds_in(document)
    payload = document.get("payload")
    if isinstance(payload, dict):
        # {"payload": {"wait_for": ...}} is how a parent's Map sends a wait: what the
        # envelope holds counts, not the envelope itself.
        kinds = [kind for kind in kinds if kind != "payload"] + _kinds_in(payload)
    problem = None
    if len(set(kinds)) > 1:
        names = " and ".join(f"'{kind}'" for kind in dict.fromkeys(kinds))
        problem = f"a message carries one of {', '.join(MESSAGE_KINDS)}; this one has {names}"
    if problem is None:
        problem = document_problem(document)
    if problem is None:
        return
    join = "join" in kinds
    raise InvalidMessageError(
        problem,
        task_token=(join_token_of(document) if join else None) or token_of(document),
        payload_id=id_of(payload) if isinstance(payload, dict) else id_of(document),
        error_name=DependencyError.INVALID_JOIN if join else DependencyError.INVALID,
    )


def _kinds_in(document: dict[str, Any]) -> list[str]:
    """Which of MESSAGE_KINDS a document holds, by its keys as :func:`kind_of` reads them."""
    kinds = [kind for kind in MESSAGE_KINDS if kind in document]
    if "payload" not in kinds and ("process" in document or "url" in document):
        kinds.append("payload")
    return kinds
