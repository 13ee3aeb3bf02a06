"""The chaos harness's faults on the parents' own messages, and their bookkeeping.

``join_id_reuse`` (another parent's join names the same ``join_id`` as the owner's
registration moves on to its second chunk), ``manifest_overwrite`` (the owner's
manifest is replaced, same key, once its first chunk registered) and
``parent_send_throttled`` (a parent's first send fails, before or after SQS took it;
its Task's ``Retry`` sends again on a new token).
"""

from __future__ import annotations

import dataclasses
import json
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dependency_tracker import app
from dependency_tracker.core.enums import DependencyError
from dependency_tracker.joins.manifest import manifest_text
from dependency_tracker.joins.store import JoinStore
from tests.chaos.injection import draw
from tests.chaos.workload import Parent, random_token

if TYPE_CHECKING:
    from tests.chaos.faults import FakeParents, FaultInjector
    from tests.chaos.workload import Records, Workload
    from tests.conftest import Aws

INVALID_JOIN = DependencyError.INVALID_JOIN.value
JOIN_FAULTS = ("join_id_reuse", "manifest_overwrite")


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
        # parent_send_throttled after the send: the first attempt's token -> its parent.
        self.first_attempts: dict[str, Parent] = {}

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

    def throttled_send(self, index: int, parent: Parent) -> Parent | None:
        """``parent_send_throttled``: the parent's first attempt at its send failed.

        Throttled after SQS took it, the first attempt's message (with a token of its own,
        closed when the attempt failed) goes first; the one returned. Throttled before,
        nothing of it is sent. Either way the parent's own token is its retry's.
        """
        eligible = parent.ring is None and parent.fault is None and parent.join_id is None
        if not eligible or not draw(self.injector, self.seed, "parent_send_throttled", str(index)):
            return None
        if random.Random(f"{self.seed}|parent_send_throttled|{index}|when").random() < 0.5:
            return None
        rng = random.Random(f"{self.seed}|parent_send_throttled|{index}|token")
        first = dataclasses.replace(
            parent, token=random_token(rng, f"AQB-chaos-{self.seed}-first{index:04d}-")
        )
        self.fake.tokens.add(first.token)
        self.fake.parent_gone(first.token, "TaskTimedOut")
        self.first_attempts[first.token] = parent
        return first
