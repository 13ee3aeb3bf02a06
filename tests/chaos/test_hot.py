"""Hot partition: N real parents wait on one payload; all resume once, resolved in pages.

``test_small_hot_run`` (60 parents) runs in ``make test``. The 1,000-parent run
(``make chaos``) runs only with ``DEPTRACK_CHAOS=1``; ``DEPTRACK_HOT_PARENTS``
changes its size. Both print their timings and what update-state's probes saw.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pytest

from tests.chaos.hot import HotReport, HotRun
from tests.conftest import moto_query_page

if TYPE_CHECKING:
    from tests.conftest import Aws

# moto's waiter rows are ~360 bytes (36-character tokens): these pages hold ~20 rows,
# and ~a quarter of the big run's rows (280 of 1,000), so both runs span several pages,
# as 1 MB pages of AWS-sized rows would.
SMALL_PAGE_BYTES = 8_000
BIG_PAGE_BYTES_PER_PARENT = 100


def hot(
    aws: Aws,
    capsys: pytest.CaptureFixture[str],
    *,
    parents: int,
    page_bytes: int,
    update_latency: float = 0.0,
) -> HotReport:
    with moto_query_page(page_bytes):
        run = HotRun(
            aws,
            parents=parents,
            page_bytes=page_bytes,
            parent_timeout=900,
            update_latency=update_latency,
        )
        report = run.execute(timeout=120 + parents * 0.6)
    with capsys.disabled():
        print("\n" + report.render())  # noqa: T201  (make chaos shows the report)
    assert report.ok, report.render()
    return report


@pytest.mark.usefixtures("workflows")
def test_small_hot_run(aws: Aws, capsys: pytest.CaptureFixture[str]) -> None:
    # 20 ms per UpdateItem, as on the network: with 22-row pages an unbounded pool would
    # have about a page in flight; the bounded one fills up to its bound and no further.
    report = hot(aws, capsys, parents=60, page_bytes=SMALL_PAGE_BYTES, update_latency=0.02)
    assert len(report.pages) >= 2
    assert 1 < report.max_in_flight <= report.bound


@pytest.mark.skipif(not os.environ.get("DEPTRACK_CHAOS"), reason="make chaos (DEPTRACK_CHAOS=1)")
@pytest.mark.usefixtures("workflows")
def test_big_hot_run(aws: Aws, capsys: pytest.CaptureFixture[str]) -> None:
    parents = int(os.environ.get("DEPTRACK_HOT_PARENTS", "1000"))
    page_bytes = max(SMALL_PAGE_BYTES, parents * BIG_PAGE_BYTES_PER_PARENT)
    report = hot(aws, capsys, parents=parents, page_bytes=page_bytes)
    assert report.sends == parents
