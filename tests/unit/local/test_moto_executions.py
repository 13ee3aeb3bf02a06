"""Step Functions executions found by key (``moto_executions``) answer as moto's scans do.

Each scenario runs twice, once with moto's own scans and once indexed, and the
answers must be the same.
"""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from dependency_tracker_local.moto_executions import _Index, indexed_executions
from tests.conftest import wait_until

REGION = "us-east-1"
ROLE = "arn:aws:iam::123456789012:role/r"
WAITING = json.dumps(
    {"StartAt": "W", "States": {"W": {"Type": "Wait", "Seconds": 3600, "End": True}}}
)
PASSING = json.dumps({"StartAt": "P", "States": {"P": {"Type": "Pass", "End": True}}})


def _scenario() -> dict[str, Any]:
    """What a client sees of 25 runs of two machines: lists, pages, lookups, name clashes."""
    seen: dict[str, Any] = {}
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        sfn = boto3.client("stepfunctions", region_name=REGION)
        waiting = sfn.create_state_machine(name="waiting", definition=WAITING, roleArn=ROLE)
        passing = sfn.create_state_machine(name="passing", definition=PASSING, roleArn=ROLE)
        for i in range(15):
            sfn.start_execution(
                stateMachineArn=passing["stateMachineArn"], name=f"p{i}", input="{}"
            )
        for i in range(10):
            sfn.start_execution(
                stateMachineArn=waiting["stateMachineArn"], name=f"w{i}", input="{}"
            )
        # Idempotent: the same name and input while it runs is that run.
        again = sfn.start_execution(
            stateMachineArn=waiting["stateMachineArn"], name="w3", input="{}"
        )
        seen["again"] = again["executionArn"]
        for name, machine, body in (("w3", waiting, '{"other": 1}'), ("p2", passing, "{}")):
            with pytest.raises(ClientError) as clash:
                sfn.start_execution(
                    stateMachineArn=machine["stateMachineArn"], name=name, input=body
                )
            seen[f"clash {name}"] = clash.value.response["Error"]["Code"]

        def listed(**kwargs: Any) -> list[str]:
            return [
                e["name"]
                for e in sfn.list_executions(stateMachineArn=passing["stateMachineArn"], **kwargs)[
                    "executions"
                ]
            ]

        wait_until(
            lambda: listed(statusFilter="SUCCEEDED") and len(listed(statusFilter="SUCCEEDED")) == 15
        )
        for arn in (waiting["stateMachineArn"], passing["stateMachineArn"]):
            pages, token = [], None
            while True:
                more: dict[str, Any] = {"nextToken": token} if token else {}
                page = sfn.list_executions(stateMachineArn=arn, maxResults=4, **more)
                pages.append([e["name"] for e in page["executions"]])
                token = page.get("nextToken")
                if token is None:
                    break
            seen[f"pages {arn}"] = pages
            seen[f"running {arn}"] = [
                e["name"]
                for e in sfn.list_executions(stateMachineArn=arn, statusFilter="RUNNING")[
                    "executions"
                ]
            ]
        prefix = waiting["stateMachineArn"].replace(":stateMachine:", ":execution:")
        seen["described"] = sfn.describe_execution(executionArn=f"{prefix}:w7")["name"]
        with pytest.raises(ClientError) as missing:
            sfn.describe_execution(executionArn=f"{prefix}:nobody")
        seen["missing"] = missing.value.response["Error"]["Code"]
    return seen


def test_indexed_answers_equal_moto_scans() -> None:
    scanned = _scenario()
    with indexed_executions():
        indexed = _scenario()
    assert indexed == scanned
    assert scanned["clash w3"] == scanned["clash p2"] == "ExecutionAlreadyExists"
    assert scanned["missing"] == "ExecutionDoesNotExist"
    assert scanned["described"] == "w7"
    assert scanned["again"].endswith(":w3")
    pages = next(
        value for key, value in scanned.items() if key.startswith("pages") and "waiting" in key
    )
    assert [name for page in pages for name in page] == [f"w{i}" for i in reversed(range(10))]


def _stops_between_lists() -> list[Any]:
    """RUNNING and full lists asked for while runs start and stop between them."""
    seen: list[Any] = []
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        sfn = boto3.client("stepfunctions", region_name=REGION)
        arn = sfn.create_state_machine(name="w", definition=WAITING, roleArn=ROLE)[
            "stateMachineArn"
        ]
        prefix = arn.replace(":stateMachine:", ":execution:")

        def names(**kwargs: Any) -> list[str]:
            page = sfn.list_executions(stateMachineArn=arn, **kwargs)
            return [e["name"] for e in page["executions"]]

        def stop(name: str) -> None:
            # moto stops a run in its own thread: wait until it has.
            sfn.stop_execution(executionArn=f"{prefix}:{name}")
            wait_until(
                lambda: (
                    sfn.describe_execution(executionArn=f"{prefix}:{name}")["status"] == "ABORTED"
                )
            )

        for step in range(3):
            for i in range(4):
                sfn.start_execution(stateMachineArn=arn, name=f"s{step}-{i}", input="{}")
            # A lookup between starts and lists indexes the new runs without listing them.
            seen.append(sfn.describe_execution(executionArn=f"{prefix}:s{step}-0")["status"])
            stop(f"s{step}-1")
            seen.append(names(statusFilter="RUNNING"))
            stop(f"s{step}-2")
            seen.append(names(statusFilter="ABORTED"))
            seen.append(names(statusFilter="RUNNING"))
            seen.append(names())
    return seen


def test_running_list_follows_stops_as_moto_does() -> None:
    scanned = _stops_between_lists()
    with indexed_executions():
        indexed = _stops_between_lists()
    assert indexed == scanned
    assert scanned[-2] == ["s2-3", "s2-0", "s1-3", "s1-0", "s0-3", "s0-0"]


class _Run:
    """A stand-in execution that counts how often its status is read."""

    reads = 0

    def __init__(self, number: int, start: int, status: str = "RUNNING") -> None:
        self.execution_arn = f"arn:aws:states:r:1:execution:m:{number}"
        self.name = str(number)
        self.start_date = start
        self._status = status

    @property
    def status(self) -> str:
        _Run.reads += 1
        return self._status


def test_index_orders_ties_as_a_stable_sort_and_reads_only_runs_still_running() -> None:
    executions: list[Any] = []
    index = _Index(executions)
    # Batches with start dates equal to, older and newer than the runs before them.
    for batch in ([5, 5, 3], [5, 7, 7], [1, 7, 9], [9, 9], [2]):
        executions.extend(_Run(len(executions), start) for start in batch)
        index.update()
        expected = sorted(executions, key=lambda e: e.start_date, reverse=True)
        assert index.newest_first() == expected
        assert index.newest_first("RUNNING") == expected
    for run in executions[:-1]:
        run._status = "SUCCEEDED"
    index.newest_first("RUNNING")
    _Run.reads = 0
    running = index.newest_first("RUNNING")
    assert [run.name for run in running] == ["11"]
    # Runs seen stopped are not read again: a round costs what is still running.
    assert _Run.reads == 1
