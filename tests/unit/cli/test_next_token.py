"""``list --next-token``: a token the listing did not print is a one-line usage error."""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING

import pytest
from typer.testing import CliRunner

from dependency_tracker_cli.__main__ import app
from dependency_tracker_cli.readmodel.paging import encode_token
from dependency_tracker_local.cirrus import _state_table_spec

if TYPE_CHECKING:
    from tests.conftest import Aws

GARBLED = "Invalid value for '--next-token': not a next token: garbled or cut short"
FOREIGN = "Invalid value for '--next-token': not a next token of this listing"
CIRRUS = ("--cirrus-prefix", "cirrus")

_TRACKER_TOKEN = encode_token({"payload_id": {"S": "s2/workflow-cog/a"}})
_WAITERS_TOKEN = encode_token({"payload_id": {"S": "s2/workflow-cog/a"}, "waiter_id": {"S": "w"}})


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


@pytest.mark.parametrize(
    ("args", "token", "message"),
    [
        pytest.param((), "not-a-token!", GARBLED, id="garbage"),
        pytest.param((), "", GARBLED, id="empty"),
        pytest.param((), _b64(b"hello, world"), GARBLED, id="base64-of-text"),
        pytest.param((), _b64(b"\xff\xfe\x00"), GARBLED, id="base64-of-bytes"),
        pytest.param((), _TRACKER_TOKEN[:-4], GARBLED, id="truncated"),
        pytest.param((), _TRACKER_TOKEN[:-1], GARBLED, id="truncated-by-one"),
        pytest.param((), _b64(b"[1, 2]"), FOREIGN, id="json-not-a-key"),
        pytest.param((), _WAITERS_TOKEN, FOREIGN, id="list-waiters-token"),
        pytest.param(("--waiters",), _TRACKER_TOKEN, FOREIGN, id="list-token-to-waiters"),
        pytest.param(CIRRUS, _TRACKER_TOKEN, FOREIGN, id="tracker-token-in-cirrus-mode"),
        pytest.param((), encode_token({"payload_id": "s2"}), FOREIGN, id="bare-value"),
        pytest.param((), encode_token({"payload_id": {"N": "1"}}), FOREIGN, id="number-key"),
        pytest.param((), encode_token({"payload_id": {"S": ""}}), FOREIGN, id="empty-key"),
    ],
)
def test_a_bad_next_token_exits_2_with_one_line_and_no_traceback(
    aws: Aws, args: tuple[str, ...], token: str, message: str
) -> None:
    # GIVEN the tracker's table, and cirrus's
    aws.dynamodb.create_table(**_state_table_spec("cirrus-state"))
    # WHEN a listing goes on from a token it did not print
    result = CliRunner().invoke(app, ["list", *args, "--next-token", token])
    # THEN it is a usage error, whose reason takes one whole line, and nothing crashed
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
    reasons = [line.strip("│ ") for line in result.output.splitlines() if "next token" in line]
    assert reasons == [message]
