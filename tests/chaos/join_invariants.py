"""The chaos run's join invariants: each join decided once, every member outcome counted
once, and no parent answered with a member it did not name (under ``join_id_reuse`` and
``manifest_overwrite``).

Reads the parents (:class:`~tests.chaos.workload.Workload`), what each heard
(:class:`~tests.chaos.faults.FakeParents`), the message faults' bookkeeping
(:class:`~tests.chaos.message_faults.MessageFaults`) and the joins' rows.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import TYPE_CHECKING, Any

from dependency_tracker.core.enums import DependencyError, PayloadState
from dependency_tracker.core.tokens import token_hash
from dependency_tracker.joins.store import JoinStore
from dependency_tracker.table.items import membership_id_for
from dependency_tracker.table.keys import partition_key
from tests.chaos.message_faults import INVALID_JOIN, allowed_errors
from tests.chaos.workload import WINS

if TYPE_CHECKING:
    from dependency_tracker.joins.outputs import MemberOutcome
    from dependency_tracker.joins.rows import JoinItem
    from tests.chaos.faults import FakeParents, Sent
    from tests.chaos.message_faults import FirstAttempt, MessageFaults
    from tests.chaos.workload import Parent, Records, Workload
    from tests.conftest import Aws

# What the refusals must say: the join_id is another parent's; the manifest changed.
IN_USE = re.compile(r"in use|already used|belongs to|owned by", re.IGNORECASE)
CHANGED = re.compile(r"chang|overwrit|modif", re.IGNORECASE)


class JoinChecks:
    """Checks every (non-dead-lettered) join parent against its rows and what it heard."""

    def __init__(
        self,
        *,
        aws: Aws,
        workload: Workload,
        records: Records,
        fake: FakeParents,
        messages: MessageFaults,
    ) -> None:
        self.aws = aws
        self.workload = workload
        self.records = records
        self.fake = fake
        self.messages = messages

    @property
    def joins(self) -> JoinStore:
        return JoinStore(self.aws.dynamodb, self.aws.dependencies.table_name)

    # ------------------------------------------------------ decided once, counted once

    def decided_once(self, counts: dict[str, int]) -> list[str]:
        """Each join's row decided once, as its members' outcomes say; each outcome counted once.

        Read as the tracker keeps a join: its constant-size row and count shards
        (``JoinStore.read``), its chunk and membership rows (``JoinStore.members``).
        The shards' sums must equal the members whose membership row is terminal,
        outcome by outcome, and each such row must be marked counted with its own
        state (the mark and the shard's add are one transaction, so a member marked
        once was added once). A parent whose message is in the DLQ is left for the
        redrive; a ring's join is checked for its counts only (its outcome: the cycle check).
        """
        problems: list[str] = []
        joins = self.joins
        dead = self.records.dead_tokens
        checked = counted = 0
        for parent in self.workload.parents:
            if parent.quorum is None or parent.token in dead:
                continue
            join_id = parent.join_key
            label = f"join {join_id[:12]}... on {parent.members} (quorum {parent.quorum})"
            join, succeeded, failed = joins.read(join_id)
            if join is None:
                if parent.ring is None:
                    problems.append(f"{label}: no join row")
                continue
            checked += 1
            outcomes, duplicates = joins.members(join_id)
            ended = [outcome for outcome in outcomes if outcome.state is not None]
            wins = sum(outcome.state is PayloadState.SUCCEEDED for outcome in ended)
            if (succeeded, failed) != (wins, len(ended) - wins):
                problems.append(
                    f"{label}: shards count {succeeded} succeeded, {failed} failed; membership "
                    f"rows {wins} succeeded, {len(ended) - wins} failed"
                )
            for outcome in ended:
                marked = self._count_mark(outcome.payload_id, join_id)
                if marked != f"COUNTED:{outcome.state}":
                    problems.append(
                        f"{label}: {outcome.payload_id} ended {outcome.state}, {marked}"
                    )
            counted += len(ended)
            if parent.ring is None:
                problems += [f"{label}: {p}" for p in self._join_outcome(parent, join, outcomes)]
                if duplicates:
                    problems.append(f"{label}: duplicates {duplicates}")
        counts.update(joins_checked=checked, join_members_counted=counted)
        return problems

    def _join_outcome(
        self, parent: Parent, join: JoinItem, outcomes: list[MemberOutcome]
    ) -> list[str]:
        """A (non-ring) join: members listed in order, ended as they run, decided as expected.

        Members register in chunks; a join decided early registers no later chunk, so
        the listed members are the first ones, and a listed member without a
        membership row (its chunk stopped once the join was decided) never ran.
        """
        problems: list[str] = []
        pid = self.workload.pid
        expected = [partition_key(pid(member)) for member in parent.members]
        listed = [outcome.payload_id for outcome in outcomes]
        if not listed or listed != expected[: len(listed)]:
            problems.append(f"members {listed}, not the first of {expected}")
        if join.registered > len(listed):
            problems.append(f"registered {join.registered}, listed {len(listed)}")
        deps = self.workload.deps
        wins = {partition_key(pid(m)) for m in parent.members if deps[m] in WINS}
        for outcome in outcomes:
            if (
                outcome.state is None
                and join.workflow_state is not PayloadState.PROCESSING
                and self._count_mark(outcome.payload_id, join.join_id) == "no membership row"
            ):
                continue  # listed by a chunk the decision stopped before it registered them
            should = outcome.payload_id in wins
            if outcome.state is None or (outcome.state is PayloadState.SUCCEEDED) != should:
                problems.append(f"member {outcome.payload_id} ended {outcome.state}")
        allowed = {
            (PayloadState.SUCCEEDED if error is None else PayloadState.FAILED, error)
            for error in allowed_errors(parent, self.messages.overwrites)
        }
        if (join.workflow_state, join.error) not in allowed:
            problems.append(f"decided {join.workflow_state} {join.error}, expected {allowed}")
        if join.notified_at is None:
            problems.append("decided, never notified")
        return problems

    def _count_mark(self, key: str, join_id: str) -> str | None:
        """``notify_outcome`` of a membership row (``COUNTED:<state>`` once counted)."""
        found = self.aws.dynamodb.get_item(
            TableName=self.aws.dependencies.table_name,
            Key={"payload_id": {"S": key}, "waiter_id": {"S": membership_id_for(join_id)}},
            ConsistentRead=True,
        ).get("Item")
        if found is None:
            return "no membership row"
        mark = found.get("notify_outcome", {}).get("S")
        return str(mark) if mark is not None else None

    # ------------------------------------------------------------ named members

    def named_members(self, counts: dict[str, int]) -> list[str]:
        """Every id in a join's summary (success or ``QuorumUnreachable``) is one its parent
        named; a join naming another's join_id is refused, the owner's outcome unchanged; an
        overwritten manifest fails its join (the cause says so) or changed nothing."""
        problems: list[str] = []
        summaries = 0
        for parent in self.workload.parents:
            sends = self.fake.sent.get(parent.token, [])
            if parent.ring is not None or parent.quorum is None or not sends:
                continue
            label = f"{parent.token[:24]}... ({parent.fault or 'join'} {parent.join_key[:16]})"
            try:
                summary = self._summary(sends[0])
            except ValueError as exc:
                problems.append(f"{label}: summary unreadable: {exc}")
                continue
            if summary is None:
                continue
            summaries += 1
            named = {partition_key(self.workload.pid(member)) for member in parent.members}
            listed = [*summary.get("succeeded", []), *summary.get("pending", [])]
            listed += [failed.get("payload_id") for failed in summary.get("failed", [])]
            listed += [*summary.get("duplicates", []), summary.get("winner")]
            strangers = sorted({str(pid) for pid in listed if pid is not None} - named)
            if strangers:
                what = sends[0].error or "success"
                problems.append(f"{label}: answered {what} naming {strangers[:5]}, never named")
        problems += self._intrusions()
        problems += self._overwrites(counts)
        intrusions = self.messages.intrusions.values()
        counts.update(
            join_summaries_checked=summaries,
            join_id_reuses=sum(i.message_id is not None for i in intrusions),
            manifest_overwrites=sum(o.done for o in self.messages.overwrites.values()),
        )
        return problems

    def _summary(self, sent: Sent) -> dict[str, Any] | None:
        """The join summary a send carries (success output, ``QuorumUnreachable`` cause)."""
        if sent.operation == "SendTaskSuccess":
            text = sent.output
        elif sent.error == DependencyError.QUORUM_UNREACHABLE.value:
            text = sent.cause
        else:
            return None
        summary = json.loads(text or "{}")
        if not isinstance(summary, dict):
            msg = f"not an object: {text!r:.80}"
            raise ValueError(msg)  # reported as a problem by the caller
        url = summary.get("summary_url")
        if url is None:
            return summary
        bucket, _, key = str(url).removeprefix("s3://").partition("/")
        whole: dict[str, Any] = json.loads(
            self.aws.s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        )
        return whole

    def _heard(self, token: str, label: str, problems: list[str]) -> Sent | None:
        """The one send that resumed ``token`` (a problem if not one); None as well when it
        is gone (timed out) or its message is left for the redrive."""
        sends = self.fake.sent.get(token, [])
        if token in self.fake.gone or (not sends and token in self.records.dead_tokens):
            return None
        if len(sends) != 1:
            problems.append(f"{label} answered {len(sends)} times")
            return None
        return sends[0]

    def _intrusions(self) -> list[str]:
        """The second parent hears ``InvalidJoin`` saying the join_id is in use; the owner
        hears what it would have without it (its members: the other invariants)."""
        problems: list[str] = []
        for join_id, intrusion in sorted(self.messages.intrusions.items()):
            if intrusion.message_id is None:
                continue
            label = f"join_id {join_id} reused:"
            answer = self._heard(intrusion.token, f"{label} the second parent", problems)
            if answer is not None:
                cause = answer.cause or ""
                if answer.error != INVALID_JOIN:
                    problems.append(f"{label} the second parent heard {answer.error}")
                elif join_id not in cause or not IN_USE.search(cause):
                    problems.append(f"{label} cause does not say it is in use: {cause:.200}")
            owner = self._heard(intrusion.owner.token, f"{label} the owner", problems)
            if owner is not None and owner.error != intrusion.owner.expected_error:
                problems.append(
                    f"{label} the owner heard {owner.error}, "
                    f"expected {intrusion.owner.expected_error}"
                )
        return problems

    def _overwrites(self, counts: dict[str, int]) -> list[str]:
        """An overwritten manifest's owner hears ``InvalidJoin`` naming the manifest and
        saying it changed, or (every chunk read before) what it would have heard."""
        problems: list[str] = []
        outcomes: Counter[str] = Counter()
        for overwrite in self.messages.overwrites.values():
            owner = overwrite.owner
            if not overwrite.done:
                continue
            label = f"manifest {owner.manifest_url} overwritten:"
            answer = self._heard(owner.token, f"{label} the owner", problems)
            if answer is None:
                continue
            cause = answer.cause or ""
            if answer.error == INVALID_JOIN:
                outcomes["invalid"] += 1
                if str(owner.manifest_url) not in cause or not CHANGED.search(cause):
                    problems.append(f"{label} cause does not say it changed: {cause:.200}")
            elif answer.error == owner.expected_error:
                outcomes["unchanged"] += 1
            else:
                problems.append(
                    f"{label} the owner heard {answer.error}, expected InvalidJoin "
                    f"or {owner.expected_error}"
                )
        counts.update(
            manifest_overwrite_invalid_join=outcomes["invalid"],
            manifest_overwrite_unchanged=outcomes["unchanged"],
        )
        return problems

    # ------------------------------------------------------------------ tokens

    def tokens(self, counts: dict[str, int], first_attempts: dict[str, FirstAttempt]) -> list[str]:
        """No send reached a token no parent held; each join row holds and answers only its
        parent's tokens, each once, and the token its parent holds as the parent heard it.

        A join row's tokens are its parent's (the retry's, and a throttled send's first
        one when the two sends are one wait); every token in ``answered`` is one of them;
        once ``notified_at`` is set every one is answered; the parent's own token is
        answered ``SENT:`` (or ``RELEASED:``) as the parent heard the tracker (or the
        operator), or ``PARENT_GONE:<code>`` when the tracker's send was made again after a
        crash (the parent heard the first one; the re-send was refused ``InvalidToken``, or
        told the parent-gone code a fault injected on it).
        """
        problems = [
            f"{token[:24]}...: {n} send(s) to a token no parent held"
            for token, n in sorted(self.fake.unknown.items())
        ]
        firsts: dict[str, set[str]] = {}
        for token, attempt in first_attempts.items():
            firsts.setdefault(attempt.parent.token, set()).add(token)
        dead = self.records.dead_tokens
        joins = self.joins
        checked = tokens = 0
        for parent in self.workload.parents:
            if parent.quorum is None or parent.fault is not None or parent.token in dead:
                continue
            join = joins.get(parent.join_key)
            if join is None:
                continue
            checked += 1
            label = f"join {parent.join_key[:16]}..."
            own = {token_hash(t) for t in {parent.token} | firsts.get(parent.token, set())}
            held = join.tokens()
            tokens += len(held)
            if strangers := set(held) - own:
                problems.append(f"{label}: holds {len(strangers)} token(s) of no send of its own")
            if strangers := set(join.answered) - set(held):
                problems.append(f"{label}: answered {len(strangers)} token(s) it does not hold")
            if join.notified_at is not None and (unanswered := set(held) - set(join.answered)):
                problems.append(f"{label}: notified, {len(unanswered)} token(s) unanswered")
            problems += [f"{label}: {p}" for p in self._held_answer(parent, join)]
        counts.update(join_rows_tokens_checked=checked, join_tokens=tokens)
        return problems

    def _held_answer(self, parent: Parent, join: JoinItem) -> list[str]:
        """The parent's own token is answered as the parent heard it."""
        sends = self.fake.sent.get(parent.token, [])
        told = join.answered.get(token_hash(parent.token))
        if not sends or told is None:
            return [] if not sends or join.notified_at is None else ["heard, never answered"]
        if sends[0].error == DependencyError.RELEASED.value:
            return [] if told.startswith("RELEASED:") else [f"released, answered {told}"]
        # A re-send after a crash (the parent heard the first) is refused: InvalidToken, or
        # the parent-gone code a fault injected on that re-send told the tracker.
        resent = {"InvalidToken"} if self.fake.late.get(parent.token) else set()
        resent |= self.fake.told_gone.get(parent.token, set())
        if told.startswith("SENT:") or told in {f"PARENT_GONE:{code}" for code in resent}:
            return []
        return [f"heard {sends[0].operation} {sends[0].error}, answered {told}"]
