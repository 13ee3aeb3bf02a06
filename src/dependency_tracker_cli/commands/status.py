"""``dependency-tracker status``: state, attempts, executions, last error, stored result."""

# No ``from __future__ import annotations``: Typer reads these annotations at runtime.

from typing import Annotated

import typer

from dependency_tracker.core.enums import PayloadState
from dependency_tracker.core.errors import PayloadNotFoundError
from dependency_tracker.table.prefixes import INVALID_MESSAGE_PREFIX
from dependency_tracker_cli import render
from dependency_tracker_cli.dead_ends import waiting_parent_note
from dependency_tracker_cli.options import Json, aws_command
from dependency_tracker_cli.readmodel import (
    CirrusPrefix,
    CirrusStateTableName,
    PayloadSource,
    PayloadView,
)
from dependency_tracker_cli.target import Target
from dependency_tracker_cli.views import payload_card, payload_json, unknown_workflow


@aws_command
def status(
    target: Target,
    *,
    payload_ids: Annotated[list[str], typer.Argument(metavar="PAYLOAD_ID...", show_default=False)],
    json_output: Json = False,
    cirrus_prefix: CirrusPrefix = None,
    cirrus_state_table: CirrusStateTableName = None,
) -> None:
    """Show payloads: state, attempts, executions, last error and stored result.

    In cirrus mode (--cirrus-prefix, or a stack with cirrus outputs) the state is
    cirrus-geo's, from its state table. A payload claimed but never started says
    why (why / reason): the invalid-message record of its message, or an unknown
    workflow (no state machine for it). Exits 5 if a payload id is unknown (after
    showing the others).

    Examples:
      dependency-tracker status sentinel-2-l2a/workflow-simulate/tile-1
      dependency-tracker status ID1 ID2 --json
      dependency-tracker status "$(cat id.txt)" --stack-name deptrack
      dependency-tracker status s2/workflow-cog/tile-1 --cirrus-prefix cirrus
    """
    target.use_cirrus(prefix=cirrus_prefix, state_table=cirrus_state_table)
    found = target.payloads.get_many(payload_ids)
    rows = [(payload_id, found.get(payload_id)) for payload_id in dict.fromkeys(payload_ids)]
    reasons = _stall_reasons(target, [item for _, item in rows if item is not None])
    if json_output:
        render.emit_json(
            [
                payload_json(payload_id, item)
                | ({} if item is None else {"reason": reasons.get(payload_id)})
                for payload_id, item in rows
            ]
        )
    else:
        console = render.stdout()
        for payload_id, item in rows:
            card = payload_card(payload_id, item, reason=reasons.get(payload_id))
            render.print_table(console, card, keys=())
    missing = [payload_id for payload_id, item in rows if item is None]
    if missing:
        for payload_id in missing:
            note = waiting_parent_note(target, payload_id)
            if note is not None:
                render.stderr().print(render.escape_line(note), soft_wrap=True)
        raise PayloadNotFoundError(", ".join(missing))


def _stall_reasons(target: Target, views: list[PayloadView]) -> dict[str, str]:
    """Why each tracker payload claimed but never started sits there, when it can be told.

    The tracker's answer on a message's last receive is an invalid-message record
    under the message's id; before it, an unknown workflow is known from the
    missing state machine alone (one ListStateMachines, only when needed).
    """
    stalled = {
        view.payload_id: view
        for view in views
        if view.source is PayloadSource.TRACKER
        and view.state is PayloadState.CLAIMED
        and view.last_execution is None
    }
    records = {
        payload_id: f"{INVALID_MESSAGE_PREFIX}{view.extra['claim_message_id']}"
        for payload_id, view in stalled.items()
        if view.extra.get("claim_message_id")
    }
    found = target.states.batch_get(records.values()) if records else {}
    reasons = {
        payload_id: str(found[record].last_error)
        for payload_id, record in records.items()
        if record in found and found[record].last_error
    }
    rest = [view for payload_id, view in stalled.items() if payload_id not in reasons]
    if rest:
        machines = target.state_machine_names()
        for view in rest:
            reason = view.workflow and unknown_workflow(
                view.workflow, prefix=target.prefix, machines=machines
            )
            if reason:
                reasons[view.payload_id] = reason
    return reasons
