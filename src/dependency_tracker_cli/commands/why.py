"""``dependency-tracker why``: what holds a wait (a parent's, a join's, a payload's), paged."""

# No ``from __future__ import annotations``: Typer reads these annotations at runtime.

from datetime import datetime
from typing import Annotated, Any, Literal

import typer
from rich.table import Table

from dependency_tracker.core.enums import utcnow
from dependency_tracker.core.errors import PayloadNotFoundError
from dependency_tracker_cli import render
from dependency_tracker_cli.commands.list_cmd import Limit, NextToken, scanned
from dependency_tracker_cli.holds import (
    Wait,
    Why,
    holds_of,
    page_of,
    parent_waits,
    read_join,
    waited_on_by,
    waits_of_payload,
)
from dependency_tracker_cli.options import Json, aws_command, fail
from dependency_tracker_cli.readmodel import PayloadView
from dependency_tracker_cli.target import Target
from dependency_tracker_cli.views import error_text
from dependency_tracker_cli.waitgraph import execution_label

# How ``waiters`` and ``list --waiters`` name a join (``join:<join_id>``).
_JOIN_LABEL = "join:"


@aws_command
def why(
    target: Target,
    *,
    subject: Annotated[str, typer.Argument(metavar="TARGET", show_default=False)],
    limit: Limit = 50,
    next_token: NextToken = None,
    json_output: Json = False,
) -> None:
    """List what holds a wait: its pending and failed dependencies, with state, age and error.

    TARGET is a parent execution ARN (every wait of that parent), a join id (or join:ID,
    as `waiters` prints it), or a payload id: what it waits on when it is a waiting
    payload, and its own state and who waits on it. Succeeded dependencies hold nothing
    and are only counted. Prints --next-token when more remain. Exits 5 if TARGET names
    nothing the tracker knows.

    Examples:
      dependency-tracker why arn:aws:states:us-east-1:123456789012:execution:deptrack-wait:m1
      dependency-tracker why join:3f1c9e --limit 20
      dependency-tracker why sentinel-2-l2a/mosaic-1 --json
      dependency-tracker why "$(cat id.txt)" --next-token eyJhZnRlciI6...
    """
    found: Why | None = scanned(
        lambda: read_why(target, subject, limit=limit, next_token=next_token)
    )
    if found is None:
        if json_output:
            render.emit_json({"target": subject, "kind": None, "found": False, "holds": []})
        fail(
            f"nothing known as {subject}: no parent execution, join or payload by that id",
            PayloadNotFoundError.exit_code,
            hint="a join is named by its whole id (`waiters PAYLOAD_ID` shows it), "
            "a parent by its execution ARN",
        )
    now = utcnow()
    if all(wait.answered for wait in found.waits) and found.waits and found.holds:
        render.stderr().print(
            "[yellow]note:[/] every wait was answered: nothing holds its parent any more "
            "(the failed dependencies are listed for the record)",
            soft_wrap=True,
        )
    if json_output:
        render.emit_json(_json(found, now))
        return
    _show(found, now)


def read_why(target: Target, subject: str, *, limit: int, next_token: str | None) -> Why | None:
    """What ``subject`` names and what holds it, one page (None: nothing by that name).

    An execution ARN is a parent; ``join:ID`` or an id with a join row is a join (a
    join id wins over a payload id); anything else a payload, known by its state item
    or its rows.
    """
    payload: PayloadView | None = None
    by: list[Wait] = []
    kind: Literal["join", "parent", "payload"] = "payload"
    if _is_execution_arn(subject):
        kind, waits = "parent", parent_waits(target, subject)
    elif (joined := read_join(target, subject.removeprefix(_JOIN_LABEL))) is not None:
        kind, waits = "join", [joined]
    elif subject.startswith(_JOIN_LABEL):
        return None
    else:
        payload = target.payloads.get_many([subject]).get(subject)
        by = waited_on_by(target, subject)
        waits = waits_of_payload(target, subject)
    if not waits and not by and payload is None:
        return None
    candidates = [candidate for _, found in waits for candidate in found]
    shown, token = page_of(candidates, limit=limit, next_token=next_token)
    return Why(
        target=subject,
        kind=kind,
        payload=payload,
        waited_on_by=by,
        waits=[wait for wait, _ in waits],
        holds=holds_of(target, shown),
        total_holds=len(candidates),
        next_token=token,
    )


def _is_execution_arn(subject: str) -> bool:
    # arn:<partition>:states:<region>:<account>:execution:<machine>:<name>
    parts = subject.split(":")
    return (
        len(parts) >= 8 and parts[0] == "arn" and parts[2] == "states" and parts[5] == "execution"
    )


# ---------------------------------------------------------------- output


def _json(found: Why, now: datetime) -> dict[str, Any]:
    data = found.model_dump(mode="json", exclude={"payload"})
    for hold, shown in zip(found.holds, data["holds"], strict=True):
        shown["age_seconds"] = (
            None if hold.since is None else int((now - hold.since).total_seconds())
        )
    payload = None if found.payload is None else found.payload.to_json()
    return {"target": found.target, "kind": found.kind, "found": True, "payload": payload} | data


def _show(found: Why, now: datetime) -> None:
    console = render.stdout()
    if found.kind == "payload":
        console.print(_payload_line(found.target, found.payload), soft_wrap=True)
        for wait in found.waited_on_by:
            console.print(f"waited on by {_wait_line(wait, now)}", soft_wrap=True)
    elif found.kind == "parent":
        console.print(
            f"parent {render.plain(execution_label(found.target))}: {len(found.waits)} wait(s)",
            soft_wrap=True,
        )
    for wait in found.waits:
        # A parent's own waits need not name it again.
        console.print(_wait_line(wait, now, parent=found.kind != "parent"), soft_wrap=True)
    if found.holds:
        render.print_table(console, _table(found, now), keys=(0,))
    elif found.waits:
        console.print("nothing pending or failed holds it")
    if found.next_token is not None:
        console.print(f"more remain: --next-token {found.next_token}", soft_wrap=True)


def _payload_line(payload_id: str, view: PayloadView | None) -> str:
    name = render.plain(payload_id)
    if view is None:
        return f"payload {name}: no state item (not started, or only a waiting parent's id)"
    line = (
        f"payload {name}: {render.styled(view.state.value)}, attempt {render.plain(view.attempt)}"
    )
    error = error_text(view)
    return f"{line}, last error {render.clipped(error, 120)}" if error else line


def _wait_line(wait: Wait, now: datetime, *, parent: bool = True) -> str:
    # Ids are escaped, never folded: they are copied into other commands.
    if wait.kind == "join":
        needed = "all" if wait.quorum is None else wait.quorum
        total = wait.total if wait.total is not None else f"{wait.registered}+"
        head = (
            f"join {render.plain(wait.join_id)}: {needed} of {total} needed, "
            f"{wait.succeeded} succeeded, {wait.failed} failed, {wait.pending} pending; "
        )
        head += f"decided {render.styled(wait.state)}" if wait.decided else "undecided"
    else:
        head = f"token wait on {render.plain(wait.payload_id)}: {render.styled(wait.state)}"
    told = ", parent told" if wait.answered else ""
    named = (
        f"; parent {render.plain(execution_label(wait.parent_execution))}"
        if parent and wait.parent_execution
        else ""
    )
    waiting = (
        f" (waiting payload {render.plain(wait.waiter_payload_id)})"
        if wait.waiter_payload_id
        else ""
    )
    return f"{head}{told}{named}{waiting}; since {render.age(wait.since, now)} ago"


def _table(found: Why, now: datetime) -> Table:
    table = Table(title=f"{len(found.holds)} of {found.total_holds} holding dependencies")
    several = found.kind != "join"
    columns = ["payload", "state", "age", *(["wait"] if several else []), "error: cause"]
    for column in columns:
        table.add_column(column)
    for hold in found.holds:
        failure = ": ".join(part for part in (hold.error, hold.cause) if part)
        table.add_row(
            render.plain(hold.payload_id),
            render.styled(hold.state),
            render.age(hold.since, now),
            *([render.plain(hold.wait)] if several else []),
            render.clipped(failure, 60),
        )
    return table
