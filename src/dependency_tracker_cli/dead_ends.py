"""What to say when an id names no payload but a waiting parent: where to look instead.

``wait --payload-id s2/mosaic-1`` (a parent's ``waiter_payload_id``) names the parent, not a
payload the tracker ran: the state table holds nothing for it and nothing waits on it, so
``status`` and ``waiters`` find nothing. ``graph --root`` and ``stuck`` do answer for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dependency_tracker_cli import hints
from dependency_tracker_cli.waitgraph import WaitGraph

if TYPE_CHECKING:
    from dependency_tracker_cli.target import Target


def waiting_parent_note(target: Target, payload_id: str) -> str | None:
    """A pointer to ``graph --root`` and ``stuck`` when ``payload_id`` is a parent's own id.

    Reads the dependency table once (only on the not-found path); None when no parent
    waits as ``payload_id``.
    """
    rows = [row for page in target.dependencies.scan_pages(unnotified_only=False) for row in page]
    node = WaitGraph.from_rows(rows, include_done=True).find(payload_id)
    if node is None or not node.is_parent_only:
        return None
    return (
        f"{payload_id} is the id a parent waits as (wait --payload-id, waiter_payload_id), "
        "not a payload the tracker ran. What it waits on: "
        f"{hints.command('graph', '--root', payload_id, '--all')}; what holds it: "
        f"{hints.command('stuck')}"
    )
