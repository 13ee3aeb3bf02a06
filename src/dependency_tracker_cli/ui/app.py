"""The ``ui`` page: a Flask app over the CLI's read model, read-only, rendered on the server.

``/`` is the whole page; ``/fragment`` the same sections alone, which the page's
small inline script fetches every few seconds to refresh them in place (without
JavaScript a ``<noscript>`` meta refresh reloads the page instead). Every
section is paged with its own ``?<section>_page=N`` (``?page=N`` pages the
payloads); ``/join/<id>`` pages a join's members; ``/execution?arn=`` is
``DescribeExecution`` as JSON (linked on ``serve``, where there is no console).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError
from flask import Flask, Response, abort, render_template, request, url_for
from markupsafe import Markup
from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, make_server

from dependency_tracker.core.enums import utcnow
from dependency_tracker_cli import holds, render
from dependency_tracker_cli.ui import joins, views
from dependency_tracker_cli.ui.snapshots import Read, SnapshotCache
from dependency_tracker_cli.ui.svg import to_svg
from dependency_tracker_cli.ui.timeline import HEIGHT, MARGIN, WIDTH, timeline

if TYPE_CHECKING:
    from dependency_tracker_cli.target import Target

SECTIONS = ("counts", "parents", "joins", "stuck", "graph", "payloads")


@dataclass(frozen=True)
class Settings:
    """How the page reads and refreshes."""

    refresh_seconds: int = 5
    stuck_after: timedelta = timedelta(hours=1)
    page_size: int = views.PAGE_SIZE
    # Nodes a column of the graph picture shows before "+N more".
    graph_nodes: int = 20
    # How far back the summary counts failed payloads, and how long a decided join stays listed.
    recent: timedelta = joins.DECIDED_WINDOW


def create_app(target: Target, settings: Settings | None = None) -> Flask:
    """The Flask app serving the page for ``target`` (``serve`` or a deployed stack)."""
    config = settings or Settings()
    app = Flask(__name__, template_folder=str(Path(__file__).with_name("templates")))
    snapshots = SnapshotCache(
        lambda: views.read_snapshot(target, config.recent), refresh_seconds=config.refresh_seconds
    )

    @app.template_global()
    def page_url(section: str, number: int) -> str:
        """This page's URL with ``section`` on page ``number`` (the other sections kept)."""
        arguments: dict[str, Any] = request.args.to_dict()
        if section == "payloads":
            arguments.pop("page", None)
        arguments[f"{section}_page"] = str(number)
        return url_for(request.endpoint or "index", **(request.view_args or {}), **arguments)

    @app.get("/")
    def index() -> str:
        return render_template(
            "page.html",
            refresh=config.refresh_seconds,
            target=_where(target),
            **_sections(target, config, snapshots.get(fresh=True)),
        )

    @app.get("/fragment")
    def fragment() -> str:
        return render_template("sections.html", **_sections(target, config, snapshots.get()))

    @app.get("/join/<path:join_id>")
    def join(join_id: str) -> str:
        store = target.joins
        row, succeeded, failed = store.read(join_id)
        if row is None:
            abort(404)
        members, duplicates = store.members(join_id)
        now = utcnow()
        progress = joins.progress_of(target, join_id, row, succeeded, failed)
        # What holds it: its members not succeeded, one page of them read with their states.
        waiting = holds.member_candidates(holds.join_wait(row, succeeded, failed), members)
        held = views.paged(waiting, _number("members_page"), config.page_size)
        return render_template(
            "join.html",
            join_id=join_id,
            name=joins.join_name(join_id, row.parent_execution),
            progress=progress,
            row=row,
            succeeded=succeeded,
            failed=failed,
            duplicates=len(duplicates),
            members=views.Page(
                holds.holds_of(target, held.rows), held.number, held.pages, held.total
            ),
            timeline=timeline(row, progress, members, now),
            chart={"width": WIDTH, "height": HEIGHT, "margin": MARGIN},
            age=lambda since: render.age(since, now),
        )

    @app.get("/execution")
    def execution() -> Response:
        arn = request.args.get("arn", "")
        try:
            described = target.client("stepfunctions").describe_execution(executionArn=arn)
        except ClientError as exc:
            body = {"error": exc.response.get("Error", {})}
            return Response(json.dumps(body, indent=2), 404, mimetype="application/json")
        described.pop("ResponseMetadata", None)
        text = json.dumps(described, indent=2, default=str)
        return Response(text, mimetype="application/json")

    return app


class _QuietHandler(WSGIRequestHandler):
    """No line per request: the page refreshes every few seconds."""

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        """Log nothing."""


def page_server(app: Flask, host: str = "127.0.0.1", port: int = 0) -> BaseWSGIServer:
    """A threaded HTTP server of ``app`` (``port`` 0: any free one), quiet per request."""
    return make_server(host, port, app, threaded=True, request_handler=_QuietHandler)


def _number(name: str) -> int:
    """A page number from the query (1 when missing or not a number)."""
    try:
        return max(1, int(request.args.get(name, "1")))
    except ValueError:
        return 1


def _sections(target: Target, config: Settings, read: Read[views.Snapshot]) -> dict[str, Any]:
    """Every section's page, from ``read``'s snapshot."""
    snapshot = read.snapshot
    graph = snapshot.graph
    size = config.page_size
    listed = views.paged(snapshot.joins, _number("joins_page"), size)
    payload_page = _number("payloads_page") if "payloads_page" in request.args else _number("page")
    stuck = views.stuck_parents(target, graph, config.stuck_after)
    return {
        "summary": views.summary(snapshot, len(stuck), config.recent),
        "recent": _hours(config.recent),
        "counts": views.paged(views.state_counts(snapshot.payloads), _number("counts_page"), size),
        "parents": views.paged(views.waiting(target, graph), _number("parents_page"), size),
        "joins": views.Page(
            joins.join_progress(target, listed.rows, snapshot.counts),
            listed.number,
            listed.pages,
            listed.total,
        ),
        "stuck": views.paged(stuck, _number("stuck_page"), size),
        "stuck_after": views_duration(config.stuck_after),
        "graph_svg": Markup(to_svg(graph, max_per_layer=config.graph_nodes)),  # noqa: S704
        "graph_nodes": len(graph.nodes),
        "graph_edges": len(graph.edges),
        "cycles": [[graph.nodes[n].label for n in group] for group in graph.cycles()],
        "payloads": views.paged(snapshot.payloads, payload_page, size),
        "read_seconds": read.seconds,
    }


def views_duration(value: timedelta) -> str:
    """``1h``, ``5m``, ``30s`` or ``0s``: the stuck threshold as the page says it."""
    seconds = int(value.total_seconds())
    for unit, length in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds and seconds % length == 0:
            return f"{seconds // length}{unit}"
    return f"{seconds}s"


def _hours(value: timedelta) -> str:
    """``24 h`` (whole hours), else as :func:`views_duration` says it."""
    seconds = int(value.total_seconds())
    return f"{seconds // 3600} h" if seconds and seconds % 3600 == 0 else views_duration(value)


def _where(target: Target) -> str:
    """What the page reads: the endpoint, the stack or the prefix."""
    options = target.options
    if options.stack_name:
        return f"stack {options.stack_name}"
    if options.endpoint_url:
        return f"{options.endpoint_url} (prefix {target.prefix})"
    return f"prefix {target.prefix}"
