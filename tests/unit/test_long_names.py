"""Names and object keys made from payload ids of any length stay within AWS's limits.

Execution names (80 characters from ``[A-Za-z0-9_-]``) and S3 object keys (1,024
bytes of UTF-8) are built from a digest of the id, so an id's length never reaches them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hypothesis import given, settings
from hypothesis import strategies as st

from dependency_tracker.core import naming
from dependency_tracker.core.limits import SFN_MAX_EXECUTION_NAME, utf8_size
from dependency_tracker.payloads.model import ProcessPayload
from dependency_tracker.payloads.results import INLINE_RESULT_BYTES, build_result

if TYPE_CHECKING:
    from tests.conftest import Aws

S3_MAX_KEY_BYTES = 1024  # "The name for a key ... up to 1,024 bytes long" (S3 object keys)

long_ids = st.one_of(
    st.text(min_size=2_049, max_size=4_000),
    st.integers(min_value=2_049, max_value=200_000).map(lambda n: "é/" * (n // 3)),
)


@dataclass
class KeptKeys:
    """A payload bucket that records the keys it is asked to write."""

    bucket_name: str = "bucket"
    keys: list[str] = field(default_factory=list)

    @property
    def writable(self) -> bool:
        return True

    def write(self, key: str, text: str) -> str:
        self.keys.append(key)
        return f"s3://{self.bucket_name}/{key}"


@settings(max_examples=100, deadline=None)
@given(payload_id=long_ids, attempt=st.integers(1, 10**12))
def test_execution_names_of_long_ids(payload_id: str, attempt: int) -> None:
    name = naming.execution_name(payload_id, attempt)
    assert len(name) <= SFN_MAX_EXECUTION_NAME
    assert re.fullmatch(r"[A-Za-z0-9_-]+", name)
    assert naming.attempt_of(name, payload_id) == attempt


def test_a_large_result_of_a_long_id_has_a_short_key() -> None:
    bucket = KeptKeys()
    payload_id = "c/workflow-w/" + "x" * 100_000
    output = json.dumps({"features": [{"id": "i" * INLINE_RESULT_BYTES}]})
    stored = json.loads(build_result(payload_id, 7, output, bucket))  # type: ignore[arg-type]
    (key,) = bucket.keys
    assert stored["url"].endswith(key)
    assert utf8_size(key) <= S3_MAX_KEY_BYTES
    assert re.fullmatch(r"results/[0-9a-f]{64}/7\.json", key)


def test_a_large_input_of_a_long_id_has_a_short_key(aws: Aws) -> None:
    bucket = KeptKeys()
    runs = aws.app(bucket=bucket).runs
    payload = ProcessPayload.model_validate(
        {"id": "c/" + "€" * 90_000, "process": [{"workflow": "w"}], "extra": "x" * 100_000}
    )
    # _input is where the object key is made; reaching it needs no execution
    pointer = json.loads(runs.input(payload, 3))
    (key,) = bucket.keys
    assert pointer == {"url": f"s3://bucket/{key}"}
    assert utf8_size(key) <= S3_MAX_KEY_BYTES
    assert re.fullmatch(r"payloads/[0-9a-f]{64}/3\.json", key)
