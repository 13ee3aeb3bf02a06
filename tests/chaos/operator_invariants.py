"""The chaos run's invariants of the operator's commands and of replacement.

* :data:`RELEASES`: what ``release`` reported agrees with what each parent heard and
  with its rows: a parent told ``DependencyReleased`` was released by a command that
  said so (its cause carrying that command's reason), and a row the command reported
  released failed the parent's own token (the parent heard it first).
* :data:`SUCCEEDED_RUNS`: no payload whose recorded state was ``SUCCEEDED`` is claimed
  again unless the message replaced a ``SUCCEEDED`` payload on purpose (``replace``
  without ``replace_if``, or a ``replace_if`` naming ``SUCCEEDED``); a claim by a
  message with ``replace_if`` that replaced an outcome replaced exactly the state and
  attempt it names, and a ``rerun`` command's message replaced only the outcome the
  command read (however late it came); no outcome is replaced twice (two reruns of one
  outcome start one attempt). A lease's takeover of a live attempt (a ``CLAIMED`` or
  ``PROCESSING`` one) replaces no outcome: any submission may make it.

Reads the operator's records (:class:`~tests.chaos.operator_faults.Operator`), the
claims the tracker made (:class:`~tests.chaos.operator_faults.Claims`), what each
parent heard (:class:`~tests.chaos.faults.FakeParents`) and the rows.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import TYPE_CHECKING

from dependency_tracker.core.enums import TERMINAL_STATES, DependencyError, PayloadState
from dependency_tracker.core.tokens import redact_token, token_hash
from dependency_tracker.joins.store import JoinStore
from dependency_tracker.table.items import WaiterItem, waiter_id_for

if TYPE_CHECKING:
    from tests.chaos.faults import FakeParents
    from tests.chaos.operator_faults import Claims, Operator, ReleaseDone
    from tests.chaos.workload import Parent, Records, Workload
    from tests.conftest import Aws

RELEASES = "released parents: DependencyReleased once, as the command reported"
SUCCEEDED_RUNS = "no succeeded payload runs again; a rerun replaces only what it saw, once"
RELEASED = DependencyError.RELEASED.value
SUCCEEDED = PayloadState.SUCCEEDED.value
TERMINAL = frozenset(state.value for state in TERMINAL_STATES)
# The exit codes a release may end with here: released (0), nothing released (3), no row
# yet (5: the parent's message not processed yet).
RELEASE_EXITS = frozenset({0, 3, 5})


def row_name(parent: Parent) -> str:
    """The parent's own row as ``release`` names it: ``sha256:...`` or ``join:<id>``."""
    if parent.quorum is None:
        return redact_token(parent.token) or ""
    return f"join:{parent.join_key}"


def released_by_command(operator: Operator) -> dict[str, ReleaseDone]:
    """Parent token -> the release that reported the parent's own row released."""
    released: dict[str, ReleaseDone] = {}
    for done in operator.releases:
        if done.outcomes().get(row_name(done.parent)) == "released":
            released.setdefault(done.parent.token, done)
    return released


class OperatorChecks:
    """Checks the releases and reruns of a run, and every claim the tracker made."""

    def __init__(
        self,
        *,
        aws: Aws,
        workload: Workload,
        records: Records,
        fake: FakeParents,
        operator: Operator,
        claims: Claims,
    ) -> None:
        self.aws = aws
        self.workload = workload
        self.records = records
        self.fake = fake
        self.operator = operator
        self.claims = claims

    # ------------------------------------------------------------ releases

    def releases(self, counts: dict[str, int]) -> list[str]:
        """Each release's report agrees with its parent and rows (see the module)."""
        problems: list[str] = []
        outcomes: Counter[str] = Counter()
        released = released_by_command(self.operator)
        for one in self.operator.releases:
            label = f"release of {one.what[-40:]} ({one.waiter or 'by ARN'})"
            if one.exit_code not in RELEASE_EXITS:
                problems.append(f"{label}: exit {one.exit_code}: {one.error}")
            outcomes.update(one.outcomes().values())
        for parent in self.workload.parents:
            sends = self.fake.sent.get(parent.token, [])
            heard = sends[0] if sends else None
            done = released.get(parent.token)
            label = f"{parent.token[:24]}... ({row_name(parent)[:24]})"
            if heard is not None and heard.error == RELEASED:
                if done is None:
                    problems.append(f"{label}: heard DependencyReleased, no release reported it")
                    continue
                cause = json.loads(heard.cause or "{}")
                if cause.get("reason") != done.reason:
                    problems.append(f"{label}: released with cause {cause}")
                problems += [f"{label}: {p}" for p in self._released_row(parent)]
            elif done is not None:
                what = "nothing" if heard is None else f"{heard.operation} {heard.error}"
                problems.append(f"{label}: reported released, the parent heard {what}")
        counts.update(
            releases=len(self.operator.releases),
            releases_of_parents=len(released),
            **{f"release_rows_{name}": n for name, n in sorted(outcomes.items())},
        )
        return problems

    def _released_row(self, parent: Parent) -> list[str]:
        """The parent's own row records the release (a ring's row: the cycle check)."""
        if parent.quorum is not None:
            join = JoinStore(self.aws.dynamodb, self.aws.dependencies.table_name).get(
                parent.join_key
            )
            told = None if join is None else join.answered.get(token_hash(parent.token))
            if told is None or not told.startswith("RELEASED:"):
                return [f"join row answered the parent's token {told}"]
            return []
        if parent.ring is not None:
            pid = parent.ring.waits_on(parent.position)
        else:
            pid = parent.wait_for or self.workload.pid(parent.members[0])
        row = self.aws.dependencies.get(pid, waiter_id_for(parent.token))
        if not isinstance(row, WaiterItem) or not (row.notify_outcome or "").startswith(
            "RELEASED:"
        ):
            return [f"waiter row {row and row.notify_outcome}"]
        return []

    # -------------------------------------------------------------- claims

    def _rerun_claims(self) -> list[str]:
        """A rerun's message claimed nothing but the outcome its command read, whatever it
        sent (``replace_if`` or not) and however late it came."""
        read = {mid: done for done in self.operator.reruns for mid in done.message_ids}
        problems: list[str] = []
        for claim in self.claims.made:
            done = read.get(claim.message_id or "")
            if claim.seen_state not in TERMINAL:
                continue  # a lease's takeover of a live attempt, not a replacement
            if done is not None and (claim.seen_state, claim.seen_attempt) != done.seen:
                problems.append(
                    f"{claim.payload_id}: a rerun that read {done.seen[0]} attempt "
                    f"{done.seen[1]} replaced {claim.seen_state} attempt {claim.seen_attempt}"
                )
        return problems

    def succeeded_runs(self, counts: dict[str, int]) -> list[str]:
        """No claim replaced a SUCCEEDED payload unasked; replace_if held; once per outcome."""
        problems: list[str] = []
        replaced: Counter[tuple[str, str | None, int]] = Counter()
        by_rerun = 0
        for claim in self.claims.made:
            label = f"{claim.payload_id} attempt {claim.attempt}"
            replaced[(claim.payload_id, claim.seen_state, claim.seen_attempt)] += 1
            if claim.seen_state == SUCCEEDED:
                asked = claim.replace and (
                    claim.replace_if is None or claim.replace_if[0] == SUCCEEDED
                )
                if not asked:
                    problems.append(
                        f"{label}: claimed over SUCCEEDED attempt {claim.seen_attempt} "
                        f"(replace {claim.replace}, replace_if {claim.replace_if})"
                    )
            if claim.replace_if is not None and claim.seen_state in TERMINAL:
                by_rerun += 1
                state, attempt = claim.replace_if
                if claim.seen_state != state or attempt not in (None, claim.seen_attempt):
                    problems.append(
                        f"{label}: replace_if {claim.replace_if}, replaced "
                        f"{claim.seen_state} attempt {claim.seen_attempt}"
                    )
        problems += self._rerun_claims()
        problems += [
            f"{pid}: {state} attempt {attempt} replaced {n} times"
            for (pid, state, attempt), n in sorted(replaced.items(), key=str)
            if n > 1
        ]
        reruns = self.operator.reruns
        sent = sum(
            row.get("sent", False)
            for done in reruns
            for output in done.outputs
            for row in output.get("payloads", [])
        )
        problems += [
            f"rerun of {done.payload_id}: exit {done.exit_codes}: {done.errors}"
            for done in reruns
            if any(code != 0 for code in done.exit_codes)
        ]
        counts.update(
            claims=len(self.claims.made),
            reruns_second_held=sum(done.held_back for done in reruns),
            reruns=len(reruns),
            reruns_twice=sum(done.twice for done in reruns),
            reruns_from_file=sum(done.from_file for done in reruns),
            rerun_messages_sent=sent,
            rerun_claims=by_rerun,
            reruns_superseded=sent - by_rerun,
        )
        return problems
