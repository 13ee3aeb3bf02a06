"""``dependency-tracker ui`` in cirrus mode, in headless Chromium, on cirrus-geo's own state.

The page reads cirrus's state table through the stack's outputs, as ``ui
--stack-name`` does. A payload cirrus is running shows as running, one it
failed shows cirrus's own error: in the payload list and where each holds a
stuck parent. The stack and cirrus's work are test_operator_view's; the browser
rule (fail in CI, skip elsewhere) is tests/browser.py's.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest

from dependency_tracker_cli.target import ConnectionOptions, Target
from dependency_tracker_cli.ui.app import Settings, create_app
from tests.browser import chromium, served, texts_of
from tests.cirrus import test_operator_view as operator
from tests.cirrus.test_operator_view import CIRRUS_ERROR, FAILED, RUNNING, STACK_NAME
from tests.conftest import wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator

    from selenium.webdriver.remote.webdriver import WebDriver

    from dependency_tracker_local import EmbeddedStack

# The same fixtures, for a stack of this module's own (module scope).
stack = operator.stack
cirrus_at_work = operator.cirrus_at_work

# Each row's cells read in one script, so a refresh between two reads cannot mix pages.
_CELLS = """
return Array.from(document.querySelectorAll(arguments[0])).map(
    row => Array.from(row.querySelectorAll(arguments[1])).map(cell => cell.textContent.trim()));
"""


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    with chromium() as driver:
        yield driver


@pytest.fixture(scope="module")
def page(stack: EmbeddedStack) -> Iterator[str]:
    """The ui app in cirrus mode (from the stack's outputs), every waiting parent stuck."""
    target = Target(ConnectionOptions(stack_name=STACK_NAME))
    target.use_cirrus(prefix=None, state_table=None)
    assert target.cirrus_state_table == stack.outputs["CirrusStateTableName"]
    with served(create_app(target, Settings(refresh_seconds=1, stuck_after=timedelta(0)))) as url:
        yield url


def rows(driver: WebDriver, row: str, cell: str) -> list[list[str]]:
    found: Any = driver.execute_script(_CELLS, row, cell)
    return [[str(text) for text in cells] for cells in found]


def test_the_page_shows_cirrus_s_running_payload_running_and_its_failed_one_with_its_error(
    cirrus_at_work: str, browser: WebDriver, page: str
) -> None:
    # GIVEN cirrus running one payload and having failed another, parents waiting on both
    # WHEN the page is loaded
    browser.get(page)

    def payloads() -> dict[str, list[str]] | None:
        shown = {cells[0]: cells for cells in rows(browser, "#payloads tr.payload", "td")}
        return shown if {RUNNING, FAILED} <= shown.keys() else None

    listed: dict[str, list[str]] = wait_until(payloads, timeout=30, every=0.2)
    # THEN the payload list shows cirrus's states: running, and failed with cirrus's error
    assert listed[RUNNING][1:] == ["succeed", "PROCESSING", "", ""]
    assert listed[FAILED][1:] == ["fail", "FAILED", "", CIRRUS_ERROR]

    # AND the stuck parents say what holds them, in cirrus's words
    def holds() -> dict[str, str] | None:
        shown = {text.partition(":")[0]: text for text in texts_of(browser, "#stuck li.hold")}
        return shown if {RUNNING, FAILED} <= shown.keys() else None

    held: dict[str, str] = wait_until(holds, timeout=30, every=0.2)
    run = cirrus_at_work.split(":", 6)[-1]
    assert f"PROCESSING, running in cirrus (PROCESSING, {run})" in held[RUNNING]
    assert "not found" not in held[RUNNING]
    assert "FAILED, FAILED in cirrus, waiter not resolved" in held[FAILED]
    assert CIRRUS_ERROR in held[FAILED]
