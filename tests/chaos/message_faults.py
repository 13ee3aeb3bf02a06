"""The chaos harness's faults on the parents' own messages, and their bookkeeping.

``join_id_reuse`` (another parent's join names the same ``join_id`` as the owner's
registration moves on to its second chunk), ``manifest_overwrite`` (the owner's
manifest is replaced, same key, once its first chunk registered) and
``parent_send_throttled`` (a parent's first send fails, before or after SQS took it;
its Task's ``Retry`` sends again on a new token).

A throttled send is one of four orders (:data:`SEND_ORDERS`): throttled before SQS took
it (nothing of the first token arrives), or taken and then throttled, its message
delivered before the retry's, after it, or only once the parent was answered (``late``).
A first message delivered on time may also be delivered again (the same SQS record)
once the parent was answered (``redelivered late``). A join parent's two sends are the
same wait: the same ``join_id`` (three in four; else each send is its own join, keyed
by its token), the same quorum and members, sent inline, by a manifest
(``payloads_url``) or as ``{"url"}`` members.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import random
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dependency_tracker import app
from dependency_tracker.core.enums import DependencyError
from dependency_tracker.joins.manifest import manifest_text
from dependency_tracker.joins.store import JoinStore
from dependency_tracker_local.context import LocalContext
from tests.chaos.injection import MAX_RECEIVE_COUNT, draw
from tests.chaos.workload import Parent, random_token

if TYPE_CHECKING:
    from tests.chaos.faults import FakeParents, FaultInjector
    from tests.chaos.injection import Handler
    from tests.chaos.workload import Records, Workload
    from tests.conftest import Aws

INVALID_JOIN = DependencyError.INVALID_JOIN.value
JOIN_FAULTS = ("join_id_reuse", "manifest_overwrite")
# parent_send_throttled: when the first send failed, and where its message goes.
SEND_ORDERS = ("before", "first_then_retry", "retry_then_first", "first_late")
# ... a join parent's member list, the same in both sends.
JOIN_FORMS = ("inline", "manifest", "url")
# A named join (its two sends one wait) this often; else keyed by each send's token.
NAMED_SHARE = 0.75
# A first message delivered on time is delivered again once its parent was answered.
REDELIVER_SHARE = 0.5


@dataclass
class FirstAttempt:
    """``parent_send_throttled`` after SQS took the message: the first attempt's message."""

    parent: Parent  # the parent, holding its retry's token
    first: Parent  # the first attempt's message (its token, closed when the attempt failed)
    index: int
    order: str  # one of SEND_ORDERS but "before"
    form: str  # a join's JOIN_FORMS, "wait" for a single wait
    redeliver: bool  # its SQS record delivered again once the parent was answered
    body: str | None = None  # "first_late": sent by the harness once the parent was answered
    sent_late: bool = False
    record: dict[str, Any] | None = None  # its record as first delivered
    redelivered: bool = False
    tries: int = 0


@dataclass
class Intrusion:
    """``join_id_reuse``: another parent's join naming the owner's ``join_id``."""

    owner: Parent
    token: str
    members: list[str]
    message_id: str | None = None  # set once sent


@dataclass
class Overwrite:
    """``manifest_overwrite``: the owner's manifest replaced by another member list."""

    owner: Parent
    key: str
    members: list[str]  # the list written over the owner's
    done: bool = False


def allowed_errors(parent: Parent, overwrites: dict[str, Overwrite]) -> set[str | None]:
    """What a parent may hear: its outcome; an overwritten manifest's owner, InvalidJoin."""
    overwrite = overwrites.get(parent.token)
    if overwrite is not None and overwrite.done:
        return {parent.expected_error, INVALID_JOIN}
    return {parent.expected_error}


class MessageFaults:
    """Plans and injects the faults of the parents' messages; keeps what they did."""

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
        # The joins' own faults: by the owner's join_id, and by the owner's token.
        self.intrusions: dict[str, Intrusion] = {}
        self.overwrites: dict[str, Overwrite] = {}
        # parent_send_throttled after the send: the first attempt's token -> what it did.
        self.first_attempts: dict[str, FirstAttempt] = {}
        self.send_orders: Counter[str] = Counter()  # by SEND_ORDERS and join form
        # Parent index -> (order, join form, redeliver): a throttled send's plan, not drawn.
        self.send_plan: dict[int, tuple[str, str, bool]] = {}
        # The process handler as its event source invokes it (set by the run).
        self.process: Handler | None = None

    # ------------------------------------------------------ the joins' own faults

    def plan_join_faults(self) -> None:
        """Draw a join fault for each join parent of more than one chunk (seeded per parent).

        A parent given its fault beforehand keeps it. Drawn here, not with the parents,
        so that the parents stay those of the seed.
        """
        chunk_size = app.current().settings.join_chunk_size
        rates = [self.injector.rates.get(kind, 0.0) for kind in JOIN_FAULTS]
        for index, parent in enumerate(self.workload.parents):
            if parent.ring is not None or parent.quorum is None:
                continue
            if parent.fault is None and len(parent.members) > chunk_size:
                roll = random.Random(f"{self.seed}|join_faults|{index}").random()
                for kind, rate in zip(JOIN_FAULTS, rates, strict=True):
                    if roll < rate:
                        parent.fault = kind
                        break
                    roll -= rate
            if parent.fault is not None:
                self._prepare_join_fault(index, parent)

    def _prepare_join_fault(self, index: int, parent: Parent) -> None:
        """The owner's join_id or manifest, and the other member list the fault brings."""
        rng = random.Random(f"{self.seed}|{parent.fault}|{index}")
        others = [item for item in sorted(self.workload.deps) if item not in parent.members]
        # Members the owner did not name where there are enough, so that a mix shows.
        size = len(parent.members)
        members = rng.sample(others, min(size, len(others)))
        members += rng.sample(parent.members, size - len(members))
        if parent.fault == "join_id_reuse":
            parent.join_id = parent.join_id or f"chaos-{self.seed}-join-{index:04d}"
            token = random_token(rng, f"AQB-chaos-{self.seed}-reuse{index:04d}-")
            self.fake.tokens.add(token)
            self.intrusions[parent.join_id] = Intrusion(parent, token, members)
        elif parent.fault == "manifest_overwrite":
            key = f"chaos/manifests/{index:04d}.jsonl"
            self._put_manifest(key, parent.members)
            parent.manifest_url = f"s3://{self._bucket}/{key}"
            self.overwrites[parent.token] = Overwrite(parent, key, members)
        else:
            msg = f"unknown join fault {parent.fault!r}"
            raise ValueError(msg)

    @property
    def _bucket(self) -> str:
        bucket = app.current().settings.payload_bucket
        assert bucket is not None  # the run's setup checked it
        return bucket

    def _put_manifest(self, key: str, members: list[str]) -> None:
        text = manifest_text(self.workload.payload(m) for m in members)
        self.aws.s3.put_object(Bucket=self._bucket, Key=key, Body=text.encode("utf-8"))

    def on_send(self, params: dict[str, Any], **_: Any) -> None:
        """``join_id_reuse``: as the owner's registration sends its chunks on (chunk 1's
        message, one SendMessageBatch entry), the other parent's join goes to the queue
        first, so it is read while the owner's list still is."""
        if not self.intrusions or not self.injector.enabled:
            return
        bodies = [params.get("MessageBody", "")]
        bodies += [entry.get("MessageBody", "") for entry in params.get("Entries", [])]
        for text in bodies:
            self._intrude_before(str(text))

    def _intrude_before(self, text: str) -> None:
        try:
            body = json.loads(text)
        except ValueError:
            return
        chunk = body.get("join_chunk") if isinstance(body, dict) else None
        if not isinstance(chunk, dict) or chunk.get("index") != 1:
            return
        intrusion = self.intrusions.get(str(chunk.get("join_id")))
        if intrusion is None or intrusion.message_id is not None:
            return
        owner = intrusion.owner
        execution = f"arn:aws:states:us-east-1:123456789012:execution:parent:reuse-{owner.join_key}"
        join = {
            "task_token": intrusion.token,
            "quorum": 1,
            "join_id": owner.join_key,
            "parent_execution": execution,
        }
        payloads = [self.workload.payload(m) for m in intrusion.members]
        message = {"join": join, "payloads": payloads}
        sent = self.aws.sqs.send_message(
            QueueUrl=self.aws.queue_url, MessageBody=json.dumps(message)
        )
        intrusion.message_id = sent["MessageId"]
        self.records.sent[sent["MessageId"]] = intrusion.token
        self.injector.injected["join_id_reuse"] += 1

    def overwrite_due(self) -> None:
        """``manifest_overwrite``: once the owner's first chunk registered, its manifest is
        replaced (same key) before anything else is delivered."""
        for overwrite in self.overwrites.values():
            if overwrite.done or not self.injector.enabled:
                continue
            joins = JoinStore(self.aws.dynamodb, self.aws.dependencies.table_name)
            join = joins.get(overwrite.owner.join_key)
            if join is None or join.registered_chunks < 1:
                continue
            self._put_manifest(overwrite.key, overwrite.members)
            overwrite.done = True
            self.injector.injected["manifest_overwrite"] += 1

    # ------------------------------------------------- a parent's throttled send

    def throttled_send(self, index: int, parent: Parent) -> tuple[Parent, str] | None:
        """``parent_send_throttled``: the parent's first attempt at its send failed.

        Throttled after SQS took it, the first attempt's message (with a token of its own,
        closed when the attempt failed) goes before or after the parent's (returned with
        ``"before"`` or ``"after"``), or is held until the parent is answered. Throttled
        before, nothing of it is sent. Either way the parent's own token is its retry's.
        """
        eligible = parent.ring is None and parent.fault is None and parent.join_id is None
        if not eligible or not draw(self.injector, self.seed, "parent_send_throttled", str(index)):
            return None
        rng = random.Random(f"{self.seed}|parent_send_throttled|{index}|plan")
        order, form, redeliver = self.send_plan.get(
            index, (rng.choice(SEND_ORDERS), "", rng.random() < REDELIVER_SHARE)
        )
        form = "wait" if parent.quorum is None else self._join_form(index, parent, rng, form)
        self.send_orders[order] += 1
        self.send_orders[f"form_{form}"] += 1
        if order == "before":
            return None
        token_rng = random.Random(f"{self.seed}|parent_send_throttled|{index}|token")
        first = dataclasses.replace(
            parent, token=random_token(token_rng, f"AQB-chaos-{self.seed}-first{index:04d}-")
        )
        self.fake.tokens.add(first.token)
        self.fake.parent_gone(first.token, "TaskTimedOut")
        attempt = FirstAttempt(
            parent, first, index, order, form, redeliver and order != "first_late"
        )
        self.first_attempts[first.token] = attempt
        if order == "first_late":
            attempt.body = json.dumps(self.workload.body(index, first))
            return None
        return first, "before" if order == "first_then_retry" else "after"

    def _join_form(self, index: int, parent: Parent, rng: random.Random, planned: str) -> str:
        """A throttled join's id and member list, the same for both sends (``planned``:
        a form of JOIN_FORMS, named; "<form>_unnamed"; "" to draw both)."""
        named = rng.random() < NAMED_SHARE if not planned else not planned.endswith("_unnamed")
        if named:
            parent.join_id = f"chaos-{self.seed}-send-{index:04d}"
        form = planned.removesuffix("_unnamed") or rng.choice(JOIN_FORMS)
        if form == "manifest":
            key = f"chaos/manifests/send-{index:04d}.jsonl"
            self._put_manifest(key, parent.members)
            parent.manifest_url = f"s3://{self._bucket}/{key}"
        elif form == "url":
            prefix = "chaos/members/"
            for member in parent.members:
                text = json.dumps(self.workload.payload(member))
                self.aws.s3.put_object(
                    Bucket=self._bucket, Key=f"{prefix}{member}.json", Body=text.encode("utf-8")
                )
            parent.member_urls = f"s3://{self._bucket}/{prefix}"
        return form if parent.join_id is not None else f"{form}_unnamed"

    def watch(self, deliver: Handler) -> Handler:
        """Keep the record of each first message as it is delivered (for its redelivery)."""

        def watched(event: dict[str, Any], context: Any) -> Any:
            for record in event["Records"]:
                token = self.records.sent.get(record["messageId"])
                attempt = self.first_attempts.get(token or "")
                if attempt is not None and attempt.record is None:
                    attempt.record = copy.deepcopy(record)
            return deliver(event, context)

        return watched

    def _answered(self, parent: Parent) -> bool:
        fake = self.fake
        return parent.token in fake.sent or parent.token in fake.gone

    def late_sends(self, *, anyway: bool = False) -> bool:
        """Send each held first message, and deliver again each first record planned, once
        its parent was answered (``anyway``: at the run's quiet point). True if any ran."""
        did = False
        for attempt in self.first_attempts.values():
            ready = anyway or self._answered(attempt.parent)
            if attempt.body is not None and not attempt.sent_late and ready:
                sent = self.aws.sqs.send_message(
                    QueueUrl=self.aws.queue_url, MessageBody=attempt.body
                )
                self.records.sent[sent["MessageId"]] = attempt.first.token
                attempt.sent_late = did = True
            if attempt.redeliver and not attempt.redelivered and attempt.record and ready:
                self._redeliver(attempt)
                did = True
        return did

    def _redeliver(self, attempt: FirstAttempt) -> None:
        """The first message's record again, as SQS redelivers it (the same message id)."""
        assert self.process is not None  # set by the run's setup
        assert attempt.record is not None
        try:
            response = self.process({"Records": [attempt.record]}, LocalContext("process"))
        except Exception:  # noqa: BLE001  (a failed invocation: SQS delivers it again)
            response = None
        attempt.tries += 1
        failed = response is None or bool(response.get("batchItemFailures"))
        attempt.redelivered = not failed or attempt.tries >= MAX_RECEIVE_COUNT
