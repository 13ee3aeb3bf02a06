"""A join's own faults, each once, on joins of several chunks.

Two all-of join parents wait on the same ``members`` payloads, as tokens of the
chaos harness (:class:`~tests.chaos.run.ChaosRun`), no other fault injected:

* ``join_id_reuse``: the first names its ``join_id``; as its registration sends its
  second chunk on, another parent's join naming the same ``join_id`` (other members)
  reaches the queue ahead of that chunk. The other parent hears ``InvalidJoin`` (the
  join_id is in use); the owner succeeds over its own members only.
* ``manifest_overwrite``: the second reads its members from a manifest, which the
  harness overwrites (same key, other members) once the first chunk registered. The
  owner hears ``InvalidJoin``, its cause naming the manifest and saying it changed.

The fast variant (a dozen members in chunks of four) runs in ``make test``; the scale
one (``DEPTRACK_JOIN_FAULT_MEMBERS``, default 150, in the default chunks of 100) under
``make chaos`` only.
"""

from __future__ import annotations

import os
import random
from typing import TYPE_CHECKING

import pytest

from dependency_tracker.core.settings import DEFAULT_JOIN_CHUNK_SIZE
from dependency_tracker.joins.manifest import ObjectVersion, Pinned
from tests.chaos.conftest import chaos_only
from tests.chaos.run import NAMED_MEMBERS, ChaosRun, Parent, Report, random_token
from tests.chaos.test_chaos import configure, without_rings
from tests.conftest import payload_id

if TYPE_CHECKING:
    from tests.conftest import Aws

SEED = 11
# The scale run's deadline: a fixed start and a generous time per member.
DEADLINE_BASE_SECONDS = 90.0
DEADLINE_PER_MEMBER_SECONDS = 1.0


def join_faults_run(
    aws: Aws, monkeypatch: pytest.MonkeyPatch, *, members: int, chunk_size: int
) -> tuple[ChaosRun, Report]:
    """Both parents on ``members`` payloads that all succeed; each with one join fault."""
    configure(aws, monkeypatch, join_chunk_size=chunk_size)
    run = ChaosRun(
        aws,
        seed=SEED,
        parents=0,
        # As many again for the other member lists (the intruder's, the overwrite's).
        dependencies=2 * members,
        rates={},
        duplicates=0.0,
        workflow_weights={"pass": 1.0},
    )
    without_rings(run)
    items = sorted(run.deps)[:members]
    rng = random.Random(SEED)
    run.parents = [
        Parent(random_token(rng, f"AQB-join-{fault}-"), items, members, None, fault=fault)
        for fault in ("join_id_reuse", "manifest_overwrite")
    ]
    run.fake.tokens = {parent.token for parent in run.parents}
    timeout = DEADLINE_BASE_SECONDS + members * DEADLINE_PER_MEMBER_SECONDS
    return run, run.execute(timeout=timeout)


def check(run: ChaosRun, report: Report) -> None:
    """Each fault injected once and answered as it should be; every invariant holds."""
    assert report.faults["join_id_reuse"] == 1, report.render()
    assert report.faults["manifest_overwrite"] == 1, report.render()
    assert report.ok, report.render()
    reuse, overwrite = run.parents
    # The owner succeeded; the other parent was refused: neither by a redrive.
    assert not run.redriven, report.render()
    assert [s.error for s in run.fake.sent[reuse.token]] == [None], report.render()
    (intrusion,) = run.intrusions.values()
    assert [s.error for s in run.fake.sent[intrusion.token]] == ["InvalidJoin"]
    # Overwritten after its first chunk and before its second was read: refused.
    assert [s.error for s in run.fake.sent[overwrite.token]] == ["InvalidJoin"]
    assert report.counts["manifest_overwrite_invalid_join"] == 1, report.render()
    assert report.counts["join_summaries_checked"] == 1, report.render()
    assert NAMED_MEMBERS in report.invariants
    # Neither the refused join nor the list written over the manifest started anything.
    named = set(reuse.members)
    strangers = [item for item in run.deps if item not in named]
    assert [item for item in strangers if run.aws.states.get(payload_id(item, "pass"))] == []


@pytest.mark.usefixtures("workflows")
def test_join_faults_on_small_chunks(aws: Aws, monkeypatch: pytest.MonkeyPatch) -> None:
    run, report = join_faults_run(aws, monkeypatch, members=12, chunk_size=4)
    check(run, report)


@pytest.mark.usefixtures("workflows")
def test_the_member_invariant_fails_when_later_chunks_read_any_version(
    aws: Aws, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Mutation: later chunks read the manifest without ``IfMatch``: the overwritten
    manifest's owner succeeds over a mix of its list and the one written over it."""
    monkeypatch.setattr(ObjectVersion, "pinned", lambda _self: Pinned())
    _, report = join_faults_run(aws, monkeypatch, members=12, chunk_size=4)
    problems = report.invariants[NAMED_MEMBERS]
    assert any("manifest_overwrite" in p and "never named" in p for p in problems), problems


@chaos_only
@pytest.mark.usefixtures("workflows")
def test_join_faults_at_scale(
    aws: Aws, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    members = int(os.environ.get("DEPTRACK_JOIN_FAULT_MEMBERS", "150"))
    run, report = join_faults_run(
        aws, monkeypatch, members=members, chunk_size=DEFAULT_JOIN_CHUNK_SIZE
    )
    with capsys.disabled():
        print("\n" + report.render())  # noqa: T201  (make chaos shows the report)
    check(run, report)
