"""An operator at random moments of the chaos run: ``release`` and ``rerun``, the CLI's own code.

Both commands run in-process, as ``dependency-tracker`` runs them (the command's own
body: its selection, its :class:`~dependency_tracker_cli.commands.release.Releaser`,
its messages), on a :class:`~dependency_tracker_cli.target.Target` bound to the run's
account: clients of their own, which the fault injector does not touch, and whose
``SendTask*`` reach :class:`~tests.chaos.faults.FakeParents` like the tracker's.

* ``operator_release``: a live parent (a single wait, a join, a wait on a chain's
  step, or a ring's wait) is released, by its execution ARN or by the payload id it
  waits on and its waiter (``--waiter sha256:...`` / ``join:<id>``), with ``--json``.
* ``operator_rerun``: a payload that ended ``FAILED``, ``ABORTED`` or ``INVALID`` is
  rerun (``process[0].replace`` + ``replace_if``, the state and attempt the command
  read); one in three twice in a row, both reading the same outcome, and of those half
  the second command's message is held back (its send retried late) until the first
  one's attempt has ended. A document the command cannot find (an Express run's input)
  is given with ``--from``.

Each moment is one of the points of a round (:meth:`Operator.moment`); the draws are
seeded per moment. The claims the tracker makes are recorded (:class:`Claims`), so
that the invariants can tell which submission replaced which outcome.
"""

from __future__ import annotations

import contextlib
import io
import json
import random
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from botocore.awsrequest import AWSResponse, HTTPHeaders

from dependency_tracker import app
from dependency_tracker.core.enums import PayloadState, utcnow
from dependency_tracker.core.errors import DependencyTrackerError, TransitionConflictError
from dependency_tracker.core.tokens import redact_token
from dependency_tracker_cli.commands import release as release_command
from dependency_tracker_cli.commands import rerun as rerun_command
from dependency_tracker_cli.target import ConnectionOptions, ResourceNames, Target
from tests.conftest import DEPENDENCY_TABLE, PREFIX, STATE_TABLE

if TYPE_CHECKING:
    from datetime import datetime

    from dependency_tracker.payloads.model import ProcessPayload
    from dependency_tracker.table.items import PayloadStateItem
    from tests.chaos.faults import FakeParents, FaultInjector
    from tests.chaos.workload import Parent, Records, Workload
    from tests.conftest import Aws

RELEASE = "operator_release"
RERUN = "operator_rerun"
RERUNNABLE = frozenset({PayloadState.FAILED, PayloadState.ABORTED, PayloadState.INVALID})
# Of the reruns, this share sends twice in a row (both read the same outcome) ...
TWICE_SHARE = 1 / 3
# ... and of those, this share holds the second message back until the first ended.
HELD_SHARE = 0.5
# At most this many of each per run, whatever the rate (a run's length stays bounded).
PER_PARENTS = 8


@dataclass
class ReleaseDone:
    """One ``release`` the operator ran, and what it printed."""

    index: int
    parent: Parent
    what: str  # the execution ARN, or the payload id
    waiter: str | None  # --waiter, with a payload id
    reason: str
    began: datetime
    ended: datetime
    exit_code: int = 0
    output: dict[str, Any] | None = None  # --json
    error: str | None = None  # an error the command ended with

    def outcomes(self) -> dict[str, str]:
        """``waiter`` (as the command names it) -> outcome, for every row it reported."""
        rows = [] if self.output is None else self.output.get("waiters", [])
        return {str(row["waiter"]): str(row["outcome"]) for row in rows}


@dataclass
class RerunDone:
    """One ``rerun`` of a payload (twice: two commands in a row), and what each printed."""

    payload_id: str
    seen: tuple[str, int]  # the state and attempt read just before
    twice: bool
    began: datetime
    exit_codes: list[int] = field(default_factory=list)
    outputs: list[dict[str, Any]] = field(default_factory=list)
    from_file: bool = False
    errors: list[str] = field(default_factory=list)
    message_ids: list[str] = field(default_factory=list)  # what the queue took
    held: list[str] = field(default_factory=list)  # the second message's bodies, held back
    held_back: bool = False  # the second message was held back


@dataclass(frozen=True)
class Claim:
    """A new attempt the tracker claimed: what it replaced, and the message's terms."""

    payload_id: str
    seen_state: str | None  # None: the payload's first claim
    seen_attempt: int
    attempt: int
    replace: bool
    replace_if: tuple[str, int | None] | None
    message_id: str | None


class Claims:
    """Records every claim the handlers' state table makes (or loses to its own twin).

    Wraps ``StateTable.claim`` of the run's composition root (the runner's and the
    lease's): a claim that raised a lost race is read again, since a ``conditional_race``
    twin made the very same write first.
    """

    def __init__(self) -> None:
        self.made: list[Claim] = []

    def attach(self) -> None:
        states = app.current().states
        original = states.claim

        def claim(
            payload: ProcessPayload,
            seen: PayloadStateItem | None,
            *,
            message_id: str | None = None,
        ) -> PayloadStateItem:
            try:
                claimed = original(payload, seen, message_id=message_id)
            except TransitionConflictError:
                now = states.get(payload.id)
                attempt = 1 if seen is None else seen.attempt + 1
                if (
                    now is not None
                    and now.attempt == attempt
                    and (now.claim_message_id == message_id and now.state is PayloadState.CLAIMED)
                ):
                    self._record(payload, seen, attempt, message_id)  # the twin's, the same
                raise
            self._record(payload, seen, claimed.attempt, message_id)
            return claimed

        states.claim = claim  # type: ignore[method-assign]

    def _record(
        self,
        payload: ProcessPayload,
        seen: PayloadStateItem | None,
        attempt: int,
        message_id: str | None,
    ) -> None:
        expected = payload.replace_if
        self.made.append(
            Claim(
                payload_id=payload.id,
                seen_state=None if seen is None else seen.state.value,
                seen_attempt=0 if seen is None else seen.attempt,
                attempt=attempt,
                replace=payload.replace,
                replace_if=None if expected is None else (expected.state.value, expected.attempt),
                message_id=message_id,
            )
        )


class Operator:
    """Runs ``release`` and ``rerun`` at drawn moments, and keeps what each did."""

    def __init__(
        self,
        *,
        aws: Aws,
        workload: Workload,
        records: Records,
        injector: FaultInjector,
        fake: FakeParents,
    ) -> None:
        self.aws = aws
        self.workload = workload
        self.records = records
        self.injector = injector
        self.fake = fake
        self.seed = workload.seed
        self.releases: list[ReleaseDone] = []
        self.reruns: list[RerunDone] = []
        self.moments = 0
        self._target: Target | None = None
        self._files = tempfile.TemporaryDirectory(prefix="chaos-rerun-")
        # Bounds and shares (tests raise them to see every case in a short run).
        self.most = max(2, len(workload.parents) // PER_PARENTS)
        self.twice_share = TWICE_SHARE
        self.held_share = HELD_SHARE
        self._current: RerunDone | None = None  # the rerun whose command runs now
        self._hold = False  # its message is held back (not sent)
        self._entries: list[dict[str, Any]] = []

    @property
    def target(self) -> Target:
        """The CLI's target on the run's account (built at first use, once set up)."""
        if self._target is None:
            target = Target(ConnectionOptions(prefix=PREFIX))
            target.__dict__["names"] = ResourceNames(
                prefix=PREFIX,
                state_table=STATE_TABLE,
                dependency_table=DEPENDENCY_TABLE,
                process_queue_name=f"{PREFIX}-process",
                process_dlq_name=f"{PREFIX}-process-dlq",
                process_queue_url=self.aws.queue_url,
                payload_bucket=app.current().settings.payload_bucket,
            )
            self.fake.attach(target.client("stepfunctions"))
            events = target.client("sqs").meta.events
            events.register("before-parameter-build.sqs.SendMessageBatch", self._entries_of)
            events.register("before-call.sqs.SendMessageBatch", self._held_back)
            events.register("after-call.sqs.SendMessageBatch", self._taken)
            self._target = target
        return self._target

    def close(self) -> None:
        """Remove the rerun documents written for ``--from``."""
        self._files.cleanup()

    def _entries_of(self, params: dict[str, Any], **_: Any) -> None:
        self._entries = list(params.get("Entries", []))

    def _held_back(self, **_: Any) -> tuple[Any, dict[str, Any]] | None:
        """The held rerun's send: SQS "took" it; the harness keeps the bodies for later."""
        if not self._hold or self._current is None:
            return None
        self._current.held += [str(entry["MessageBody"]) for entry in self._entries]
        taken = [{"Id": entry["Id"], "MessageId": "held"} for entry in self._entries]
        parsed = {"Successful": taken, "Failed": [], "ResponseMetadata": {"HTTPStatusCode": 200}}
        return AWSResponse("https://sqs.fake/", 200, HTTPHeaders(), None), parsed

    def _taken(self, parsed: dict[str, Any], **_: Any) -> None:
        if self._current is not None and not self._hold:
            self._current.message_ids += [str(ok["MessageId"]) for ok in parsed["Successful"]]

    def _hit(self, kind: str, key: str, done: int) -> bool:
        rate = self.injector.rates.get(kind, 0.0)
        if not self.injector.enabled or rate <= 0 or done >= self.most:
            return False
        return random.Random(f"{self.seed}|{kind}|{key}").random() < rate

    def moment(self, where: str) -> None:
        """One point of a round: a release, a rerun, both or neither (seeded)."""
        self.moments += 1
        key = f"{self.moments}|{where}"
        if self._hit(RELEASE, key, len(self.releases)):
            self._release(random.Random(f"{self.seed}|{RELEASE}|{key}|which"))
        if self._hit(RERUN, key, len(self.reruns)):
            self._rerun(random.Random(f"{self.seed}|{RERUN}|{key}|which"))

    # ------------------------------------------------------------ release

    def _live(self) -> list[tuple[int, Parent]]:
        """Parents sent and not answered yet (a join's own fault aside)."""
        sent = set(self.records.sent.values())
        fake = self.fake
        return [
            (index, parent)
            for index, parent in enumerate(self.workload.parents)
            if parent.token in sent
            and parent.fault is None
            and parent.token not in fake.sent
            and parent.token not in fake.gone
        ]

    def _release(self, rng: random.Random) -> None:
        live = self._live()
        if not live:
            return
        index, parent = rng.choice(live)
        self.release(index, parent, by_arn=rng.random() < 0.5)

    def release(self, index: int, parent: Parent, *, by_arn: bool) -> ReleaseDone:
        """``release`` parent ``index``'s wait: by its execution ARN, or by the payload id it
        waits on and ``--waiter``; ``--yes --json``."""
        what, waiter = self._address(index, parent, by_arn=by_arn)
        done = ReleaseDone(
            index=index,
            parent=parent,
            what=what,
            waiter=waiter,
            reason=f"chaos {self.seed}: release #{len(self.releases) + 1}",
            began=utcnow(),
            ended=utcnow(),
        )
        self.injector.injected[RELEASE] += 1
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out):
                release_command.release.__wrapped__(  # type: ignore[attr-defined]
                    self.target,
                    what=what,
                    reason=done.reason,
                    waiter=waiter,
                    dry_run=False,
                    yes=True,
                    json_output=True,
                )
        except typer.Exit as exc:
            done.exit_code = exc.exit_code
        except DependencyTrackerError as exc:
            done.exit_code, done.error = exc.exit_code, str(exc)
        done.ended = utcnow()
        text = out.getvalue().strip()
        done.output = json.loads(text) if text else None
        self.releases.append(done)
        return done

    def _address(self, index: int, parent: Parent, *, by_arn: bool) -> tuple[str, str | None]:
        """The execution ARN, or the payload id waited on and the waiter as ``waiters``
        names it."""
        if by_arn:
            return self.workload.execution(index), None
        waiter = redact_token(parent.token) if parent.quorum is None else None
        if parent.quorum is not None:
            waiter = f"join:{parent.join_key}"
        ring = parent.ring
        if ring is not None:
            if parent.quorum is None:
                return ring.waits_on(parent.position), waiter
            return ring.ids[1], waiter
        if parent.wait_for is not None:
            return parent.wait_for, waiter
        return self.workload.pid(parent.members[0]), waiter

    # -------------------------------------------------------------- rerun

    def _rerunnable(self) -> list[PayloadStateItem]:
        ring_ids = {pid for ring in self.workload.rings for pid in ring.ids}
        return [
            state
            for pid, state in sorted(self.workload.states(self.aws.states).items())
            if state.state in RERUNNABLE and pid not in ring_ids
        ]

    def _rerun(self, rng: random.Random) -> None:
        candidates = self._rerunnable()
        if not candidates:
            return
        state = rng.choice(candidates)
        done = RerunDone(
            payload_id=state.payload_id,
            seen=(state.state.value, state.attempt),
            twice=rng.random() < self.twice_share,
            began=utcnow(),
        )
        done.held_back = hold_second = done.twice and rng.random() < self.held_share
        self.injector.injected[RERUN] += 1
        self._current = done
        try:
            for second in [False, True] if done.twice else [False]:
                self._hold = second and hold_second
                code, output = self._rerun_command(done)
                done.exit_codes.append(code)
                if output is not None:
                    done.outputs.append(output)
        finally:
            self._current, self._hold = None, False
        self.reruns.append(done)

    def late_reruns(self, *, anyway: bool = False) -> bool:
        """Send each held rerun message once the attempt the first one started has ended
        (``anyway``: at the run's quiet point). True if any was sent."""
        did = False
        for done in self.reruns:
            if not done.held:
                continue
            state = self.aws.states.get(done.payload_id)
            moved_on = state is not None and state.attempt > done.seen[1]
            if anyway or (moved_on and state is not None and state.state.is_terminal):
                for body in done.held:
                    sent = self.aws.sqs.send_message(QueueUrl=self.aws.queue_url, MessageBody=body)
                    done.message_ids.append(sent["MessageId"])
                done.held = []
                did = True
        return did

    def _rerun_command(self, done: RerunDone) -> tuple[int, dict[str, Any] | None]:
        """``rerun PAYLOAD_ID --skip-others --json``; with ``--from`` when it finds no
        document (an Express run's input cannot be described)."""
        for from_file in (None, self._document(done.payload_id)):
            out = io.StringIO()
            code = 0
            try:
                with contextlib.redirect_stdout(out):
                    rerun_command.rerun.__wrapped__(  # type: ignore[attr-defined]
                        self.target,
                        payload_ids=[done.payload_id],
                        state=None,
                        workflow=None,
                        collection=None,
                        older_than=None,
                        newer_than=None,
                        error=None,
                        limit=50,
                        max_pages=20,
                        from_file=from_file,
                        dry_run=False,
                        skip_others=True,
                        json_output=True,
                        cirrus_prefix=None,
                        cirrus_state_table=None,
                    )
            except rerun_command.NoDocumentError as exc:
                done.errors.append(str(exc))
                continue
            except typer.Exit as exc:
                code = exc.exit_code
            except DependencyTrackerError as exc:
                code = exc.exit_code
                done.errors.append(str(exc))
            done.from_file = done.from_file or from_file is not None
            text = out.getvalue().strip()
            return code, json.loads(text) if text else None
        return -1, None

    def _document(self, payload_id: str) -> str:
        """The payload's document, written for ``--from``."""
        item = self.workload.item_of(payload_id)
        assert item is not None  # a dependency of the run (rings are never rerun)
        path = Path(self._files.name) / f"{item}.json"
        path.write_text(json.dumps(self.workload.payload(item)), encoding="utf-8")
        return str(path)
