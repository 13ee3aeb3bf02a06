"""Headless Chromium for the page's browser tests (tests/e2e, tests/cirrus), and the page served.

Without Chromium, chromedriver or selenium a browser test fails in CI
(``CI=true``) and is skipped elsewhere, with one line saying what is missing.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
from typing import TYPE_CHECKING

import pytest

from dependency_tracker_cli.ui.app import page_server

if TYPE_CHECKING:
    from collections.abc import Iterator

    from flask import Flask
    from selenium.webdriver.remote.webdriver import WebDriver

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


def missing_browser() -> str | None:
    """What the browser tests lack (Chromium, chromedriver, selenium), or None."""
    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if not shutil.which(path)]
    try:
        import selenium  # noqa: F401, PLC0415
    except ImportError:
        missing.append("the selenium package (pip install -e '.[dev]')")
    return ", ".join(missing) or None


@contextlib.contextmanager
def chromium() -> Iterator[WebDriver]:
    """A headless Chromium; without one, fail in CI and skip elsewhere (one line either way)."""
    missing = missing_browser()
    if missing is not None:
        line = f"browser tests need {missing} (apt-get install chromium chromium-driver)"
        if os.environ.get("CI") == "true":
            pytest.fail(line, pytrace=False)
        pytest.skip(line)
    from selenium import webdriver  # noqa: PLC0415
    from selenium.webdriver.chrome.service import Service  # noqa: PLC0415

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage"):
        options.add_argument(argument)
    options.add_argument("--window-size=1400,1000")
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


@contextlib.contextmanager
def served(app: Flask) -> Iterator[str]:
    """``app`` served on a free local port in a thread; yields the page's URL."""
    http = page_server(app)
    thread = threading.Thread(target=http.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{http.server_port}/"
    finally:
        http.shutdown()
        http.server_close()


def text_of(driver: WebDriver, css: str) -> str | None:
    """Text of the first element ``css`` selects, or None (the page may be mid-refresh)."""
    from selenium.common.exceptions import (  # noqa: PLC0415
        NoSuchElementException,
        StaleElementReferenceException,
    )
    from selenium.webdriver.common.by import By  # noqa: PLC0415

    try:
        return str(driver.find_element(By.CSS_SELECTOR, css).text)
    except (NoSuchElementException, StaleElementReferenceException):
        return None


def texts_of(driver: WebDriver, css: str) -> list[str]:
    """Texts of every element ``css`` selects (none while the page is mid-refresh)."""
    from selenium.common.exceptions import StaleElementReferenceException  # noqa: PLC0415
    from selenium.webdriver.common.by import By  # noqa: PLC0415

    try:
        return [str(element.text) for element in driver.find_elements(By.CSS_SELECTOR, css)]
    except StaleElementReferenceException:
        return []
