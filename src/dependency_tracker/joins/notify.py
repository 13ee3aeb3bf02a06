"""Join callbacks: a member's end counted on its join, a decided join's parent told.

A membership row turning terminal on the stream is counted on its join
(:class:`~dependency_tracker.joins.counting.JoinCounting`), which decides the
join once its quorum is settled. The join row turning terminal then answers
every token the join holds with the join's summary (or the reason it is
invalid), each token once, and marks the row told with the last answer.

The sends themselves are :class:`~dependency_tracker.answers.parent.ParentAnswers`'s,
shared with the waiters' callbacks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dependency_tracker.answers.actions import SENT_OUTCOME, CallbackAction
from dependency_tracker.core.enums import DependencyError, PayloadState
from dependency_tracker.joins.cancellation import refused_cause
from dependency_tracker.joins.outputs import MAX_JOIN_OUTPUT_BYTES
from dependency_tracker.joins.rows import MAX_JOIN_TOKENS, ParentGone
from dependency_tracker.joins.summary import invalid_join_cause, read_summary
from dependency_tracker.table.items import MembershipItem

if TYPE_CHECKING:
    from dependency_tracker.answers.parent import ParentAnswers
    from dependency_tracker.joins.cancellation import JoinCancellation
    from dependency_tracker.joins.counting import JoinCounting
    from dependency_tracker.joins.results import JoinResults
    from dependency_tracker.joins.rows import JoinItem
    from dependency_tracker.joins.store import JoinStore
    from dependency_tracker.table.dependency_table import DependencyTable

# What every token of a decided join hears: (error or None, output or cause).
Answer = tuple[DependencyError | None, str]


class JoinNotifier:
    """Counts terminal membership rows on their joins and answers decided joins' tokens."""

    def __init__(
        self,
        *,
        answers: ParentAnswers,
        joins: JoinStore,
        counting: JoinCounting,
        dependencies: DependencyTable,
        retention_days: int,
        results: JoinResults | None = None,
        cancellation: JoinCancellation | None = None,
    ) -> None:
        self.answers = answers
        self.cancellation = cancellation
        self.results = results  # None: no payload bucket, no results manifest
        self.joins = joins
        self.counting = counting
        self.dependencies = dependencies
        self.retention_days = retention_days

    def record_member(self, image: MembershipItem) -> CallbackAction:
        """Count a terminal membership row (its stream image) on its join, once."""
        current = self.dependencies.get_row(image.payload_id, image.waiter_id)
        if not isinstance(current, MembershipItem) or current.resolution is None:
            return CallbackAction.ALREADY_NOTIFIED
        # Counted rows are checked too: the delivery that counted may have died
        # before deciding the join, and counting again is refused by the store.
        if not self.counting.record(current, current.resolution):
            return CallbackAction.ALREADY_NOTIFIED
        return CallbackAction.RECORDED

    def notify(self, image: JoinItem, *, deadline: float | None = None) -> CallbackAction:
        """Answer every token of a decided join (its stream image) not answered yet.

        Raises:
            CallbackDeliveryError: A send failed in a way a retry of the record may fix.
        """
        found = self.answers.pending(image)
        if found is None:
            return CallbackAction.ALREADY_NOTIFIED
        action = self._answer_tokens(found[0], deadline)
        join = found[0]
        if (
            action is CallbackAction.PARENT_GONE
            and self.cancellation is not None
            and join.on_parent_gone == ParentGone.CANCEL
        ):
            # No token reached a parent: the members left run for nobody.
            self.cancellation.begin(join.join_id, refused_cause(join.parent_execution))
        return action

    def _answer_tokens(self, join: JoinItem, deadline: float | None) -> CallbackAction:
        """Answer every token of a decided join not answered yet, then mark the row told.

        A token added while this runs (the parent's send, retried) makes the
        final mark fail: the row is read again and the new token answered too.
        """
        action = CallbackAction.ALREADY_NOTIFIED
        # What the row records as told: a SENT answer over a refused one (every token may
        # have been answered already, by a delivery that died before its final mark).
        outcome = max(join.answered.values(), key=_told, default="")
        answer: Answer | None = None
        for _ in range(MAX_JOIN_TOKENS + 1):
            pending = list(join.unanswered().values())
            if pending and answer is None:
                answer = self._join_answer(join)
            last: tuple[str, str] | None = None
            for token in pending:
                assert answer is not None  # noqa: S101  (built just above)
                sent, told = self._send(token, join.workflow_state, answer, deadline)
                if sent is CallbackAction.REFUSED:
                    # Every token is the same parent's: the others would be refused too.
                    self.answers.record_refusal(join, told, join_id=join.join_id)
                    return sent
                outcome = max((outcome, told), key=_told) if outcome else told
                if token == pending[-1]:
                    last = (token, told)  # recorded with the final mark: one write
                else:
                    self.joins.mark_answered(join.join_id, token, told)
                if sent is CallbackAction.SENT or action is CallbackAction.ALREADY_NOTIFIED:
                    action = sent
            if self.joins.finish_answering(
                join, outcome=outcome, retention_days=self.retention_days, last=last
            ):
                return action
            if last is not None:
                self.joins.mark_answered(join.join_id, *last)
            current = self.joins.get(join.join_id)
            if current is None or current.notified_at is not None:
                return action
            join = current
        return action

    def join_output(self, join: JoinItem) -> str:
        """What a decided join sends: its summary, or a reference past the bound.

        The same text is the success output and the ``QuorumUnreachable`` cause:
        at most :data:`MAX_JOIN_OUTPUT_BYTES`, which fits both limits. Past it the
        full summary is written to the payload bucket first, and with a bucket
        every member's outcome to the join's results manifest (``results_url``).
        """
        summary = read_summary(self.joins, join)
        if self.results is not None and self.results.writable:
            url = self.results.write_decided(join.join_id)
            summary = summary.model_copy(update={"results_url": url})
        return self.answers.bounded(
            summary.to_json(),
            row=join,
            kind="join",
            reference=summary.reference,
            limit=MAX_JOIN_OUTPUT_BYTES,
        )

    def _join_answer(self, join: JoinItem) -> Answer:
        """What every token of a decided join hears: (error or None, output or cause)."""
        error = DependencyError(join.error) if join.error else DependencyError.QUORUM_UNREACHABLE
        if error is DependencyError.INVALID_JOIN:
            # Decided while registering (a bad manifest chunk, a quorum over n): the
            # reason is the news, not the members.
            return error, invalid_join_cause(join)
        text = self.join_output(join)
        if join.workflow_state is PayloadState.SUCCEEDED:
            return None, text
        return error, text

    def _send(
        self, token: str, state: PayloadState, answer: Answer, deadline: float | None
    ) -> tuple[CallbackAction, str]:
        error, text = answer
        if error is None:
            return self.answers.send(token, state, deadline=deadline, output=text)
        return self.answers.send(token, state, deadline=deadline, error=error, cause=text)


def _told(outcome: str) -> bool:
    """Orders a join row's answers: one that reached a parent first."""
    return outcome.startswith(SENT_OUTCOME)
