"""The chaos run's workload: parents, their dependencies, rings of cycles, and the messages.

:class:`Workload` draws, from the run's seed, the dependencies (each a workflow), the
parents waiting on them (single waits, k-of-n joins, waits on a chain's second step)
and the rings of parents waiting on each other; it renders each parent's message and
sends them. :class:`Records` is what the harness sent and saw delivered, which the
invariants read.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dependency_tracker.core.enums import DependencyError
from dependency_tracker.core.tokens import token_hash
from tests.conftest import payload, payload_id

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from dependency_tracker.payloads.state_table import StateTable
    from dependency_tracker.table.items import PayloadStateItem
    from tests.conftest import Aws

# "chain": a two-step payload (pass, then chain2): update-state publishes step 2 to the queue.
# "express"/"express_fail": the stack's Express workflow (simulate-express), which reports its
# own end on the status-report queue.
WORKFLOW_WEIGHTS = {
    "pass": 0.38,
    "chain": 0.12,
    "fail": 0.15,
    "invalid": 0.08,
    "express": 0.21,
    "express_fail": 0.06,
}
WINS = frozenset({"pass", "chain", "express"})
CHAIN_STEP = "chain2"
EXPRESS = "simulate-express"
WORKFLOW_OF = {"chain": "pass", "express": EXPRESS, "express_fail": EXPRESS}
FAILURE_ERRORS = {
    "fail": "DependencyFailed",
    "invalid": "DependencyInvalid",
    "express_fail": "DependencyFailed",
}
# Dependency cycles: this share more parents (at least one ring of each shape) wait on each
# other in rings. Shapes, by the parents in them: "pair" (a waits on b, b on a), "join" (a
# quorum-1 join whose waiter is j, over one payload w whose wait is on j), "triangle" (a on
# b on c on a) and "self" (a waits on itself). The first rings are one of each, in that
# order; the rest are drawn by weight.
CYCLE_SHARE = 0.05
RING_SIZES = {"pair": 2, "join": 2, "triangle": 3, "self": 1}
RING_WEIGHTS = {"pair": 0.4, "join": 0.2, "triangle": 0.25, "self": 0.15}
CYCLE = DependencyError.CYCLE.value
TOKEN_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
# SendMessageBatch's limit.
BATCH = 10


@dataclass
class Parent:
    """One waiting parent: its token, what it waits on, and what it must hear."""

    token: str
    members: list[str]  # dependency item ids
    quorum: int | None  # None: a single wait (Map pattern), else a join
    expected_error: str | None  # None: SendTaskSuccess
    wait_for: str | None = None  # a wait-only parent: the payload id it waits on
    ring: Ring | None = None  # a parent in a dependency cycle (checked on its own)
    position: int = 0  # ... its place in the ring: it waits as ring.ids[position]
    fault: str | None = None  # a join's own fault: one of JOIN_FAULTS
    join_id: str | None = None  # named in its join message (else the token's hash)
    manifest_url: str | None = None  # its members come from this manifest (payloads_url)
    # Its join's members sent as {"url": member_urls + item + ".json"} (objects in the bucket).
    member_urls: str | None = None

    @property
    def join_key(self) -> str:
        """The id of its join, as the tracker derives it."""
        return self.join_id or token_hash(self.token)


@dataclass(frozen=True)
class Ring:
    """Parents waiting on each other in a cycle: the parent at ``i`` waits, as ``ids[i]``,
    on ``ids[i + 1]`` (the last on ``ids[0]``). None of the ids is a payload the tracker
    runs (so each counts as live and its waits never end otherwise), except the "join"
    shape's member ``ids[1]``, which the join starts if it is let through.
    """

    index: int
    shape: str
    ids: tuple[str, ...]
    member: str | None = None  # "join": the item id of the join's one payload (ids[1])

    def waits_on(self, position: int) -> str:
        """The id the parent at ``position`` waits on."""
        return self.ids[(position + 1) % len(self.ids)]

    def cycle_from(self, position: int) -> list[str]:
        """The cycle a refused wait at ``position`` reports: itself round to itself."""
        rotated = self.ids[position:] + self.ids[:position]
        return [*rotated, self.ids[position]]


@dataclass
class Records:
    """What the harness sent and saw delivered on the process queue (and its DLQ)."""

    sent: dict[str, str] = field(default_factory=dict)  # message id -> parent token
    processed: set[str] = field(default_factory=set)
    seen: set[str] = field(default_factory=set)  # every message the process handler was given
    dead: set[str] = field(default_factory=set)  # message ids in the process DLQ
    # ... and their bodies, taken out for a redrive
    dead_bodies: dict[str, str] = field(default_factory=dict)
    # dead-lettered message id -> id after the redrive
    redriven: dict[str, str] = field(default_factory=dict)
    invocations: Counter[str] = field(default_factory=Counter)
    crashes: Counter[str] = field(default_factory=Counter)

    @property
    def dead_tokens(self) -> set[str]:
        """The tokens of the parents whose messages are in the DLQ."""
        return {self.sent[m] for m in self.dead if m in self.sent}


def random_token(rng: random.Random, prefix: str) -> str:
    """A task token as long as Step Functions' (drawn from ``rng``)."""
    return prefix + "".join(rng.choices(TOKEN_ALPHABET, k=300))


def make_parents(
    rng: random.Random,
    parents: int,
    dependencies: int,
    workflow_weights: dict[str, float] | None = None,
) -> dict[str, str]:
    """Dependency item id -> workflow."""
    chosen = WORKFLOW_WEIGHTS if workflow_weights is None else workflow_weights
    workflows = list(chosen)
    weights = list(chosen.values())
    return {f"dep-{i:03d}": rng.choices(workflows, weights)[0] for i in range(dependencies)}


class Workload:
    """The dependencies, parents and rings one seed draws, and the messages they send."""

    def __init__(
        self,
        *,
        seed: int,
        parents: int,
        dependencies: int,
        join_share: float,
        workflow_weights: dict[str, float] | None,
    ) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.deps = make_parents(self.rng, parents, dependencies, workflow_weights)
        self.parents = [self._parent(index, join_share) for index in range(parents)]
        # On top of the others (which stay those of the seed): about CYCLE_SHARE more.
        self.rings = self._rings(max(sum(RING_SIZES.values()), round(parents * CYCLE_SHARE)))

    def _parent(self, index: int, join_share: float) -> Parent:
        rng = self.rng
        token = random_token(rng, f"AQB-chaos-{self.seed}-{index:04d}-")
        items = sorted(self.deps)
        chains = [item for item in items if self.deps[item] == "chain"]
        roll = rng.random()
        if roll < join_share:
            members = rng.sample(items, rng.randint(2, 4))
            quorum = rng.randint(1, len(members))
            wins = sum(self.deps[m] in WINS for m in members)
            return Parent(token, members, quorum, None if wins >= quorum else "QuorumUnreachable")
        if chains and roll < join_share + 0.1:
            # Waits, without starting it, for the step a chain publishes later.
            (member,) = rng.sample(chains, 1)
            return Parent(token, [member], None, None, wait_for=payload_id(member, CHAIN_STEP))
        (member,) = rng.sample(items, 1)
        return Parent(token, [member], None, FAILURE_ERRORS.get(self.deps[member]))

    def _rings(self, budget: int) -> list[Ring]:
        """Rings of parents waiting on each other, ``budget`` parents in all, spread among
        the others at random places (so over every wave, in any order).

        Drawn from their own generator: the other parents stay those of the seed.
        """
        rng = random.Random(f"{self.seed}|cycles")
        rings: list[Ring] = []
        members: list[Parent] = []
        while budget > 0:
            shapes = [s for s in RING_WEIGHTS if RING_SIZES[s] <= budget]
            if len(rings) < len(RING_SIZES) and list(RING_SIZES)[len(rings)] in shapes:
                shape = list(RING_SIZES)[len(rings)]
            else:
                shape = rng.choices(shapes, [RING_WEIGHTS[s] for s in shapes])[0]
            k = len(rings)
            if shape == "join":
                item = f"loop-{self.seed}-{k}-w"
                ids: tuple[str, ...] = (f"loop/{self.seed}/{k}/j", payload_id(item, "pass"))
                ring = Ring(k, shape, ids, member=item)
            else:
                letters = "abc"[: RING_SIZES[shape]]
                ring = Ring(k, shape, tuple(f"loop/{self.seed}/{k}/{x}" for x in letters))
            rings.append(ring)
            for position in range(len(ring.ids)):
                letter = ("jw" if shape == "join" else "abc")[position]
                token = random_token(rng, f"AQB-chaos-{self.seed}-loop{k}{letter}-")
                quorum = 1 if shape == "join" and position == 0 else None
                members.append(Parent(token, [], quorum, CYCLE, ring=ring, position=position))
            budget -= len(ring.ids)
        for parent in members:
            self.parents.insert(rng.randint(0, len(self.parents)), parent)
        return rings

    # ------------------------------------------------------------- payloads

    def payload(self, item: str, **extra: Any) -> dict[str, Any]:
        """The process payload that runs dependency ``item``."""
        kind = self.deps[item]
        if kind == "chain":
            steps = [{"workflow": "pass"}, {"workflow": CHAIN_STEP}]
            return payload(item, "pass", **extra, process=steps)
        if kind in {"express", "express_fail"}:
            outcome = "succeed" if kind == "express" else "fail"
            step = {"workflow": EXPRESS, "tasks": {"simulate": {"outcome": outcome}}}
            return payload(item, EXPRESS, **extra, process=[step])
        return payload(item, kind, **extra)

    def pid(self, item: str) -> str:
        """The payload id of dependency ``item`` (its first step's)."""
        kind = self.deps[item]
        return payload_id(item, WORKFLOW_OF.get(kind, kind))

    def item_of(self, pid: str) -> str | None:
        """The dependency item whose payload (or chained step) is ``pid``."""
        for item, kind in self.deps.items():
            if pid == self.pid(item) or (kind == "chain" and pid == payload_id(item, CHAIN_STEP)):
                return item
        return None

    def payload_ids(self) -> list[str]:
        """Every payload id the run may have started: dependencies, chained steps, rings."""
        ids = [self.pid(item) for item in self.deps]
        ids += [payload_id(item, CHAIN_STEP) for item, kind in self.deps.items() if kind == "chain"]
        # A "join" ring's member runs if the join was let through; the other ring ids never.
        ids += [pid for ring in self.rings for pid in ring.ids]
        return ids

    def states(self, table: StateTable) -> dict[str, PayloadStateItem]:
        """The state rows of :meth:`payload_ids` that exist, by payload id."""
        states: dict[str, PayloadStateItem] = {}
        for pid in self.payload_ids():
            found = table.get(pid)
            if found is not None:
                states[found.payload_id] = found
        return states

    # ------------------------------------------------------------- messages

    def body(self, index: int, parent: Parent) -> dict[str, Any]:
        """The message parent ``index`` sends to the process queue."""
        callback = {"task_token": parent.token, "parent_execution": self.execution(index)}
        if parent.ring is not None:
            return self._ring_body(parent, parent.ring, callback)
        if parent.wait_for is not None:
            return {"wait_for": parent.wait_for, "callback": callback}
        if parent.quorum is None:
            (member,) = parent.members
            return self.payload(member, callback=callback)
        join: dict[str, Any] = {
            "task_token": parent.token,
            "quorum": parent.quorum,
            "parent_execution": self.execution(index),
        }
        if parent.join_id is not None:
            join["join_id"] = parent.join_id
        if parent.manifest_url is not None:
            return {"join": join, "payloads_url": parent.manifest_url}
        if parent.member_urls is not None:
            urls = [{"url": f"{parent.member_urls}{m}.json"} for m in parent.members]
            return {"join": join, "payloads": urls}
        return {"join": join, "payloads": [self.payload(m) for m in parent.members]}

    @staticmethod
    def execution(index: int) -> str:
        """The parent execution ARN parent ``index`` sends (its first attempt's too)."""
        return f"arn:aws:states:us-east-1:123456789012:execution:parent:p{index}"

    @staticmethod
    def _ring_body(parent: Parent, ring: Ring, callback: dict[str, str]) -> dict[str, Any]:
        waiter = ring.ids[parent.position]
        if parent.quorum is None:
            # Wait-only: the tracker never starts what it waits on.
            callback = {**callback, "waiter_payload_id": waiter}
            return {"wait_for": ring.waits_on(parent.position), "callback": callback}
        assert ring.member is not None
        join = {
            "task_token": parent.token,
            "quorum": 1,
            "parent_execution": callback["parent_execution"],
            "waiter_payload_id": waiter,
        }
        return {"join": join, "payloads": [payload(ring.member, "pass")]}

    def send(
        self,
        aws: Aws,
        records: Records,
        indexes: Iterable[int],
        first_attempt: Callable[[int, Parent], tuple[Parent, str] | None],
    ) -> None:
        """Send the parents at ``indexes``, in batches; ``first_attempt`` may add a throttled
        send's first message (its own token), ``"before"`` or ``"after"`` the parent's
        (``"held"``: the harness sends it itself, later)."""
        entries: list[tuple[str, Parent, dict[str, Any]]] = []
        for i in indexes:
            parent = self.parents[i]
            first = first_attempt(i, parent)
            if first is not None and first[1] == "before":
                entries.append((f"first-{i}", first[0], self.body(i, first[0])))
            entries.append((str(i), parent, self.body(i, parent)))
            if first is not None and first[1] == "after":
                entries.append((f"first-{i}", first[0], self.body(i, first[0])))
        by_id = {entry_id: parent for entry_id, parent, _ in entries}
        for start in range(0, len(entries), BATCH):
            chunk = entries[start : start + BATCH]
            response = aws.sqs.send_message_batch(
                QueueUrl=aws.queue_url,
                Entries=[
                    {"Id": entry_id, "MessageBody": json.dumps(body)} for entry_id, _, body in chunk
                ],
            )
            for ok in response["Successful"]:
                records.sent[ok["MessageId"]] = by_id[ok["Id"]].token

    def send_one(self, aws: Aws, records: Records, index: int) -> None:
        """Send parent ``index`` on its own (a later parent)."""
        body = json.dumps(self.body(index, self.parents[index]))
        sent = aws.sqs.send_message(QueueUrl=aws.queue_url, MessageBody=body)
        records.sent[sent["MessageId"]] = self.parents[index].token
