"""``list``, ``logs`` and ``rerun`` against ``dependency-tracker serve``: a failed payload, found,
read about and run again.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest

from dependency_tracker.core.enums import PayloadState
from tests.conftest import wait_until
from tests.e2e.serving import serving

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.e2e

ITEM = "ops-1"
PID = f"ops/workflow-simulate/{ITEM}"


def failing() -> dict[str, Any]:
    """A payload the ``simulate`` workflow fails."""
    return {
        "type": "FeatureCollection",
        "features": [{"type": "Feature", "id": ITEM, "collection": "ops"}],
        "process": [
            {"workflow": "simulate", "tasks": {"simulate": {"seconds": 0, "outcome": "fail"}}}
        ],
    }


def test_a_failed_payload_is_listed_its_logs_read_and_it_is_rerun(tmp_path: Path) -> None:
    with serving(tmp_path) as server:
        # GIVEN a payload that failed on serve
        server.client("sqs").send_message(
            QueueUrl=server.outputs["ProcessQueueUrl"], MessageBody=json.dumps(failing())
        )
        states = server.states()

        def ended(attempt: int) -> bool:
            item = states.get(PID)
            return item is not None and item.attempt == attempt and item.state.is_terminal

        wait_until(lambda: ended(1), timeout=60)
        assert states.get(PID).state is PayloadState.FAILED  # type: ignore[union-attr]

        # WHEN an operator lists failed payloads
        listed = server.cli("list", "--state", "FAILED", "--workflow", "simulate", "--json")
        # THEN it is there
        assert listed.exit_code == 0, listed.output
        assert [row["payload_id"] for row in json.loads(listed.stdout)["payloads"]] == [PID]

        # WHEN its logs are asked for (serve's outputs name the log file)
        logs = server.cli("logs", PID, "--json")
        # THEN the handlers' records about it come from serve's log file
        assert logs.exit_code == 0, logs.output
        lines = [json.loads(line) for line in logs.stdout.splitlines()]
        assert lines, logs.stderr
        assert {line["source"] for line in lines} == {server.outputs["LogFile"]}
        assert "process" in {line["function"] for line in lines}

        # WHEN it is rerun
        rerun = server.cli("rerun", PID, "--json")
        # THEN the tracker runs a second attempt from the same input
        assert rerun.exit_code == 0, rerun.output
        assert json.loads(rerun.stdout)["payloads"][0]["document_from"] == "execution input"
        wait_until(lambda: ended(2), timeout=60)
