"""What ``list`` and ``rerun --state`` select: a filter, as Scan expressions and exactly.

The Scan's filter expression is a first cut on what each table stores;
:meth:`PayloadFilter.matches` then decides on the view.
"""

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from dependency_tracker.core.enums import PayloadState
from dependency_tracker.table.prefixes import RESERVED_ID_PREFIXES
from dependency_tracker_cli.readmodel.paging import Expression
from dependency_tracker_cli.readmodel.view import PayloadView, collections_of


@dataclass(frozen=True)
class PayloadFilter:
    """What ``list`` and ``rerun --state`` select; empty fields select everything.

    ``older_than``/``newer_than`` are instants compared with the payload's last
    change (``updated_at``; cirrus's ``updated``); ``error`` is a substring
    (case-sensitive, as DynamoDB's ``contains``) of the last error or its cause.
    ``payloads_only`` leaves out the tracker's own records (ids under a reserved
    prefix, such as ``invalid-message/...``): ``list`` shows them, ``rerun`` never
    selects them.
    """

    states: frozenset[PayloadState] = frozenset()
    workflow: str | None = None
    collection: str | None = None
    older_than: datetime | None = None
    newer_than: datetime | None = None
    error: str | None = None
    payloads_only: bool = False

    def matches(self, view: PayloadView) -> bool:
        """True when ``view`` passes every filter (the exact check, after the Scan's)."""
        if self.payloads_only and view.payload_id.startswith(RESERVED_ID_PREFIXES):
            return False
        if self.states and view.state not in self.states:
            return False
        if self.workflow is not None and view.workflow != self.workflow:
            return False
        if self.collection is not None and self.collection not in collections_of(view.collections):
            return False
        if not within(view.updated_at, self.older_than, self.newer_than):
            return False
        return self.error is None or any(
            self.error in text for text in (view.last_error, view.last_cause) if text
        )

    def tracker_expression(self) -> Expression:
        """The filters the tracker's state items hold as attributes (collection: client side)."""
        parts = time_filter_parts(self, updated="updated_at")
        if self.payloads_only:
            # In the Scan too, so the tracker's records never count against --limit.
            keys = [f":own{index}" for index in range(len(RESERVED_ID_PREFIXES))]
            parts.append(
                (
                    " AND ".join(f"NOT begins_with(#pid, {key})" for key in keys),
                    {"#pid": "payload_id"},
                    {
                        key: {"S": prefix}
                        for key, prefix in zip(keys, RESERVED_ID_PREFIXES, strict=True)
                    },
                )
            )
        if self.states:
            keys = [f":state{index}" for index in range(len(self.states))]
            values = dict(zip(keys, ({"S": s.value} for s in sorted(self.states)), strict=True))
            parts.append((f"#state IN ({', '.join(keys)})", {"#state": "state"}, values))
        if self.workflow is not None:
            parts.append(
                (
                    "#workflow = :workflow",
                    {"#workflow": "workflow"},
                    {":workflow": {"S": self.workflow}},
                )
            )
        if self.error is not None:
            parts.append(
                (
                    "contains(#error, :error) OR contains(#cause, :error)",
                    {"#error": "last_error", "#cause": "last_cause"},
                    {":error": {"S": self.error}},
                )
            )
        return Expression.all_of(parts)

    def cirrus_expression(self) -> Expression:
        """The filters cirrus's items hold: the state in ``state_updated``, the rest in its key.

        ``contains`` on ``collections_workflow`` is only a first cut (the
        collections are its head, the workflow its tail): :meth:`matches` decides.
        """
        parts = time_filter_parts(self, updated="updated")
        if self.states:
            keys = [f":state{index}" for index in range(len(self.states))]
            parts.append(
                (
                    " OR ".join(f"begins_with(#state_updated, {key})" for key in keys),
                    {"#state_updated": "state_updated"},
                    {
                        key: {"S": f"{state.value}_"}
                        for key, state in zip(keys, sorted(self.states), strict=True)
                    },
                )
            )
        if self.workflow is not None:
            parts.append(
                (
                    "contains(#key, :workflow)",
                    {"#key": "collections_workflow"},
                    {":workflow": {"S": f"_{self.workflow}"}},
                )
            )
        if self.collection is not None:
            parts.append(
                (
                    "contains(#key, :collection)",
                    {"#key": "collections_workflow"},
                    {":collection": {"S": self.collection}},
                )
            )
        if self.error is not None:
            parts.append(
                (
                    "contains(#error, :error)",
                    {"#error": "last_error"},
                    {":error": {"S": self.error}},
                )
            )
        return Expression.all_of(parts)


def time_filter_parts(
    wanted: PayloadFilter, *, updated: str
) -> list[tuple[str, dict[str, str], dict[str, Any]]]:
    """``wanted``'s time filters on attribute ``updated``, on whole seconds (text order).

    Stored timestamps differ in their fraction and zone suffix (``Z``,
    ``+00:00``), which text order does not follow within one second, so the Scan
    keeps a second more and :meth:`PayloadFilter.matches` compares instants.
    """
    parts: list[tuple[str, dict[str, str], dict[str, Any]]] = []
    if wanted.older_than is not None:
        bound = _second_text(wanted.older_than + timedelta(seconds=1))
        parts.append(("#updated < :older", {"#updated": updated}, {":older": {"S": bound}}))
    if wanted.newer_than is not None:
        bound = _second_text(wanted.newer_than)
        parts.append(("#updated >= :newer", {"#updated": updated}, {":newer": {"S": bound}}))
    return parts


def _second_text(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")


def within(
    moment: datetime | None, older_than: datetime | None, newer_than: datetime | None
) -> bool:
    """True when ``moment`` is before ``older_than`` and not before ``newer_than`` (if given)."""
    if older_than is None and newer_than is None:
        return True
    if moment is None:
        return False
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    if older_than is not None and moment >= older_than:
        return False
    return newer_than is None or moment >= newer_than
