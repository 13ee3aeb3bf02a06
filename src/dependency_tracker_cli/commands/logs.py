"""``dependency-tracker logs``: the handlers' log lines that name one payload.

On AWS they come from CloudWatch Logs (``FilterLogEvents`` on each handler's
log group, the payload id as a quoted filter pattern); against ``serve`` from
its log file, which serve's outputs name (``LogFile``).
"""

# No ``from __future__ import annotations``: Typer reads these annotations at runtime.

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from botocore.exceptions import ClientError

from dependency_tracker.core.enums import utcnow
from dependency_tracker_cli import render
from dependency_tracker_cli.commands.serve import DEFAULT_LOG_FILE
from dependency_tracker_cli.options import aws_command, fail
from dependency_tracker_cli.target import Target, is_loopback, stack_outputs

# Characters that continue an id: "a/b-1" must not match inside "a/b-10" or "x-a/b-1".
_ID_CHARACTER = re.compile(r"[\w./:-]")


@dataclass(frozen=True)
class LogLine:
    """One log line that names the payload."""

    timestamp: datetime | None
    function: str
    source: str
    message: str

    @property
    def record(self) -> dict[str, Any] | None:
        """The line as a JSON object (a Powertools record), or None."""
        try:
            parsed = json.loads(self.message)
        except ValueError:
            return None
        return parsed if isinstance(parsed, dict) else None

    def to_json(self) -> dict[str, Any]:
        """``--json``: one object a line."""
        return {
            "timestamp": None if self.timestamp is None else self.timestamp.isoformat(),
            "function": self.function,
            "source": self.source,
            "message": self.message,
            "record": self.record,
        }

    def text(self) -> str:
        """``time function LEVEL message`` for people (the raw line when it is no record)."""
        record = self.record
        when = "-" if self.timestamp is None else self.timestamp.strftime("%Y-%m-%d %H:%M:%S")
        if record is None:
            return f"{when} {self.function} {self.message.rstrip()}"
        level = record.get("level", "")
        message = record.get("message", "")
        rest = {
            key: value
            for key, value in record.items()
            if key not in {"level", "message", "timestamp", "location", "service"}
            and not key.startswith(("function_", "cold_start", "xray_"))
        }
        return f"{when} {self.function} {level} {message} {json.dumps(rest, default=str)}"


def spellings(payload_id: str) -> list[str]:
    """How a line may spell the id: as is, and JSON-escaped (both ASCII and not)."""
    forms = [
        payload_id,
        json.dumps(payload_id)[1:-1],
        json.dumps(payload_id, ensure_ascii=False)[1:-1],
    ]
    return list(dict.fromkeys(forms))


def names_payload(text: str, payload_id: str) -> bool:
    """True when ``text`` holds the id whole (not as part of a longer id)."""
    for form in spellings(payload_id):
        start = text.find(form)
        while start != -1:
            end = start + len(form)
            before = text[start - 1] if start else ""
            after = text[end] if end < len(text) else ""
            if not _ID_CHARACTER.fullmatch(before or " ") and not _ID_CHARACTER.fullmatch(
                after or " "
            ):
                return True
            start = text.find(form, start + 1)
    return False


def filter_pattern(payload_id: str) -> str:
    """CloudWatch's filter pattern: each spelling quoted, any of them (``?"a" ?"b"``)."""
    quoted = [
        '"' + form.replace("\\", "\\\\").replace('"', '\\"') + '"' for form in spellings(payload_id)
    ]
    return quoted[0] if len(quoted) == 1 else " ".join(f"?{term}" for term in quoted)


@aws_command
def logs(
    target: Target,
    *,
    payload_id: Annotated[str, typer.Argument(metavar="PAYLOAD_ID", show_default=False)],
    since: Annotated[
        str, typer.Option(metavar="DURATION", help="How far back to look, e.g. 30m, 6h, 2d.")
    ] = "1h",
    log_file: Annotated[
        Path | None,
        typer.Option(
            metavar="PATH",
            help="serve's log file (default: the LogFile output of the serve stack at "
            f"--endpoint-url, else {DEFAULT_LOG_FILE}).",
            show_default=False,
        ),
    ] = None,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print one JSON object per line, for scripts.")
    ] = False,
) -> None:
    """Print the handlers' log lines that name a payload, oldest first.

    On AWS: FilterLogEvents on the process, update-state, callback, sweeper (and
    cirrus-events) log groups, with the payload id as a quoted filter pattern.
    Against serve (a local --endpoint-url, or --log-file): serve's log file.

    Examples:
      dependency-tracker logs sentinel-2-l2a/workflow-cog/tile-1
      dependency-tracker logs s2/workflow-cog/tile-1 --since 2d --stack-name deptrack --json
      dependency-tracker logs s2/workflow-cog/tile-1 --endpoint-url http://127.0.0.1:4600
    """
    try:
        start = utcnow() - render.parse_duration(since)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="'--since'") from exc
    if log_file is not None or is_loopback(target.options.endpoint_url):
        path = log_file or local_log_file(target)
        where = str(path)
        found = list(file_lines(path, payload_id, start))
    else:
        where = "the handlers' log groups"
        found = cloudwatch_lines(target, payload_id, start)
    found.sort(key=lambda line: line.timestamp or start)
    for line in found:
        typer.echo(json.dumps(line.to_json()) if json_output else line.text())
    if not found:
        render.stderr().print(
            f"no log line names {render.escape_line(payload_id)} since {since} ago in {where}",
            soft_wrap=True,
        )


def local_log_file(target: Target) -> Path:
    """The log file of ``serve``: its stack's ``LogFile`` output, else serve's default path."""
    outputs = target.outputs
    if not outputs:
        try:
            outputs = stack_outputs(target.client("cloudformation"), target.options.prefix)
        except ClientError:  # an older serve, or another stack name: the default
            outputs = {}
    return Path(outputs.get("LogFile") or DEFAULT_LOG_FILE)


def file_lines(path: Path, payload_id: str, start: datetime) -> Iterator[LogLine]:
    """Records in serve's log file that name the payload, from ``start`` on."""
    try:
        handle = path.open(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        fail(
            f"{path}: no such file",
            2,
            hint="pass serve's log file with --log-file (serve prints where it writes)",
        )
    with handle:
        for line in handle:
            text = line.rstrip("\n")
            if not text.startswith("{") or not names_payload(text, payload_id):
                continue
            entry = LogLine(None, "-", str(path), text)
            record = entry.record
            if record is None:
                continue
            moment = _record_time(record.get("timestamp"))
            if moment is not None and moment < start:
                continue
            function = str(record.get("function_name") or "-")
            yield LogLine(moment, function, str(path), text)


def _record_time(text: object) -> datetime | None:
    if not isinstance(text, str):
        return None
    try:  # Powertools' format: 2026-01-01 12:00:00,123+0000
        moment = datetime.strptime(text, "%Y-%m-%d %H:%M:%S,%f%z")
    except ValueError:
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def cloudwatch_lines(target: Target, payload_id: str, start: datetime) -> list[LogLine]:
    """Events of the handlers' log groups that name the payload (groups not there: skipped)."""
    client = target.client("logs")
    pattern = filter_pattern(payload_id)
    found: list[LogLine] = []
    groups = target.names.log_groups
    missing = 0
    for group in groups:
        function = group.rsplit("/", 1)[-1]
        request: dict[str, Any] = {
            "logGroupName": group,
            "filterPattern": pattern,
            "startTime": int(start.timestamp() * 1000),
        }
        try:
            while True:
                response = client.filter_log_events(**request)
                for event in response.get("events", []):
                    message = str(event.get("message", ""))
                    if not names_payload(message, payload_id):
                        continue
                    moment = datetime.fromtimestamp(event["timestamp"] / 1000, tz=UTC)
                    found.append(LogLine(moment, function, group, message.rstrip("\n")))
                token = response.get("nextToken")
                if not token:
                    break
                request["nextToken"] = token
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ResourceNotFoundException":
                raise
            missing += 1  # cirrus-events exists only in cirrus mode
    if missing == len(groups):
        fail(
            f"none of the log groups {', '.join(groups)} exists",
            hint="check --prefix or --stack-name, --region and --profile",
        )
    return found
