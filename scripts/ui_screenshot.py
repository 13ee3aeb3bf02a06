"""A screenshot of ``dependency-tracker ui`` in headless Chromium, in one of two scenes.

Starts ``dependency-tracker serve`` on a free port and the ui page against it.
The default scene is a parent waiting on a join of 200 ``simulate`` payloads (1
to 20 seconds each), saved once part of the join is counted. ``--joins`` is the
scene of docs/images/ui-joins.png, 1,280 px wide: a join of 3 needing 2 decided
failed (QuorumUnreachable) and one running with 1 of 2 needed succeeded and 1
failed. Needs /usr/bin/chromium, /usr/bin/chromedriver and selenium (the dev
extra). Usage: ``.venv/bin/python scripts/ui_screenshot.py [--joins] [OUTPUT.png]``
(``build/ui/join-200.png`` by default, ``docs/images/ui-joins.png`` with ``--joins``).
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


def simulate(item: str, *, seconds: int = 0, outcome: str = "succeed") -> dict[str, Any]:
    """A ``simulate`` payload of the joins scene."""
    return {
        "type": "FeatureCollection",
        "features": [{"type": "Feature", "id": item, "collection": "screenshot"}],
        "process": [
            {
                "workflow": "simulate",
                "tasks": {"simulate": {"seconds": seconds, "outcome": outcome}},
            }
        ],
    }


# The joins scene: execution name -> members of a join of 3 needing 2.
JOINS_SCENE = {
    "mosaic-run-6": [simulate("tile-a"), *(simulate(f"tile-{x}", outcome="fail") for x in "bc")],
    "mosaic-run-7": [
        simulate("tile-d"),
        simulate("tile-e", outcome="fail"),
        simulate("tile-f", seconds=120),
    ],
}


def counted(driver: webdriver.Chrome) -> int | None:
    """The join's counted members as the page shows them (None: not shown yet)."""
    try:
        return int(driver.find_element(By.CSS_SELECTOR, "tr.join span.counted").text)
    except (NoSuchElementException, StaleElementReferenceException, ValueError):
        return None


def main(output: Path, *, joins_scene: bool = False) -> int:
    """Run the scene, take the screenshot once it shows what it is for."""
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
        sfn = target.client("stepfunctions")
        machine = outputs["StateMachines"]["wait-for-join"]
        if joins_scene:
            for name, members in JOINS_SCENE.items():
                document = {"dependencies": members, "quorum": 2, "timeout_seconds": 600}
                sfn.start_execution(stateMachineArn=machine, name=name, input=json.dumps(document))
        else:
            document = {"dependencies": [member(i) for i in range(MEMBERS)], "timeout_seconds": 600}
            sfn.start_execution(
                stateMachineArn=machine, name="all-of-200", input=json.dumps(document)
            )
        http = page_server(create_app(target, Settings(refresh_seconds=2)))
        threading.Thread(target=http.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{http.server_port}/"
        return _shoot_joins(url, output) if joins_scene else _shoot(url, output)
    finally:
        serve.send_signal(signal.SIGINT)
        serve.wait(timeout=60)


def _driver(width: int, height: int) -> webdriver.Chrome:
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage"):
        options.add_argument(argument)
    options.add_argument(f"--window-size={width},{height}")
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)


def _shoot_joins(url: str, output: Path) -> int:
    """Once one join shows decided and the other 2 members counted, save the page's top."""
    driver = _driver(1280, 1180)
    try:
        driver.get(url)
        deadline = time.monotonic() + DEADLINE_SECONDS
        while time.monotonic() < deadline:
            try:
                decided = driver.find_elements(By.CSS_SELECTOR, "tr.join.decided")
                running = driver.find_elements(By.CSS_SELECTOR, "tr.join.running span.counted")
                ready = len(decided) == 1 and [cell.text for cell in running] == ["2"]
            except StaleElementReferenceException:
                ready = False
            if ready:
                output.parent.mkdir(parents=True, exist_ok=True)
                driver.save_screenshot(str(output))
                print(f"{output}: one join decided, one running")
                return 0
            time.sleep(0.5)
        print("the joins scene never showed one join decided and one running", file=sys.stderr)
        return 1
    finally:
        driver.quit()


def _shoot(url: str, output: Path) -> int:
    driver = _driver(1400, 2200)
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
    arguments = sys.argv[1:]
    scene = "--joins" in arguments
    paths = [argument for argument in arguments if argument != "--joins"]
    default = "docs/images/ui-joins.png" if scene else "build/ui/join-200.png"
    sys.exit(main(Path(paths[0] if paths else default), joins_scene=scene))
