"""The operator CLI against ``dependency-tracker serve``, driven like any other program would.

One ``serve`` runs in a subprocess on a free port for the whole module; the
tests reach it with plain boto3 clients and with the CLI's ``--endpoint-url``,
and the last test stops it with Ctrl-C.
"""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
from datetime import timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

import pytest

from dependency_tracker.core.enums import PayloadState, utcnow
from dependency_tracker_local import LocalStack
from tests.conftest import wait_until
from tests.e2e.serving import Server, serving, write
from tests.unit.cli.rows import TOKEN_PREFIX, waiter

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


pytestmark = pytest.mark.e2e

OUTPUT_KEYS = {
    "ProcessQueueUrl",
    "ProcessDlqUrl",
    "StateTableName",
    "DependencyTableName",
    "PayloadBucketName",
    "Prefix",
    "Region",
    "StateMachines",
    "EndpointUrl",
}
PARENT_ID = "cli/parent-1"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving(tmp_path_factory.mktemp("serve")) as running:
        yield running


def simulate(item: str, *, seconds: int = 0, outcome: str = "succeed") -> dict[str, Any]:
    """A payload for the ``simulate`` workflow."""
    return {
        "type": "FeatureCollection",
        "features": [{"type": "Feature", "id": item, "collection": "cli"}],
        "process": [
            {
                "workflow": "simulate",
                "tasks": {"simulate": {"seconds": seconds, "outcome": outcome}},
            }
        ],
    }


def sim_id(item: str) -> str:
    return f"cli/workflow-simulate/{item}"


@pytest.fixture(scope="module")
def parent(server: Server) -> str:
    """A real parent waiting on a fast dependency (done) and a slow one (running)."""
    sfn = server.client("stepfunctions")
    execution = sfn.start_execution(
        stateMachineArn=server.outputs["StateMachines"]["wait-for-dependencies"],
        name="cli-parent-1",
        input=json.dumps(
            {
                "dependencies": [simulate("fast"), simulate("slow", seconds=300)],
                "timeout_seconds": 600,
                "payload_id": PARENT_ID,
            }
        ),
    )["executionArn"]
    dependencies = server.dependencies()

    def waiting() -> bool:
        fast = list(dependencies.waiters(sim_id("fast")))
        slow = list(dependencies.waiters(sim_id("slow")))
        return bool(fast and fast[0].notified_at and slow)

    wait_until(waiting, timeout=30)
    return str(execution)


# ---------------------------------------------------------------------------- serve


def test_serve_publishes_its_outputs_and_a_plain_boto3_client_uses_them(server: Server) -> None:
    # GIVEN the outputs serve wrote
    outputs = server.outputs
    assert set(outputs) >= OUTPUT_KEYS
    endpoint = urlparse(outputs["EndpointUrl"])
    assert endpoint.hostname == "127.0.0.1"
    assert endpoint.port
    assert outputs["Prefix"] == "deptrack"
    assert set(outputs["StateMachines"]) >= {"wait-for-dependencies", "wait-for-join", "simulate"}
    assert outputs["ProcessQueueUrl"].startswith(outputs["EndpointUrl"])
    # WHEN a separate boto3 client sends a payload to the process queue
    server.client("sqs").send_message(
        QueueUrl=outputs["ProcessQueueUrl"], MessageBody=json.dumps(simulate("plain"))
    )
    # THEN the tracker behind the endpoint runs it
    states = server.states()

    def succeeded() -> bool:
        item = states.get(sim_id("plain"))
        return item is not None and item.state is PayloadState.SUCCEEDED

    wait_until(succeeded, timeout=30)


def test_a_state_machine_created_after_serve_started_is_managed(
    server: Server, tmp_path: Path
) -> None:
    # GIVEN a workflow created by a client after serve started
    definition = {"StartAt": "Done", "States": {"Done": {"Type": "Pass", "End": True}}}
    server.client("stepfunctions").create_state_machine(
        name="deptrack-late",
        roleArn="arn:aws:iam::123456789012:role/any",
        definition=json.dumps(definition),
    )
    payload = {
        "type": "FeatureCollection",
        "features": [{"type": "Feature", "id": "late-1", "collection": "cli"}],
        "process": [{"workflow": "late"}],
    }
    # WHEN a payload for it is published and waited for
    result = server.cli("publish", write(tmp_path, "late.json", payload), "--wait", "--json")
    # THEN the tracker started it and recorded its end
    assert result.exit_code == 0, result.output
    (status,) = json.loads(result.stdout)["payloads"]
    assert status["payload_id"] == "cli/workflow-late/late-1"
    assert status["state"] == "SUCCEEDED"
    assert ":execution:deptrack-late:" in status["execution_arn"]


# ---------------------------------------------------------------------------- publish, status


def test_publish_wait_follows_each_payload_to_its_end(server: Server, tmp_path: Path) -> None:
    ok = write(tmp_path, "ok.json", simulate("pub-ok", seconds=1))
    bad = write(tmp_path, "bad.json", simulate("pub-bad", outcome="fail"))
    # WHEN a succeeding and a failing payload are published and waited for
    result = server.cli("publish", ok, bad, "--wait", "--json")
    # THEN both are reported terminal, and the failure makes the exit code non-zero
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert [p["payload_ids"] for p in report["published"]] == [
        [sim_id("pub-ok")],
        [sim_id("pub-bad")],
    ]
    states = {p["payload_id"]: p["state"] for p in report["payloads"]}
    assert states == {sim_id("pub-ok"): "SUCCEEDED", sim_id("pub-bad"): "FAILED"}
    assert result.stderr == (
        f"error: 1 of 2 payload(s) did not succeed: {sim_id('pub-bad')} (FAILED)\n"
    )
    # AND publishing the finished success again replays it at once
    again = server.cli("publish", ok, "--wait")
    assert again.exit_code == 0, again.output
    assert "SUCCEEDED" in again.stdout


def test_publish_refuses_an_invalid_payload_with_the_reason(server: Server, tmp_path: Path) -> None:
    result = server.cli("publish", write(tmp_path, "bad.json", {"features": []}))
    assert result.exit_code == 3
    assert result.stderr.startswith("error: invalid message: ")
    assert "process: Field required" in result.stderr


def test_status_shows_state_attempts_executions_error_and_result(server: Server) -> None:
    # GIVEN a payload that succeeded and one that failed
    for item, outcome in (("st-ok", "succeed"), ("st-bad", "fail")):
        server.client("sqs").send_message(
            QueueUrl=server.outputs["ProcessQueueUrl"],
            MessageBody=json.dumps(simulate(item, outcome=outcome)),
        )
    states = server.states()

    def ended() -> bool:
        items = states.batch_get([sim_id("st-ok"), sim_id("st-bad")])
        return len(items) == 2 and all(item.state.is_terminal for item in items.values())

    wait_until(ended, timeout=30)
    # WHEN status is asked for both, and for an unknown id
    result = server.cli("status", sim_id("st-ok"), sim_id("st-bad"), "cli/nope", "--json")
    # THEN it shows each payload, and exits 5 for the unknown one
    assert result.exit_code == 5
    assert result.stderr == "error: payload not found: cli/nope\n"
    ok, bad, missing = json.loads(result.stdout)
    assert ok["state"] == "SUCCEEDED"
    assert ok["attempt"] == 1
    assert len(ok["executions"]) == 1
    assert ok["result"]["items"] == [{"id": "st-ok", "collection": "cli"}]
    assert bad["state"] == "FAILED"
    assert bad["last_error"] == "TaskFailed"
    assert missing == {"payload_id": "cli/nope", "found": False}
    human = server.cli("status", sim_id("st-bad"))
    assert human.exit_code == 0, human.output
    assert "TaskFailed" in human.stdout
    assert "executions (1)" in human.stdout


# ---------------------------------------------------------------------------- waiters, graph, stuck


def test_waiters_show_who_waits_since_when_and_whether_told(server: Server, parent: str) -> None:
    token = next(server.dependencies().waiters(sim_id("slow"))).task_token
    # WHEN the slow dependency's waiters are listed
    result = server.cli("waiters", sim_id("slow"), "--json")
    # THEN the real parent is there, not notified, with its token only as a hash
    assert result.exit_code == 0, result.output
    assert token not in result.stdout
    (view,) = json.loads(result.stdout)["waiters"]
    assert view["kind"] == "token"
    assert view["waiter"].startswith("sha256:")
    assert view["parent_execution"] == parent
    assert view["waiter_payload_id"] == PARENT_ID
    assert view["state"] == "PROCESSING"
    assert view["notified"] is False
    # AND the fast dependency's waiter was told
    (done,) = json.loads(server.cli("waiters", sim_id("fast"), "--json").stdout)["waiters"]
    assert done["notified"] is True
    assert done["notify_outcome"] == "SENT:SUCCEEDED"
    human = server.cli("waiters", sim_id("slow"))
    assert human.exit_code == 0, human.output
    assert "cli-parent-1" in human.stdout
    assert token not in human.stdout


def test_waiters_of_a_mistyped_id_fail_instead_of_reading_as_nobody_waits(
    server: Server, parent: str
) -> None:
    # GIVEN a dependency a real parent waits on
    typo = sim_id("slow").replace("slow", "slwo")
    # WHEN its id is mistyped
    result = server.cli("waiters", typo)
    # THEN the command exits 5 and says the id is unknown
    assert result.exit_code == 5
    assert (
        result.stderr
        == f"error: payload not found: {typo} (no state item, and nothing waits on it)\n"
    )
    assert result.stdout == ""


def test_graph_draws_parents_to_dependencies_and_finds_cycles(server: Server, parent: str) -> None:
    # GIVEN two payloads that wait on each other, next to the real parent
    table = server.dependencies()
    table.register(waiter("cycle/a", "cycle-1", parent="cycle/b"))
    table.register(waiter("cycle/b", "cycle-2", parent="cycle/a"))
    # WHEN the graph is asked for as JSON
    result = server.cli("graph", "--json")
    # THEN the live wait is an edge, with the dependency's state, and the cycle is named
    assert result.exit_code == 0, result.output
    graph = json.loads(result.stdout)
    edges = {(edge["from"], edge["to"]) for edge in graph["edges"]}
    assert (f"payload:{PARENT_ID}", f"payload:{sim_id('slow')}") in edges
    assert (f"payload:{PARENT_ID}", f"payload:{sim_id('fast')}") not in edges  # told: over
    nodes = {node["id"]: node for node in graph["nodes"]}
    assert nodes[f"payload:{sim_id('slow')}"]["state"] == "PROCESSING"
    assert ["payload:cycle/a", "payload:cycle/b"] in graph["cycles"]
    assert "cycle:" in result.stderr
    assert TOKEN_PREFIX not in result.stdout
    # AND --root keeps only what the parent waits on, in each format
    rooted = json.loads(server.cli("graph", "--root", PARENT_ID, "--json").stdout)
    assert {node["id"] for node in rooted["nodes"]} == {
        f"payload:{PARENT_ID}",
        f"payload:{sim_id('slow')}",
    }
    mermaid = server.cli("graph", "--root", "cli-parent-1", "--format", "mermaid")
    assert mermaid.exit_code == 0, mermaid.output
    assert mermaid.stdout.startswith("flowchart LR")
    assert "PROCESSING" in mermaid.stdout
    dot = server.cli("graph", "--root", PARENT_ID, "--format", "dot")
    assert dot.stdout.startswith("digraph waitfor {")
    unknown = server.cli("graph", "--root", "cli/nobody")
    assert unknown.exit_code == 5


def test_stuck_lists_old_parents_and_what_holds_them(server: Server, parent: str) -> None:
    # GIVEN a parent that has waited two hours on a payload nobody started
    old = waiter("stuck/dep", "stuck-1", parent="stuck/parent", age=timedelta(hours=2))
    server.dependencies().register(
        old.model_copy(update={"created_at": utcnow() - timedelta(hours=2)})
    )
    # WHEN parents older than an hour are asked for (--all: its row names no execution)
    result = server.cli("stuck", "--older-than", "1h", "--all", "--json")
    # THEN only that parent is listed, held by its dependency
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["older_than_seconds"] == 3600
    (stuck,) = [p for p in report["parents"] if p["parent"]["id"] == "payload:stuck/parent"]
    assert stuck["waiting_seconds"] >= 7200
    (hold,) = stuck["dependencies"]
    assert hold["payload_id"] == "stuck/dep"
    assert hold["reason"] == "not started (no state item)"
    assert all(p["parent"]["id"] != f"payload:{PARENT_ID}" for p in report["parents"])

    # AND with a short threshold the real parent shows up, held by the running dependency
    def real_parent() -> dict[str, Any] | None:
        recent = json.loads(server.cli("stuck", "--older-than", "1s", "--json").stdout)
        found = [p for p in recent["parents"] if p["parent"]["id"] == f"payload:{PARENT_ID}"]
        return found[0] if found else None

    real = wait_until(real_parent, timeout=10, every=0.25)
    assert [(d["payload_id"], d["reason"]) for d in real["dependencies"]] == [
        (sim_id("slow"), "running")
    ]
    human = server.cli("stuck", "--older-than", "90m", "--all")
    assert human.exit_code == 0, human.output
    assert "stuck/parent" in human.stdout
    bad = server.cli("stuck", "--older-than", "soon")
    assert bad.exit_code == 2


def test_why_lists_what_holds_the_real_parent(server: Server, parent: str) -> None:
    # WHEN what holds the real parent is asked for, by its execution ARN and by its payload id
    by_arn = server.cli("why", parent, "--json")
    by_id = server.cli("why", PARENT_ID, "--json")
    # THEN both find its two token waits, held only by the slow dependency (still running)
    for result in (by_arn, by_id):
        assert result.exit_code == 0, result.output
        report = json.loads(result.stdout)
        assert sorted(wait["payload_id"] for wait in report["waits"]) == sorted(
            [sim_id("fast"), sim_id("slow")]
        )
        assert [(h["payload_id"], h["wait"]) for h in report["holds"]] == [
            (sim_id("slow"), "token")
        ]
        assert report["holds"][0]["state"] in {"CLAIMED", "PROCESSING"}
    assert json.loads(by_arn.stdout)["kind"] == "parent"
    # AND a name nothing has is exit 5
    assert server.cli("why", "cli/no-such-parent").exit_code == 5


# ---------------------------------------------------------------------------- redrive, stacks


def test_redrive_moves_dead_letters_back_and_dry_run_leaves_them(server: Server) -> None:
    sqs = server.client("sqs")
    dlq = server.outputs["ProcessDlqUrl"]
    sqs.send_message(QueueUrl=dlq, MessageBody=json.dumps(simulate("redriven")))
    sqs.send_message(QueueUrl=dlq, MessageBody=json.dumps(simulate("redriven-2")))

    def dlq_count() -> int:
        attributes = sqs.get_queue_attributes(
            QueueUrl=dlq,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return sum(int(value) for value in attributes.values())

    # WHEN a dry run lists the DLQ
    dry = server.cli("redrive", "--dry-run", "--json")
    # THEN both messages are named and stay where they are
    assert dry.exit_code == 0, dry.output
    listed = json.loads(dry.stdout)
    assert listed["dry_run"] is True
    assert listed["moved"] == 0
    assert sorted(m["payload_ids"][0] for m in listed["messages"]) == [
        sim_id("redriven"),
        sim_id("redriven-2"),
    ]
    assert dlq_count() == 2
    # WHEN one is redriven for real, then the rest
    one = json.loads(server.cli("redrive", "--max", "1", "--json").stdout)
    rest = json.loads(server.cli("redrive", "--json").stdout)
    # THEN each moved once, the DLQ is empty, and the tracker ran them
    assert (one["moved"], rest["moved"]) == (1, 1)
    assert dlq_count() == 0
    states = server.states()

    def ran() -> bool:
        items = states.batch_get([sim_id("redriven"), sim_id("redriven-2")])
        return len(items) == 2 and all(i.state is PayloadState.SUCCEEDED for i in items.values())

    wait_until(ran, timeout=30)
    assert "empty" in server.cli("redrive").stdout


@pytest.mark.usefixtures("parent")
def test_a_stack_name_resolves_resources_from_cloudformation_outputs(server: Server) -> None:
    # GIVEN a CloudFormation stack (moto's, on the same endpoint) with the tracker's outputs
    outputs = {
        key: {"Value": server.outputs[key]}
        for key in ("ProcessQueueUrl", "ProcessDlqUrl", "StateTableName", "DependencyTableName")
    }
    template = {
        "Resources": {"Marker": {"Type": "AWS::SQS::Queue", "Properties": {"QueueName": "m"}}},
        "Outputs": {**outputs, "Prefix": {"Value": "deptrack"}},
    }
    server.client("cloudformation").create_stack(
        StackName="tracker", TemplateBody=json.dumps(template)
    )
    # WHEN status names the stack (and a prefix that matches nothing)
    found = server.cli("status", sim_id("fast"), "--stack-name", "tracker", "--prefix", "x")
    # THEN the stack's outputs win
    assert found.exit_code == 0, found.output
    assert "SUCCEEDED" in found.stdout
    lost = server.cli("status", sim_id("fast"), "--prefix", "x")
    assert lost.exit_code == 1
    error, hint = lost.stderr.splitlines()
    assert error.startswith("error: BatchGetItem: ResourceNotFoundException")
    assert hint.startswith("hint: the tracker's tables, queues or bucket are not where --prefix x")
    # AND a stack that is not there says which options to check
    missing = server.cli("status", sim_id("fast"), "--stack-name", "nope")
    assert missing.exit_code == 1
    error, hint = missing.stderr.splitlines()
    assert error.startswith("error: DescribeStacks: ValidationError:")
    assert hint == (
        "hint: no such stack in this account and region: check --stack-name and --region"
    )


# ---------------------------------------------------------------------------- stop


def test_ctrl_c_stops_serve_cleanly(server: Server) -> None:
    port = urlparse(server.endpoint).port
    assert port is not None
    # WHEN serve gets Ctrl-C
    code = server.stop()
    # THEN it exits 0, printed only its outputs on stdout, and cleaned up
    assert code == 0, server.stderr.read_text()
    assert json.loads(server.stdout.read_text()) == server.outputs
    assert server.stderr.read_text().rstrip().endswith("stopped")
    assert not server.outputs_file.exists()
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port)) != 0
    # AND a command that still points at it asks whether serve runs, without a traceback
    after = server.cli("status", sim_id("fast"))
    assert after.exit_code == 1
    error, hint = after.stderr.splitlines()
    assert error.startswith("error: Could not connect to the endpoint URL")
    assert hint.startswith("hint: is `dependency-tracker serve` running?")


def test_serve_says_why_when_the_port_is_taken(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(  # noqa: S603
            [
                *(sys.executable, "-m", "dependency_tracker_cli", "serve", "--port", str(port)),
                *("--outputs-file", str(tmp_path / "o.json"), "--log-file", str(tmp_path / "l")),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env={**os.environ, "DEPTRACK_PREFIX": "deptrack"},
        )
    assert result.returncode == 1
    assert result.stderr.startswith(f"error: cannot listen on 127.0.0.1:{port}")
    assert result.stderr.count("\n") == 1


def test_local_stack_in_server_mode_binds_clients_and_restores_everything() -> None:
    # GIVEN the Python API in server mode, in this process
    before = os.environ.get("AWS_ENDPOINT_URL")
    with LocalStack(port=0, sink=io.StringIO()) as stack:
        endpoint = stack.outputs["EndpointUrl"]
        port = urlparse(endpoint).port
        # THEN its clients and the handlers' environment go through the endpoint
        assert os.environ["AWS_ENDPOINT_URL"] == endpoint
        assert stack.client("sqs").meta.endpoint_url == endpoint
        queues = stack.client("sqs").list_queues()["QueueUrls"]
        assert stack.outputs["ProcessQueueUrl"] in queues
    # AND stopping it closes the port and restores the environment
    assert os.environ.get("AWS_ENDPOINT_URL") == before
    assert port is not None
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port)) != 0
