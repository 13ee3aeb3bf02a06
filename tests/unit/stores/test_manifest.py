"""Join manifests read from S3 in slices, by byte offset."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from dependency_tracker.core.enums import DependencyError
from dependency_tracker.core.errors import InvalidMessageError
from dependency_tracker.joins.manifest import (
    BLOCK_BYTES,
    ManifestReader,
    ManifestSlice,
    manifest_text,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

BUCKET = "manifests"

# Ids of 1-, 2-, 3- and 4-byte UTF-8 characters, so tiny blocks cut them at every byte.
ENTRIES: list[dict[str, Any]] = [
    {"url": "s3://payloads/a.json"},
    {"id": "café/é", "nested": {"list": [1, {"deep": "}]{["}], "q": 'say "hi" \\ [x]'}},
    {"id": "漢字/データ", "process": [{"workflow": "pass"}]},
    {"id": "🛰️/🌍🌍", "empty": {}, "none": None},
    {"url": "s3://payloads/b.json"},
    {"id": "ascii", "breaks": "\u2028\u2029\x85\n\r\x0b\t\\u00e9"},
]


def array_body(entries: list[dict[str, Any]]) -> bytes:
    """A pretty JSON array: whitespace everywhere JSON allows it, raw UTF-8."""
    return json.dumps(entries, indent=2, ensure_ascii=False).encode("utf-8")


def lines_body(entries: list[dict[str, Any]]) -> bytes:
    """JSON Lines with blank lines, indentation and a CRLF, raw UTF-8."""
    lines = [json.dumps(entry, ensure_ascii=False) for entry in entries]
    return ("\n\n  " + "\r\n \t\n".join(lines) + "\n\n").encode("utf-8")


@pytest.fixture
def s3() -> Iterator[Any]:
    with mock_aws():
        client = boto3.client("s3")
        client.create_bucket(Bucket=BUCKET)
        yield client


def put(s3: Any, key: str, body: bytes) -> str:
    s3.put_object(Bucket=BUCKET, Key=key, Body=body)
    return f"s3://{BUCKET}/{key}"


def read_all(reader: ManifestReader, url: str, limit: int) -> list[ManifestSlice]:
    slices = [reader.read(url, limit=limit)]
    while not slices[-1].end:
        slices.append(reader.read(url, offset=slices[-1].next_offset, limit=limit))
    return slices


# Reading


@pytest.mark.parametrize("body", [array_body, lines_body], ids=["array", "lines"])
def test_whole_manifest_in_one_slice(s3: Any, body: Any) -> None:
    data = body(ENTRIES)
    url = put(s3, "m", data)
    got = ManifestReader(s3).read(url, limit=100)
    assert got == ManifestSlice(ENTRIES, len(data), end=True)


@pytest.mark.parametrize("body", [array_body, lines_body], ids=["array", "lines"])
@pytest.mark.parametrize("block_bytes", [1, 2, 3, 5, BLOCK_BYTES])
def test_every_slicing_reads_the_same_entries(s3: Any, body: Any, block_bytes: int) -> None:
    # GIVEN a manifest with multi-byte ids, read through blocks that split characters
    data = body(ENTRIES)
    url = put(s3, "m", data)
    reader = ManifestReader(s3, block_bytes=block_bytes)
    for limit in range(1, len(ENTRIES) + 1):
        # WHEN it is read in slices of `limit`
        slices = read_all(reader, url, limit)
        # THEN the slices hold every entry once, in order, `limit` at a time
        assert [entry for part in slices for entry in part.entries] == ENTRIES
        assert [len(part.entries) for part in slices[:-1]] == [limit] * (len(slices) - 1)
        assert slices[-1].next_offset == len(data)
        # AND every offset handed out is a byte offset that resumes at the same entries
        for index, part in enumerate(slices[:-1]):
            assert data[part.next_offset :].lstrip()[:1] in (b",", b"{")
            rest = reader.read(url, offset=part.next_offset, limit=len(ENTRIES))
            assert rest.entries == ENTRIES[(index + 1) * limit :]
            assert rest.end


@pytest.mark.parametrize("body", [array_body, lines_body], ids=["array", "lines"])
def test_a_full_slice_knows_nothing_follows(s3: Any, body: Any) -> None:
    url = put(s3, "m", body(ENTRIES[:2]))
    assert ManifestReader(s3).read(url, limit=2).end


def test_array_continuation_offsets_point_at_the_comma(s3: Any) -> None:
    data = b'[{"a": 1} ,\n {"b": 2}]'
    url = put(s3, "m", data)
    first = ManifestReader(s3).read(url, limit=1)
    assert first == ManifestSlice([{"a": 1}], data.index(b","), end=False)


def test_lines_offsets_point_at_the_next_entry(s3: Any) -> None:
    data = b'{"a": 1}\n\n   {"b": 2}\n'
    url = put(s3, "m", data)
    first = ManifestReader(s3).read(url, limit=1)
    assert first == ManifestSlice([{"a": 1}], data.index(b'{"b"'), end=False)


def test_leading_byte_order_mark_is_skipped(s3: Any) -> None:
    url = put(s3, "m", b'\xef\xbb\xbf [{"a": 1}]')
    assert ManifestReader(s3).read(url, limit=5).entries == [{"a": 1}]


def test_last_line_needs_no_newline(s3: Any) -> None:
    url = put(s3, "m", b'{"a": 1}\n{"b": 2}')
    assert ManifestReader(s3).read(url, limit=5) == ManifestSlice([{"a": 1}, {"b": 2}], 17, True)


def test_offset_at_the_end_is_an_empty_last_slice(s3: Any) -> None:
    data = b'{"a": 1}\n  \n'
    url = put(s3, "m", data)
    reader = ManifestReader(s3)
    assert reader.read(url, offset=len(data) - 2, limit=1) == ManifestSlice([], len(data), True)
    # Past the end, S3 refuses the range: still nothing follows.
    assert reader.read(url, offset=len(data), limit=1) == ManifestSlice([], len(data), True)


def test_manifest_text_is_compact_json_lines(s3: Any) -> None:
    text = manifest_text(ENTRIES)
    # One compact line per entry, whatever splits the lines: breaks inside strings are escaped
    assert text.endswith("\n")
    assert text.count("\n") == len(ENTRIES)
    assert [json.loads(line) for line in text.splitlines()] == ENTRIES
    assert text.splitlines()[0] == '{"url":"s3://payloads/a.json"}'
    assert "漢字" in text  # UTF-8, not \\u escapes
    assert manifest_text([]) == ""
    url = put(s3, "m", text.encode("utf-8"))
    assert [e for part in read_all(ManifestReader(s3), url, 4) for e in part.entries] == ENTRIES


# Bounded reads


def test_a_slice_does_not_download_the_whole_object(s3: Any) -> None:
    # GIVEN a manifest of about 1 MB
    entries = [{"id": f"item-{index:05d}", "pad": "x" * 100} for index in range(8000)]
    data = manifest_text(entries).encode("utf-8")
    url = put(s3, "big", data)
    ranges: list[str | None] = []
    bodies: list[CountingBody] = []

    def record_range(params: dict[str, Any], **_: Any) -> None:
        ranges.append(params["headers"].get("Range"))

    def count_body(parsed: dict[str, Any], **_: Any) -> None:
        parsed["Body"] = CountingBody(parsed["Body"])
        bodies.append(parsed["Body"])

    s3.meta.events.register("before-call.s3.GetObject", record_range)
    s3.meta.events.register("after-call.s3.GetObject", count_body)
    reader = ManifestReader(s3, block_bytes=4096)
    # WHEN two slices of 10 are read
    first = reader.read(url, limit=10)
    second = reader.read(url, offset=first.next_offset, limit=10)
    # THEN each asks for a range from its offset, reads a block or two, and closes the body
    assert first.entries + second.entries == entries[:20]
    assert ranges == ["bytes=0-", f"bytes={first.next_offset}-"]
    assert all(body.read_bytes <= 2 * 4096 for body in bodies)
    assert all(body.closed for body in bodies)


class CountingBody:
    """A StreamingBody that counts the bytes taken from it."""

    def __init__(self, body: Any) -> None:
        self._body = body
        self.read_bytes = 0
        self.closed = False

    def read(self, amt: int | None = None) -> bytes:
        block: bytes = self._body.read(amt)
        self.read_bytes += len(block)
        return block

    def close(self) -> None:
        self.closed = True
        self._body.close()


@pytest.mark.parametrize(
    "data",
    [b'[{"a": "' + b"x" * 5000 + b'"}]', b'{"a": "' + b"x" * 5000 + b'"}\n'],
    ids=["array", "lines"],
)
def test_entry_larger_than_the_limit_is_refused(s3: Any, data: bytes) -> None:
    url = put(s3, "m", data)
    with pytest.raises(InvalidMessageError, match=r"entry 0 \(byte \d\) exceeds 1000 bytes"):
        ManifestReader(s3, block_bytes=64, max_entry_bytes=1000).read(url, limit=1)


def test_oversized_entry_is_refused_before_the_object_is_read(s3: Any) -> None:
    url = put(s3, "m", b'{"a": "' + b"x" * 100_000)
    bodies: list[CountingBody] = []

    def count_body(parsed: dict[str, Any], **_: Any) -> None:
        parsed["Body"] = CountingBody(parsed["Body"])
        bodies.append(parsed["Body"])

    s3.meta.events.register("after-call.s3.GetObject", count_body)
    with pytest.raises(InvalidMessageError, match="exceeds 1000 bytes"):
        ManifestReader(s3, block_bytes=256, max_entry_bytes=1000).read(url, limit=1)
    assert bodies[0].read_bytes <= 1000 + 256
    assert bodies[0].closed


# Errors


def assert_invalid_join(caught: pytest.ExceptionInfo[InvalidMessageError]) -> None:
    assert caught.value.error_name == DependencyError.INVALID_JOIN
    assert caught.value.retryable is False


@pytest.mark.parametrize("url", ["s3://", "s3://bucket", "s3:///key", "https://b/k", "manifest"])
def test_malformed_url(s3: Any, url: str) -> None:
    with pytest.raises(InvalidMessageError, match="malformed manifest url") as caught:
        ManifestReader(s3).read(url, limit=1)
    assert_invalid_join(caught)


@pytest.mark.parametrize(
    ("url", "code"),
    [(f"s3://{BUCKET}/missing", "NoSuchKey"), ("s3://no-such-bucket/m", "NoSuchBucket")],
)
def test_missing_manifest(s3: Any, url: str, code: str) -> None:
    with pytest.raises(InvalidMessageError, match=f"manifest {url} cannot be read: {code}") as c:
        ManifestReader(s3).read(url, limit=1)
    assert_invalid_join(c)


class RefusingS3:
    """An S3 client whose GetObject fails with ``code``."""

    def __init__(self, code: str) -> None:
        self.code = code

    def get_object(self, **_: Any) -> Any:
        raise ClientError({"Error": {"Code": self.code, "Message": "no"}}, "GetObject")


@pytest.mark.parametrize("code", ["AccessDenied", "403", "404"])
def test_unreadable_manifest(code: str) -> None:
    reader = ManifestReader(RefusingS3(code))  # type: ignore[arg-type]
    with pytest.raises(InvalidMessageError, match=f"cannot be read: {code}") as caught:
        reader.read("s3://b/k", limit=1)
    assert_invalid_join(caught)


@pytest.mark.parametrize("code", ["SlowDown", "InternalError", "ServiceUnavailable"])
def test_other_s3_errors_propagate(code: str) -> None:
    reader = ManifestReader(RefusingS3(code))  # type: ignore[arg-type]
    with pytest.raises(ClientError, match=code):
        reader.read("s3://b/k", limit=1)


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"", "has no entry"),
        (b" \n\n\t\r\n", "has no entry"),
        (b"[]", "has no entry"),
        (b" [ \n ] ", "has no entry"),
        (b"\xff\xfe\x00", r"entry 0 \(byte 0\) is not UTF-8"),
        (b'[{"id": "caf\xe9"}]', r"entry 0 \(byte 1\) is not UTF-8"),
        (b'{"a": 1}\n{"id": "\xe9"}\n', r"entry 1 \(byte 9\) is not UTF-8"),
        (b"not json", r"entry 0 \(byte 0\) is not JSON"),
        (b'{"a": 1}\n{"a": }\n', r"entry 1 \(byte 9\) is not JSON"),
        (b'{"a": 1} {"b": 2}\n', r"entry 0 \(byte 0\) is not JSON"),
        (b'[{"a": }]', r"entry 0 \(byte 1\) is not JSON"),
        (b'[{"a": 1} {"b": 2}]', "not JSON: expected , or ] at byte 10"),
        (b'[{"a": 1},]', r"entry 1 \(byte 10\) is a trailing ,"),
        (b'{"a": 1}\n,{"b": 2}\n', r"entry 1 \(byte 9\) is not JSON"),
        (b"[1, 2]", r"entry 0 \(byte 1\) is not a JSON object"),
        (b'[{"a": 1}, "s"]', r"entry 1 \(byte 11\) is not a JSON object"),
        (b'{"a": 1}\n[1]\n', r"entry 1 \(byte 9\) is not a JSON object \(list\)"),
        (b'"text"\n', r"entry 0 \(byte 0\) is not a JSON object \(str\)"),
        (b'[{"a": 1}', "the array is not closed"),
        (b'[{"a": 1},', "the array is not closed"),
        (b'[{"a": "1}', r"the array is not closed \(entry 0 \(byte 1\) is cut short"),
        (b'[{"a": 1}] x', "unexpected content after the array's closing ] at byte 11"),
    ],
)
def test_invalid_manifest(s3: Any, data: bytes, match: str) -> None:
    url = put(s3, "bad", data)
    with pytest.raises(InvalidMessageError, match=match) as caught:
        ManifestReader(s3, block_bytes=4).read(url, limit=10)
    assert url in caught.value.reason
    assert_invalid_join(caught)


def test_errors_past_offset_zero_name_the_byte(s3: Any) -> None:
    url = put(s3, "bad", b'[{"a": 1}, {"b": 2}, 3]')
    reader = ManifestReader(s3)
    first = reader.read(url, limit=1)
    second = reader.read(url, offset=first.next_offset, limit=1)
    assert second.entries == [{"b": 2}]
    with pytest.raises(InvalidMessageError, match="the entry at byte 21 is not a JSON object"):
        reader.read(url, offset=second.next_offset, limit=1)


@pytest.mark.parametrize(("offset", "limit"), [(-1, 1), (0, 0)])
def test_bad_arguments(s3: Any, offset: int, limit: int) -> None:
    with pytest.raises(ValueError, match="must"):
        ManifestReader(s3).read(f"s3://{BUCKET}/m", offset=offset, limit=limit)


# Where every chunk starts, in one pass


@pytest.mark.parametrize("body", [array_body, lines_body], ids=["array", "lines"])
@pytest.mark.parametrize("block_bytes", [1, 3, BLOCK_BYTES])
def test_chunk_starts_are_the_offsets_slice_by_slice_reading_hands_out(
    s3: Any, body: Any, block_bytes: int
) -> None:
    url = put(s3, "m", body(ENTRIES))
    reader = ManifestReader(s3, block_bytes=block_bytes)
    for limit in range(1, len(ENTRIES) + 1):
        slices = read_all(reader, url, limit)
        if len(slices) == 1:
            continue  # one chunk: nothing to fan out
        # WHEN the starts are found from the second slice's offset in one read
        got = reader.chunk_starts(url, offset=slices[0].next_offset, limit=limit)
        # THEN they are the offsets of every slice after the first, as read() hands them out
        assert got == [part.next_offset for part in slices[:-1]]
        assert len(got) == -(-len(ENTRIES) // limit) - 1


def test_chunk_starts_refuse_a_malformed_entry_anywhere_after_the_first_chunk(s3: Any) -> None:
    lines = [json.dumps(entry, ensure_ascii=False) for entry in ENTRIES]
    lines[-1] = '{"id": "cut short"'
    url = put(s3, "m", ("\n".join(lines) + "\n").encode())
    reader = ManifestReader(s3)
    first = reader.read(url, limit=2)
    with pytest.raises(InvalidMessageError) as caught:
        reader.chunk_starts(url, offset=first.next_offset, limit=2)
    assert_invalid_join(caught)


def test_chunk_starts_read_only_the_version_the_join_began_with(s3: Any) -> None:
    url = put(s3, "m", lines_body(ENTRIES))
    reader = ManifestReader(s3)
    first = reader.read(url, limit=2)
    put(s3, "m", lines_body(list(reversed(ENTRIES))))
    with pytest.raises(InvalidMessageError) as caught:
        reader.chunk_starts(url, offset=first.next_offset, limit=2, version=first.version)
    assert_invalid_join(caught)
    assert "changed" in caught.value.reason
