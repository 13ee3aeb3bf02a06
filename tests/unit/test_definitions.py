"""State machine definitions: valid JSON, known placeholders, substitution."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dependency_tracker import asl
from dependency_tracker.core.enums import DependencyError
from dependency_tracker.core.errors import ConfigurationError
from dependency_tracker.core.limits import SFN_MAX_HISTORY_EVENTS, SFN_MAX_PAYLOAD_BYTES
from dependency_tracker.payloads.update_state import EXPRESS_OUTPUTS_PREFIX
from dependency_tracker_local import definitions
from tests.e2e.parent_limits import MAX_DEPENDENCIES, moto_size, state_after_map

# Count rows per join (dependency_tracker.models.JOIN_COUNT_SHARDS): the ASL reads each.
JOIN_COUNT_SHARDS = 4

# Payload ids up to this many bytes fit MAX_DEPENDENCIES times in the Map parent's state.
ID_BOUND = 135

VALUES = dict.fromkeys(definitions.SUBSTITUTION_KEYS, "1") | {
    "ProcessQueueUrl": "https://sqs.us-east-1.amazonaws.com/123456789012/q"
}


def test_every_definition_is_discovered_from_the_package() -> None:
    found = definitions.discover()
    assert {"wait-for-dependencies", "simulate"} <= set(found)
    repo = Path(__file__).parents[2] / "stepfunctions"
    assert sorted(path.name for path in found.values()) == sorted(
        path.name for path in repo.glob("*.asl.json")
    )


@pytest.mark.parametrize("name", sorted(definitions.discover()))
def test_definitions_use_only_known_placeholders_and_render_to_asl(name: str) -> None:
    path = definitions.discover()[name]
    text = path.read_text()
    assert definitions.placeholders(text) <= definitions.SUBSTITUTION_KEYS
    rendered = json.loads(definitions.render(path, VALUES))
    assert rendered["StartAt"] in rendered["States"]
    assert "${" not in json.dumps(rendered)


@pytest.mark.parametrize("name", sorted(definitions.discover()))
def test_no_custom_error_name_is_reserved(name: str) -> None:
    rendered = json.loads(definitions.render(definitions.discover()[name], VALUES))

    def fail_errors(states: dict[str, dict[str, object]]) -> list[str]:
        found = []
        for state in states.values():
            if state.get("Type") == "Fail" and isinstance(state.get("Error"), str):
                found.append(str(state["Error"]))
            processor = state.get("ItemProcessor") or state.get("Iterator")
            if isinstance(processor, dict):
                found.extend(fail_errors(processor["States"]))
        return found

    assert not [error for error in fail_errors(rendered["States"]) if error.startswith("States.")]


def test_missing_substitution_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "x.asl.json"
    path.write_text('{"Comment": "${Nope}"}')
    with pytest.raises(ConfigurationError, match=r"\$\{Nope\}"):
        definitions.render(path, VALUES)


def rendered(name: str) -> dict[str, Any]:
    """The definition ``name`` with every placeholder filled, as JSON."""
    result: dict[str, Any] = json.loads(definitions.render(definitions.discover()[name], VALUES))
    return result


def successors(state: dict[str, Any]) -> list[str]:
    """Every state a state can hand over to: Next, Choice targets, Default, Catch."""
    found = [state["Next"]] if "Next" in state else []
    found += [choice["Next"] for choice in state.get("Choices", [])]
    found += [state["Default"]] if "Default" in state else []
    found += [catcher["Next"] for catcher in state.get("Catch", [])]
    return found


def ends_reachable_from(states: dict[str, dict[str, Any]], start: str) -> set[str]:
    """Error names of the Fail states reachable from ``start`` ("" for a success end)."""
    seen: set[str] = set()
    ends: set[str] = set()
    todo = [start]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        state = states[name]
        if state["Type"] == "Fail":
            ends.add(state["Error"])
        elif state.get("End"):
            ends.add("")
        todo.extend(successors(state))
    return ends


@pytest.mark.parametrize("name", sorted(definitions.discover()))
def test_no_feature_moto_cannot_run(name: str) -> None:
    # JSONata, Assign and ToleratedFailureCount are broken locally (docs/local.md, moto limits)
    text = json.dumps(rendered(name))
    for feature in ('"QueryLanguage"', '"Assign"', '"ToleratedFailureCount', '"Arguments"'):
        assert feature not in text, feature


def test_map_parent_keeps_one_small_summary_per_dependency() -> None:
    states = rendered("wait-for-dependencies")["States"]
    map_state = states["WaitForEach"]
    # the summaries replace the dependency list: the state never holds both
    assert map_state["ItemsPath"] == map_state["ResultPath"] == "$.dependencies"
    task = map_state["ItemProcessor"]["States"]["PublishAndWait"]
    assert set(task["ResultSelector"]) == {"payload_id.$", "replayed.$"}
    # only the fields the parent needs reach the Map (other input fields are dropped)
    kept = states["KeepWhatTheParentNeeds"]["Parameters"]
    assert set(kept) == {
        "payload_id.$",
        "timeout_seconds.$",
        "max_concurrency.$",
        "count.$",
        "dependencies.$",
    }
    assert kept["count.$"] == "States.ArrayLength($.dependencies)"
    assert states["Succeeded"]["Parameters"]["dependencies.$"] == "$.dependencies"


def test_map_parent_refuses_past_its_limit_before_the_map() -> None:
    states = rendered("wait-for-dependencies")["States"]
    (rule,) = states["WithinLimits"]["Choices"]
    assert rule == {
        "Variable": "$.count",
        "NumericGreaterThan": MAX_DEPENDENCIES,
        "Next": "TooManyDependencies",
    }
    assert states["WithinLimits"]["Default"] == "WaitForEach"
    refusal = states["TooManyDependencies"]
    assert refusal["Type"] == "Fail"
    assert refusal["Error"] in {error.value for error in DependencyError}
    assert f"{MAX_DEPENDENCIES:,} dependencies" in refusal["Cause"]


def test_map_parent_limit_fits_history_and_state_data() -> None:
    # 8 history events per dependency plus 14 (measured on moto; docs/patterns.md)
    assert 8 * MAX_DEPENDENCIES + 14 < SFN_MAX_HISTORY_EVENTS
    # the largest Map output: MAX_DEPENDENCIES ids of ID_BOUND bytes and a 1 KiB parent id
    # fit (as moto counts, with spaces); one byte more per id does not

    def largest_state(id_bytes: int) -> int:
        ids = [f"{index:05d}".ljust(id_bytes, "x") for index in range(MAX_DEPENDENCIES)]
        state = state_after_map(ids, timeout_seconds=31_536_000)
        return moto_size(state | {"payload_id": "w" * 1024})

    assert largest_state(ID_BOUND) < SFN_MAX_PAYLOAD_BYTES <= largest_state(ID_BOUND + 1)


def test_join_timeout_always_ends_in_dependency_timed_out() -> None:
    states = rendered("wait-for-join")["States"]
    read = states["ReadSummary"]
    # no path may need $.Item: a join not registered yet has no row (States.Runtime otherwise)
    assert "ResultSelector" not in read
    assert states["RowExists"]["Choices"] == [
        {"Variable": "$.read.Item", "IsPresent": True, "Next": "FillRowDefaults"}
    ]
    # the cause counts outcomes and names the row: no member list, whatever its ids' length
    projected = {name.strip() for name in read["Parameters"]["ProjectionExpression"].split(",")}
    assert projected == {"join_id", "#quorum", "#total", "registered"}
    assert set(states["SummarizeRow"]["Parameters"]["counts"]) == {"succeeded.$", "failed.$"}
    # the counts are read from the count shards, each a read that may find no row
    shards = states["ReadCounts"]
    assert states["FillRowDefaults"]["Parameters"]["shards.$"] == (
        f"States.ArrayRange(0, {JOIN_COUNT_SHARDS - 1}, 1)"
    )
    shard_read = shards["ItemProcessor"]["States"]["ReadShard"]
    assert shard_read["Parameters"]["ConsistentRead"] is True
    assert "$.Item" not in json.dumps(shard_read["ResultSelector"])
    for index in range(JOIN_COUNT_SHARDS):
        for outcome in ("succeeded", "failed"):
            summed = states["SummarizeRow"]["Parameters"]["counts"][f"{outcome}.$"]
            assert f"States.ArrayGetItem($.read.counts.{outcome}, {index})" in summed
    # throttling is retried; anything else (size included: States.ALL does not match
    # States.DataLimitExceeded) is caught
    for state, reader in ((read, read), (shards, shard_read)):
        (retry,) = reader["Retry"]
        assert "DynamoDB.ProvisionedThroughputExceededException" in retry["ErrorEquals"]
        caught = {error for catcher in state["Catch"] for error in catcher["ErrorEquals"]}
        assert {"States.ALL", "States.DataLimitExceeded"} <= caught
        assert {catcher["Next"] for catcher in state["Catch"]} == {"SummaryUnreadable"}
    assert ends_reachable_from(states, "ReadSummary") == {"DependencyTimedOut"}
    # and the callback timeout of either publishing state leads there
    for publish in ("PublishAndWait", "PublishManifestAndWait"):
        (timeout,) = [c for c in states[publish]["Catch"] if "States.Timeout" in c["ErrorEquals"]]
        assert timeout["Next"] == "ReadSummary"


def test_join_takes_a_list_or_a_manifest_url() -> None:
    states = rendered("wait-for-join")["States"]
    with_list, with_manifest = states["PublishAndWait"], states["PublishManifestAndWait"]
    # the same message but for the payloads (list) or payloads_url (manifest) field
    body = with_manifest["Parameters"]["MessageBody"]
    assert body.pop("payloads_url.$") == "$.dependencies_url"
    assert with_list["Parameters"]["MessageBody"].pop("payloads.$") == "$.dependencies"
    assert with_list == with_manifest
    # neither or both: InvalidJoin before anything is sent
    refusals = [states[choice["Next"]] for choice in states["OneDependencySource"]["Choices"]]
    assert [(state["Type"], state["Error"]) for state in refusals] == [("Fail", "InvalidJoin")] * 2
    assert states["OneDependencySource"]["Default"] == "NameTheJoin"


def test_express_reports_are_retried() -> None:
    # GIVEN the Express example: its report is the only way its end reaches the tracker (no
    # status-change events), and a throttled or failed SendMessage would lose it
    states = json.loads(definitions.discover()["simulate-express"].read_text())["States"]
    reports = [name for name, state in states.items() if name.startswith("Report")]
    assert reports == ["ReportSucceeded", "ReportFailed"]
    for name in reports:
        # THEN each report step retries SQS's throttling and 5xx, with backoff, well inside
        # the five-minute limit
        assert states[name]["Retry"] == asl.send_retry()
        for retry in states[name]["Retry"]:
            waits = sum(
                min(retry["IntervalSeconds"] * retry["BackoffRate"] ** n, retry["MaxDelaySeconds"])
                for n in range(retry["MaxAttempts"])
            )
            assert waits < 60, name


def test_express_outputs_are_written_where_update_state_reads_them() -> None:
    # GIVEN the Express example's success path
    states = json.loads(definitions.discover()["simulate-express"].read_text())["States"]
    # THEN its output is named under the prefix update-state's role reads, stored, then
    # reported by pointer (never inline: with the input it could pass SQS's 256 KiB)
    key = states["NameOutput"]["Parameters"]["key.$"]
    assert key.startswith(f"States.Format('{EXPRESS_OUTPUTS_PREFIX}/{{}}/{{}}.json'")
    assert states["StoreOutput"]["Resource"] == "arn:${Partition}:states:::aws-sdk:s3:putObject"
    report = states["ReportSucceeded"]["Parameters"]["MessageBody"]["status_report"]
    assert "output.$" not in report
    assert report["output_url.$"].startswith("States.Format('s3://${PayloadBucketName}/{}'")
