"""A screenshot of ``dependency-tracker ui`` during a 200-member join, in headless Chromium.

Starts ``dependency-tracker serve`` on a free port, a parent waiting on a join of
200 ``simulate`` payloads (1 to 20 seconds each), the ui page against it, and
saves the page once part of the join is counted. Needs /usr/bin/chromium,
/usr/bin/chromedriver and selenium (the dev extra). Usage:
``.venv/bin/python scripts/ui_screenshot.py [build/ui/join-200.png]``.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from selenium import webdriver
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

from dependency_tracker_cli.target import ConnectionOptions, Target
from dependency_tracker_cli.ui.app import Settings, create_app, page_server

MEMBERS = 200
DEADLINE_SECONDS = 300


def member(index: int) -> dict[str, Any]:
    """A ``simulate`` payload taking 1 to 20 seconds."""
    return {
        "type": "FeatureCollection",
        "features": [{"type": "Feature", "id": f"all-{index:03d}", "collection": "screenshot"}],
        "process": [{"workflow": "simulate", "tasks": {"simulate": {"seconds": 1 + index % 20}}}],
    }


def counted(driver: webdriver.Chrome) -> int | None:
    """The join's counted members as the page shows them (None: not shown yet)."""
    try:
        return int(driver.find_element(By.CSS_SELECTOR, "tr.join span.counted").text)
    except (NoSuchElementException, StaleElementReferenceException, ValueError):
        return None


def main(output: Path) -> int:
    """Run the join, take the screenshot once 20% to 80% of it is counted."""
    folder = Path(tempfile.mkdtemp(prefix="ui-screenshot-"))
    outputs_file = folder / "outputs.json"
    command = [sys.executable, "-m", "dependency_tracker_cli", "serve", "--port", "0"]
    command += ["--outputs-file", str(outputs_file), "--log-file", str(folder / "serve.log")]
    with (folder / "serve.out").open("wb") as log:
        serve = subprocess.Popen(command, stdout=log, stderr=log)  # noqa: S603
    try:
        deadline = time.monotonic() + 60
        while not outputs_file.exists():
            if serve.poll() is not None or time.monotonic() > deadline:
                print("serve did not start", file=sys.stderr)
                return 1
            time.sleep(0.2)
        outputs = json.loads(outputs_file.read_text())
        endpoint = str(outputs["EndpointUrl"])
        target = Target(ConnectionOptions(endpoint_url=endpoint, prefix=outputs["Prefix"]))
        target.client("stepfunctions").start_execution(
            stateMachineArn=outputs["StateMachines"]["wait-for-join"],
            name="all-of-200",
            input=json.dumps(
                {"dependencies": [member(i) for i in range(MEMBERS)], "timeout_seconds": 600}
            ),
        )
        http = page_server(create_app(target, Settings(refresh_seconds=2)))
        threading.Thread(target=http.serve_forever, daemon=True).start()
        return _shoot(f"http://127.0.0.1:{http.server_port}/", output)
    finally:
        serve.send_signal(signal.SIGINT)
        serve.wait(timeout=60)


def _shoot(url: str, output: Path) -> int:
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage"):
        options.add_argument(argument)
    options.add_argument("--window-size=1400,2200")
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    try:
        driver.get(url)
        deadline = time.monotonic() + DEADLINE_SECONDS
        while time.monotonic() < deadline:
            shown = counted(driver)
            if shown is not None and MEMBERS * 0.2 <= shown <= MEMBERS * 0.8:
                output.parent.mkdir(parents=True, exist_ok=True)
                driver.save_screenshot(str(output))
                print(f"{output}: {shown} of {MEMBERS} counted")
                return 0
            time.sleep(0.5)
        print("the join never showed 20% to 80% counted", file=sys.stderr)
        return 1
    finally:
        driver.quit()


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "build/ui/join-200.png")))
