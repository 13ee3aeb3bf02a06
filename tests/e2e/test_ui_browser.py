"""``dependency-tracker ui`` in a real browser (headless Chromium), against ``serve``.

What a person sees is read from the rendered DOM: a join's count rising as the
page refreshes itself, a failed parent's cause, a cycle drawn red, page 2 of
the payloads. Without Chromium or chromedriver these tests fail in CI
(``CI=true``) and are skipped elsewhere, with one line saying what is missing
(tests/browser.py, shared with the page's test in cirrus mode).
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest

from dependency_tracker.core.enums import PayloadState
from dependency_tracker.payloads.model import ProcessPayload
from dependency_tracker_cli.target import ConnectionOptions, Target
from dependency_tracker_cli.ui.app import Settings, create_app
from tests.browser import chromium, served, text_of
from tests.conftest import wait_until
from tests.e2e.serving import Server, serving
from tests.unit.cli.rows import waiter

if TYPE_CHECKING:
    from collections.abc import Iterator

    from selenium.webdriver.remote.webdriver import WebDriver

pytestmark = pytest.mark.e2e

# Members of the join whose progress is watched; each takes a few seconds (1 to 8).
MEMBERS = 20


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    with chromium() as driver:
        yield driver


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving(tmp_path_factory.mktemp("serve")) as running:
        yield running


@pytest.fixture(scope="module")
def page(server: Server) -> Iterator[str]:
    """The ui app against ``server``, refreshing every second, every waiting parent stuck."""
    target = Target(ConnectionOptions(endpoint_url=server.endpoint, prefix="deptrack"))
    with served(create_app(target, Settings(refresh_seconds=1, stuck_after=timedelta(0)))) as url:
        yield url


def simulate(item: str, *, seconds: int = 0, outcome: str = "succeed") -> dict[str, Any]:
    return {
        "type": "FeatureCollection",
        "features": [{"type": "Feature", "id": item, "collection": "ui"}],
        "process": [
            {
                "workflow": "simulate",
                "tasks": {"simulate": {"seconds": seconds, "outcome": outcome}},
            }
        ],
    }


def start(server: Server, machine: str, name: str, document: dict[str, Any]) -> str:
    sfn = server.client("stepfunctions")
    arn = server.outputs["StateMachines"][machine]
    return str(
        sfn.start_execution(stateMachineArn=arn, name=name, input=json.dumps(document))[
            "executionArn"
        ]
    )


def test_a_join_s_counted_members_rise_as_the_page_refreshes(
    browser: WebDriver, server: Server, page: str
) -> None:
    # GIVEN a parent waiting on a join of 20 members taking 1 to 8 seconds each
    members = [simulate(f"join-{i:02d}", seconds=1 + i * 7 // MEMBERS) for i in range(MEMBERS)]
    start(server, "wait-for-join", "ui-join", {"dependencies": members, "timeout_seconds": 300})
    # WHEN the page is loaded once, and shows the join
    browser.get(page)
    browser.execute_script("window.notReloaded = true;")
    row = "tr.join[data-join-id] span.counted"

    def shown() -> list[int]:
        text = text_of(browser, row)
        return [] if text is None else [int(text)]

    (first,) = wait_until(shown, timeout=60)
    assert text_of(browser, "tr.join span.total") == str(MEMBERS)
    # THEN, without a reload, a later refresh shows more members counted
    wait_until(lambda: shown() > [first], timeout=60, every=0.2)
    assert browser.execute_script("return window.notReloaded === true;")
    assert int(browser.execute_script("return document.body.dataset.refreshes || 0;")) >= 1


def test_a_failed_parent_s_cause_is_shown(browser: WebDriver, server: Server, page: str) -> None:
    # GIVEN a parent that failed because its dependency failed
    bad = simulate("bad", outcome="fail")
    arn = start(server, "wait-for-dependencies", "ui-failed", {"dependencies": [bad]})
    sfn = server.client("stepfunctions")
    described = wait_until(
        lambda: (d := sfn.describe_execution(executionArn=arn))["status"] != "RUNNING" and d,
        timeout=60,
    )
    assert described["status"] == "FAILED"
    # AND a row still naming it as a waiter (its notification not recorded yet)
    dependency = ProcessPayload.model_validate(bad).id
    server.dependencies().register(
        waiter(dependency, "ui-failed", parent="ui/failed", execution=arn)
    )
    # WHEN the page is loaded
    browser.get(page)
    # THEN the stuck parent shows it ended FAILED, with its execution's error and cause
    from selenium.webdriver.common.by import By  # noqa: PLC0415

    def parent_row() -> str | None:
        for element in browser.find_elements(By.CSS_SELECTOR, "tr.stuck-parent"):
            if "ui/failed" in element.text:
                return str(element.text)
        return None

    text = wait_until(parent_row, timeout=30)
    assert "parent ended: FAILED" in text
    assert str(described["error"]) in text
    assert str(described["cause"]).splitlines()[0][:60] in text
    # AND the dependency holding it shows its own error
    assert "TaskFailed: simulated task failure" in text


def test_a_cycle_is_drawn_with_red_edges(browser: WebDriver, server: Server, page: str) -> None:
    # GIVEN two payloads waiting on each other (rows as the tracker would write them)
    table = server.dependencies()
    table.register(waiter("ui/cycle-a", "ui-cycle-1", parent="ui/cycle-b"))
    table.register(waiter("ui/cycle-b", "ui-cycle-2", parent="ui/cycle-a"))
    # WHEN the page is loaded
    browser.get(page)
    from selenium.webdriver.common.by import By  # noqa: PLC0415

    # THEN the graph names the cycle and draws its two edges red
    wait_until(lambda: "ui/cycle-a ⇄ ui/cycle-b" in (text_of(browser, "#graph") or ""))
    red = browser.find_elements(By.CSS_SELECTOR, "#graph svg path.edge.cycle")
    assert len(red) == 2
    assert {edge.get_attribute("stroke") for edge in red} == {"#e03131"}
    titles = [
        str(title.get_attribute("textContent"))
        for title in browser.find_elements(By.CSS_SELECTOR, "#graph svg g.node title")
    ]
    assert "ui/cycle-a: no state" in titles


def test_page_two_shows_the_next_payloads(browser: WebDriver, server: Server, page: str) -> None:
    # GIVEN more payloads than a page holds
    states = server.states()
    for index in range(30):
        model = ProcessPayload.model_validate(simulate(f"page-{index:02d}"))
        states.claim(model, None)
        states.set_final(
            payload_id=model.id,
            workflow=model.workflow,
            state=PayloadState.SUCCEEDED,
            execution_arn="arn:done",
            attempt=1,
        )
    everything = sorted(item["payload_id"]["S"] for item in _scan(server))
    # WHEN page 1 is loaded, then its "next" link followed
    from selenium.webdriver.common.by import By  # noqa: PLC0415

    browser.get(page)

    def ids() -> list[str]:
        cells = browser.find_elements(By.CSS_SELECTOR, "#payloads td.payload-id")
        return [str(cell.text) for cell in cells]

    first = ids()
    assert f"({len(everything)} rows)" in (text_of(browser, "#payloads h2") or "")
    browser.find_element(By.CSS_SELECTOR, "#payloads .pager a.next").click()
    wait_until(lambda: text_of(browser, "#payloads .page-number") == "2")
    second = ids()
    # THEN page 2 holds the ids that follow page 1's, in order, never all of them at once
    assert first == everything[: len(first)]
    assert second == everything[len(first) : len(first) + len(second)]
    assert second
    assert len(first) == 25


def _scan(server: Server) -> list[dict[str, Any]]:
    client = server.client("dynamodb")
    pages = client.get_paginator("scan").paginate(TableName=server.outputs["StateTableName"])
    return [
        item
        for scanned in pages
        for item in scanned["Items"]
        if "payload_id" in item and "state" in item
    ]


# Read in one script, so every number comes from the same refresh of the sections.
_GLANCE = """
const number = (css) => Number(document.querySelector(css).textContent);
// "all" (an all-of join's quorum) and "5+" (a total not known yet) read as null.
const count = (cell) => (Number.isNaN(Number(cell.textContent)) ? null : Number(cell.textContent));
const widths = (row) => ["bar-succeeded", "bar-failed"].map((name) => {
  const part = row.querySelector("span." + name);
  return part.getBoundingClientRect().width / part.parentElement.getBoundingClientRect().width;
});
const joins = [...document.querySelectorAll("tr.join")].map((row) => ({
  name: row.querySelector("a.join-name").textContent,
  title: row.querySelector("a.join-name").title,
  id: row.dataset.joinId,
  decided: row.classList.contains("decided"),
  outcome: row.querySelector(".outcome").textContent,
  cause: (row.querySelector(".join-cause") || {}).textContent || "",
  text: row.querySelector(".progress-text").textContent,
  succeeded: Number(row.querySelector("span.succeeded").textContent),
  failed: Number(row.querySelector("span.failed").textContent),
  quorum: count(row.querySelector("span.quorum")),
  total: count(row.querySelector("span.total")),
  parts: widths(row),
}));
const parents = new Set(
  [...document.querySelectorAll("tr.waiting td:first-child")].map((cell) => cell.textContent));
const root = document.documentElement;
return {
  summary: {
    parents: number("#summary .parents-waiting"),
    joins: number("#summary .joins-running"),
    stuck: number("#summary .stuck-parents"),
    failed: number("#summary .failed-recently"),
  },
  parents: parents.size,
  parentPages: document.querySelector("#parents .page-number").textContent,
  running: document.querySelectorAll("tr.join.running").length,
  joinPages: document.querySelector("#joins .page-number").textContent,
  stuck: document.querySelector("#stuck h2 .count").textContent,
  joins: joins,
  page: [root.scrollWidth, root.clientWidth],
  tables: [...document.querySelectorAll("table")].map((t) => [t.scrollWidth, t.clientWidth]),
};
"""


def test_the_page_at_a_glance_at_1280_px(browser: WebDriver, server: Server, page: str) -> None:
    # GIVEN a page 1,280 px wide
    browser.set_window_size(1280, 1000)
    # AND a join of 3 needing 2 decided QuorumUnreachable (2 members failed)
    failing = [
        simulate("quorum-ok"),
        simulate("quorum-bad-1", outcome="fail"),
        simulate("quorum-bad-2", outcome="fail"),
    ]
    document = {"dependencies": failing, "quorum": 2, "timeout_seconds": 300}
    start(server, "wait-for-join", "ui-quorum", document)
    # AND a running join of 3 needing 2: one succeeded, one failed, one still running
    running = [
        simulate("half-ok"),
        simulate("half-bad", outcome="fail"),
        simulate("half-slow", seconds=60),
    ]
    document = {"dependencies": running, "quorum": 2, "timeout_seconds": 300}
    start(server, "wait-for-join", "ui-half", document)
    failures = {"FAILED", "INVALID", "ABORTED"}
    # WHEN the page shows both (the running one with its 2 finished members counted),
    # and as many failed payloads as the state table holds
    browser.get(page)

    def settled() -> dict[str, Any] | None:
        seen: dict[str, Any] = browser.execute_script(_GLANCE)
        by_parent = {join["name"].split(" · ")[0]: join for join in seen["joins"]}
        decided, half = by_parent.get("ui-quorum"), by_parent.get("ui-half")
        failed = sum(1 for item in _scan(server) if item["state"]["S"] in failures)
        if decided is None or half is None or half["succeeded"] + half["failed"] < 2:
            return None
        if not decided["decided"] or seen["summary"]["failed"] != failed:
            return None
        return seen | {"decided": decided, "half": half}

    seen = wait_until(settled, timeout=60, every=0.2)
    decided, half = seen["decided"], seen["half"]
    # THEN the decided join is still listed, named by its parent and short id, with its
    # outcome and cause, its whole id in the title
    assert decided["title"] == decided["id"]
    assert decided["name"] == f"ui-quorum · join {decided['id'][:8]}"
    assert decided["outcome"] == "failed: QuorumUnreachable"
    assert "quorum 2 of 3 allows at most 1 failed" in decided["cause"]
    # AND the running join's bar is half green (1 of 2 needed) and half red (2 failures
    # decide it), never two thirds done, and its text says so
    assert (half["succeeded"], half["failed"], half["quorum"], half["total"]) == (1, 1, 2, 3)
    assert half["text"] == "1 of 2 needed succeeded, 1 failed (1 more failure decides)"
    assert [round(part, 2) for part in half["parts"]] == [0.5, 0.5]
    # AND every join's bar measures its counts against its quorum
    for join in seen["joins"]:
        # An all-of join (quorum "all") needs every member, and its first failure decides it.
        needed = join["quorum"] or join["total"]
        to_fail = join["total"] - join["quorum"] + 1 if join["quorum"] else 1
        if needed:
            assert abs(join["parts"][0] - min(1.0, join["succeeded"] / needed)) < 0.01, join
        assert abs(join["parts"][1] - min(1.0, join["failed"] / to_fail)) < 0.01, join
    # AND the summary's numbers are the sections' own (one page of each here)
    summary = seen["summary"]
    assert (seen["parentPages"], seen["joinPages"]) == ("1", "1")
    assert summary["parents"] == seen["parents"] >= 1  # ui-half (ui-quorum was told)
    assert summary["joins"] == seen["running"] >= 1
    assert seen["stuck"] == f"({summary['stuck']} row{'' if summary['stuck'] == 1 else 's'})"
    assert summary["failed"] >= 3  # the 2 members above and at least one more
    # AND neither the page nor any table is wider than the window
    assert seen["page"][0] <= seen["page"][1] <= 1280
    assert all(scroll <= client for scroll, client in seen["tables"]), seen["tables"]
    # AND the join's own page names it the same way, its whole id wrapping within the page
    from selenium.webdriver.common.by import By  # noqa: PLC0415

    browser.get(f"{page}join/{decided['id']}")
    assert text_of(browser, "h1") == decided["name"]
    assert text_of(browser, "code.join-id") == decided["id"]
    width = browser.execute_script(
        "return [document.documentElement.scrollWidth, document.documentElement.clientWidth];"
    )
    assert width[0] <= width[1]
    assert browser.find_element(By.CSS_SELECTOR, ".join-cause").text == decided["cause"]


# The join page's picture and what holds the join, read in one script.
_JOIN_PAGE = """
const line = (css) => document.querySelector(css).getAttribute("points").trim().split(/\\s+/);
return {
  succeeded: line("polyline.succeeded-line"),
  failed: line("polyline.failed-line"),
  quorum: document.querySelectorAll("line.quorum").length,
  deadline: document.querySelectorAll("line.deadline").length,
  label: document.querySelector("svg.timeline").getAttribute("aria-label"),
  rate: document.querySelector("p.rate").textContent,
  holds: [...document.querySelectorAll("#members tr.member")].map((row) =>
    [...row.querySelectorAll("td")].map((cell) => cell.textContent)),
  width: [document.documentElement.scrollWidth, document.documentElement.clientWidth],
};
"""


def test_a_join_s_page_draws_its_members_over_time_and_lists_what_holds_it(
    browser: WebDriver, server: Server, page: str
) -> None:
    # GIVEN a running 3-of-4 join with a deadline an hour away: two succeeded, one failed,
    # one still running
    members = [
        simulate("pic-ok-1"),
        simulate("pic-ok-2"),
        simulate("pic-bad", outcome="fail"),
        simulate("pic-slow", seconds=300),
    ]
    document = {"dependencies": members, "quorum": 3, "deadline": 3600, "timeout_seconds": 7200}
    start(server, "wait-for-join", "ui-picture", document)
    browser.set_window_size(1280, 1000)
    browser.get(page)

    def join_link() -> str | None:
        links: list[str] = browser.execute_script(
            "return [...document.querySelectorAll('tr.join a.join-name')]"
            ".filter((a) => a.textContent.startsWith('ui-picture'))"
            ".map((a) => a.getAttribute('href'));"
        )
        return links[0] if links else None

    href = wait_until(join_link, timeout=60, every=0.2)

    def drawn() -> dict[str, Any] | None:
        browser.get(page.rstrip("/") + href)
        seen: dict[str, Any] = browser.execute_script(_JOIN_PAGE)
        return seen if "2 succeeded, 1 failed" in seen["label"] else None

    # WHEN its page shows the three ends
    seen = wait_until(drawn, timeout=60, every=0.5)
    # THEN the picture steps up once per end: two steps of success, one of failure, each
    # drawn from the join's start to now, with the quorum to reach (no deadline yet in view)
    assert len(seen["succeeded"]) == 2 + 2 * 2
    assert len(seen["failed"]) == 2 + 2 * 1
    assert (seen["quorum"], seen["deadline"]) == (1, 0)
    # AND it says the rate and when the join is decided: its deadline, unless the rate
    # reaches the quorum first
    assert "members/min over the last" in seen["rate"]
    assert "decided at this rate in ~" in seen["rate"] or "its deadline decides it" in seen["rate"]
    # AND what holds it: the failed member with its error and cause, the running one, no others
    held = {row[0].rsplit("/", 1)[-1]: row for row in seen["holds"]}
    assert set(held) == {"pic-bad", "pic-slow"}
    assert held["pic-bad"][1] == "FAILED"
    assert held["pic-bad"][3] == "TaskFailed: simulated task failure"
    assert held["pic-slow"][1] in {"PROCESSING", "CLAIMED"}
    assert held["pic-slow"][2]  # an age
    # AND the page fits the window
    assert seen["width"][0] <= seen["width"][1]
