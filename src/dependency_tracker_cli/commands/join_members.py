"""A join's members as its membership rows record them, for the commands that select by join."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dependency_tracker.core.enums import PayloadState
from dependency_tracker_cli import render
from dependency_tracker_cli.options import fail

if TYPE_CHECKING:
    from dependency_tracker_cli.target import Target

# Latest outcomes a rerun is for (what ``rerun`` itself accepts).
FAILED_OUTCOMES = frozenset({PayloadState.FAILED, PayloadState.ABORTED, PayloadState.INVALID})
# ``rerun --join``'s exit when no join has that id (as ``status`` for an unknown payload).
UNKNOWN_JOIN_EXIT = 5


def failed_members(target: Target, join_id: str, limit: int) -> list[str]:
    """Ids of ``join_id``'s members whose latest outcome failed, at most ``limit``, in list order.

    A decided join keeps its decision whatever its members' reruns end in: said on stderr.
    """
    join = target.joins.get(join_id)
    if join is None:
        fail(
            f"no join {join_id}",
            UNKNOWN_JOIN_EXIT,
            hint="a join is named by its whole id: `waiters PAYLOAD_ID` and the page show it",
        )
    members, _ = target.joins.members(join_id)
    failed = [member.payload_id for member in members if member.state in FAILED_OUTCOMES]
    console = render.stderr()
    if join.workflow_state.is_terminal:
        console.print(
            f"[yellow]note:[/] join {join_id} is decided ({join.workflow_state.value}): "
            "its members' reruns no longer change its outcome",
            soft_wrap=True,
        )
    if not failed:
        console.print(f"[yellow]note:[/] no member of join {join_id} failed", soft_wrap=True)
    if len(failed) > limit:
        console.print(
            f"[yellow]note:[/] {len(failed)} members failed; the first {limit} are selected: "
            "run again once these are rerun, or raise --limit",
            soft_wrap=True,
        )
    return failed[:limit]
