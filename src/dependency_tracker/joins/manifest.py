"""Join manifests: S3 objects listing payloads, read in bounded slices.

A manifest is a JSON array or JSON Lines; each entry is a payload object or a
``{"url": "s3://..."}`` reference (not validated here). :meth:`ManifestReader.read`
returns at most ``limit`` entries starting at a byte offset, reading the object
with ``Range: bytes=<offset>-`` and only as far as those entries and one peek.

Offsets are byte offsets into the object. The format is told apart from the
offset alone, with no second request: at 0 by the first non-whitespace byte
(``[`` is an array, anything else JSON Lines); past 0 by the byte a slice of
each format ends on. An array slice that stops before the end returns the
offset of the ``,`` that follows its last entry; a JSON Lines slice returns the
offset of the next entry's first byte, which is never ``,`` (an entry that
starts with it is refused when the slice before it peeks). So a slice at an
offset past 0 whose first non-whitespace byte is ``,`` continues an array.
When ``end`` is True, ``next_offset`` is the object's size.

A join reads one version of its manifest: the first slice records the object's
ETag (and version id, in a versioned bucket) and every later slice is read
with ``IfMatch`` (and that ``VersionId``), so a manifest overwritten while a
join registers is refused instead of read as a mix of two lists.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TypedDict
from urllib.parse import urlparse

from botocore.exceptions import ClientError

from dependency_tracker.core.enums import DependencyError
from dependency_tracker.core.errors import InvalidMessageError
from dependency_tracker.payloads.bucket import MAX_PAYLOAD_BYTES

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from botocore.response import StreamingBody
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_s3.type_defs import GetObjectOutputTypeDef

# The manifest cannot be read, and retrying will not change that.
_UNREADABLE_CODES = frozenset({"NoSuchKey", "NoSuchBucket", "AccessDenied", "404", "403"})
# S3 refuses a range starting at or past the object's size (and any range of an empty object).
_INVALID_RANGE = "InvalidRange"
# IfMatch no longer holds: the object was overwritten. NoSuchVersion: the version read is gone.
_CHANGED_CODES = frozenset({"PreconditionFailed", "412", "NoSuchVersion"})

BLOCK_BYTES = 64 * 1024

_WHITESPACE = b" \t\r\n"
_BOM = b"\xef\xbb\xbf"
_COMMA, _OPEN_ARRAY, _CLOSE_ARRAY, _OPEN_OBJECT = b",", b"[", b"]", b"{"
# UTF-8 continuation bytes are all >= 0x80, so these ASCII bytes can be searched for in raw bytes.
_STRUCTURE = re.compile(rb'["{}\[\]]')
_IN_STRING = re.compile(rb'["\\]')
# Line breaks for str.splitlines that json.dumps(ensure_ascii=False) does not escape.
_LINE_BREAKS = str.maketrans({char: f"\\u{ord(char):04x}" for char in "\x85\u2028\u2029"})


class Pinned(TypedDict, total=False):
    """``GetObject``/``HeadObject`` arguments naming one version of an object."""

    IfMatch: str
    VersionId: str


@dataclass(frozen=True)
class ObjectVersion:
    """Which version of an S3 object was read: its ETag, and its version id if versioned."""

    etag: str | None = None
    version_id: str | None = None

    def pinned(self) -> Pinned:
        """``GetObject``/``HeadObject`` arguments that read this version or fail."""
        arguments = Pinned(IfMatch=self.etag) if self.etag else Pinned()
        if self.version_id:
            arguments["VersionId"] = self.version_id
        return arguments


@dataclass(frozen=True)
class ManifestSlice:
    """Entries of a manifest from one offset on, and where the next slice starts."""

    entries: list[dict[str, Any]]  # raw JSON objects, in manifest order (not validated)
    next_offset: int  # byte offset in the object where the next slice starts
    end: bool  # True when no entry follows these entries
    # The version these entries were read from (slices compare by content).
    version: ObjectVersion = field(default=ObjectVersion(), compare=False)


def manifest_text(entries: Iterable[Mapping[str, Any]]) -> str:
    """A manifest as JSON Lines: one compact JSON object per line, each ending in a newline.

    Text stays raw UTF-8, except the characters ``str.splitlines`` also breaks
    at (which JSON leaves raw): they are escaped, so any line splitter agrees.
    """
    return "".join(
        json.dumps(dict(entry), separators=(",", ":"), ensure_ascii=False).translate(_LINE_BREAKS)
        + "\n"
        for entry in entries
    )


class ManifestReader:
    """Reads manifests from S3 a slice at a time, never the whole object for one slice."""

    def __init__(
        self,
        s3: S3Client,
        *,
        block_bytes: int = BLOCK_BYTES,
        max_entry_bytes: int = MAX_PAYLOAD_BYTES,
    ) -> None:
        if block_bytes < 1 or max_entry_bytes < 1:
            msg = "block_bytes and max_entry_bytes must be positive"
            raise ValueError(msg)
        self._s3 = s3
        self._block_bytes = block_bytes
        self._max_entry_bytes = max_entry_bytes

    def read(
        self, url: str, *, offset: int = 0, limit: int, version: ObjectVersion | None = None
    ) -> ManifestSlice:
        """At most ``limit`` entries from ``offset`` (0, or a ``next_offset`` returned before).

        With ``version`` (a slice's ``version`` read before) only that version is
        read; a manifest changed since is refused.

        Raises:
            InvalidMessageError: The url is malformed, the manifest cannot be read,
                is not a manifest or changed since ``version`` (``InvalidJoin``, not
                retryable).
            ClientError: Any other S3 failure (throttling, 5xx), unchanged.
        """
        if limit < 1:
            msg = f"limit must be at least 1, not {limit}"
            raise ValueError(msg)
        if offset < 0:
            msg = f"offset must not be negative, not {offset}"
            raise ValueError(msg)
        bucket, key = _split_url(url)
        pinned = version.pinned() if version is not None else Pinned()
        try:
            response = self._get(url, offset, version)
        except ClientError as exc:
            if _code(exc) != _INVALID_RANGE:
                raise
            if offset == 0:  # an empty object
                raise _invalid(f"manifest {url} has no entry") from exc
            if pinned:
                # Past the end of *some* version: make sure it is still the one read.
                self._check_unchanged(bucket, key, url, version, pinned)
            return ManifestSlice([], offset, end=True, version=version or ObjectVersion())
        body = response["Body"]
        try:
            parser = _SliceParser(
                _Window(body, offset, self._block_bytes),
                url=url,
                start=offset,
                limit=limit,
                max_entry_bytes=self._max_entry_bytes,
            )
            read = ObjectVersion(response.get("ETag"), response.get("VersionId"))
            return replace(parser.parse(), version=read)
        finally:
            body.close()

    def chunk_starts(
        self, url: str, *, offset: int, limit: int, version: ObjectVersion | None = None
    ) -> list[int]:
        """Where each chunk of ``limit`` entries starts, from ``offset`` (a chunk's start) on.

        One streamed ``GetObject`` of the rest of the object (only ``version``, when
        given): every entry is parsed, so a malformed one is refused here, before any
        later chunk is registered, and none is kept (memory stays one block and one
        chunk). The first start is ``offset``; each other one is an offset :meth:`read`
        takes. Errors as :meth:`read`.
        """
        if limit < 1:
            msg = f"limit must be at least 1, not {limit}"
            raise ValueError(msg)
        body = self._get(url, offset, version)["Body"]
        starts = [offset]
        try:
            window = _Window(body, offset, self._block_bytes)
            while True:
                piece = _SliceParser(
                    window,
                    url=url,
                    start=starts[-1],
                    limit=limit,
                    max_entry_bytes=self._max_entry_bytes,
                ).parse()
                if piece.end:
                    return starts
                starts.append(piece.next_offset)
        finally:
            body.close()

    def _get(self, url: str, offset: int, version: ObjectVersion | None) -> GetObjectOutputTypeDef:
        """``GetObject`` from ``offset`` on (only ``version``, when given).

        Raises:
            InvalidMessageError: The manifest changed or cannot be read (not retryable).
            ClientError: Any other S3 failure (``InvalidRange``, throttling, 5xx), unchanged.
        """
        bucket, key = _split_url(url)
        pinned = version.pinned() if version is not None else Pinned()
        try:
            return self._s3.get_object(Bucket=bucket, Key=key, Range=f"bytes={offset}-", **pinned)
        except ClientError as exc:
            code = _code(exc)
            if code in _CHANGED_CODES:
                raise _changed(url, version, code) from exc
            if code in _UNREADABLE_CODES:
                raise _invalid(f"manifest {url} cannot be read: {code}") from exc
            raise

    def _check_unchanged(
        self,
        bucket: str,
        key: str,
        url: str,
        version: ObjectVersion | None,
        pinned: Pinned,
    ) -> None:
        try:
            self._s3.head_object(Bucket=bucket, Key=key, **pinned)
        except ClientError as exc:
            code = _code(exc)
            if code in _CHANGED_CODES:
                raise _changed(url, version, code) from exc
            raise


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _changed(url: str, version: ObjectVersion | None, code: str) -> InvalidMessageError:
    return _invalid(changed_cause(url, version.etag if version else None, f"S3 answered {code}"))


def changed_cause(url: str | None, etag: str | None, now: str) -> str:
    """Why a join whose member list changed under it is refused (``now``: what was seen)."""
    return (
        f"manifest {url} changed while the join was registering its members (first read"
        f" as ETag {etag}; {now}): a join reads one version of its member list, so write"
        " a changed list under a new key and start a new join"
    )


def _split_url(url: str) -> tuple[str, str]:
    parsed = urlparse(url)
    bucket, key = parsed.netloc, parsed.path.lstrip("/")
    if parsed.scheme != "s3" or not bucket or not key:
        raise _invalid(f"malformed manifest url {url!r} (expected s3://bucket/key)")
    return bucket, key


def _invalid(reason: str) -> InvalidMessageError:
    return InvalidMessageError(reason, error_name=DependencyError.INVALID_JOIN)


class _Window:
    """A forward-only view of a streamed body, addressed by byte offsets in the object.

    Holds the bytes from ``pos`` on (plus what was read past it); bytes before
    ``pos`` are dropped when a block is added, so skipping never buffers.
    """

    def __init__(self, body: StreamingBody, start: int, block_bytes: int) -> None:
        self._body = body
        self._block_bytes = block_bytes
        self.buffer = bytearray()
        self.base = start  # object offset of buffer[0]
        self.pos = start  # object offset of the first byte not consumed
        self.eof = False

    @property
    def end(self) -> int:
        """Object offset just past the last byte read."""
        return self.base + len(self.buffer)

    def fill(self) -> bool:
        """Read one more block; False at the end of the object."""
        if self.eof:
            return False
        block: bytes = self._body.read(self._block_bytes)
        if not block:
            self.eof = True
            return False
        drop = self.pos - self.base
        if drop:
            del self.buffer[:drop]
            self.base = self.pos
        self.buffer += block
        return True

    def peek(self) -> int | None:
        """The next byte that is not JSON whitespace (consuming the whitespace); None at the end."""
        while True:
            index = self.pos - self.base
            buffer = self.buffer
            while index < len(buffer) and buffer[index] in _WHITESPACE:
                index += 1
            self.pos = self.base + index
            if index < len(buffer):
                return buffer[index]
            if not self.fill():
                return None

    def starts_with(self, prefix: bytes) -> bool:
        """True when the bytes at ``pos`` are ``prefix`` (reading as needed)."""
        while self.end - self.pos < len(prefix) and self.fill():
            pass
        index = self.pos - self.base
        return bytes(self.buffer[index : index + len(prefix)]) == prefix

    def take(self, start: int, stop: int) -> bytes:
        """The bytes at object offsets ``start:stop`` (both in the buffer)."""
        return bytes(self.buffer[start - self.base : stop - self.base])


class _SliceParser:
    """Parses one slice; the format comes from the offset (see the module docstring)."""

    def __init__(
        self, window: _Window, *, url: str, start: int, limit: int, max_entry_bytes: int
    ) -> None:
        self._window = window
        self._url = url
        self._start = start
        self._limit = limit
        self._max = max_entry_bytes
        self._entries: list[dict[str, Any]] = []

    def parse(self) -> ManifestSlice:
        window = self._window
        if self._start == 0 and window.starts_with(_BOM):
            window.pos += len(_BOM)
        first = window.peek()
        if first is None:
            if self._start == 0:
                raise _invalid(f"manifest {self._url} has no entry")
            return ManifestSlice([], window.pos, end=True)
        if self._start == 0 and first == _OPEN_ARRAY[0]:
            window.pos += 1
            if window.peek() == _CLOSE_ARRAY[0]:
                raise _invalid(f"manifest {self._url} has no entry (an empty array)")
            return self._array()
        if self._start > 0 and first == _COMMA[0]:
            window.pos += 1
            return self._array()
        return self._lines()

    # JSON array: positioned after ``[`` or ``,``, an entry is expected.

    def _array(self) -> ManifestSlice:
        window = self._window
        while True:
            self._array_entry()
            separator = window.peek()
            if separator == _COMMA[0]:
                if len(self._entries) == self._limit:
                    return ManifestSlice(self._entries, window.pos, end=False)
                window.pos += 1
                continue
            if separator == _CLOSE_ARRAY[0]:
                window.pos += 1
                if window.peek() is not None:
                    raise _invalid(
                        f"manifest {self._url}: unexpected content after the array's "
                        f"closing ] at byte {window.pos}"
                    )
                return ManifestSlice(self._entries, window.pos, end=True)
            if separator is None:
                raise _invalid(
                    f"manifest {self._url}: the array is not closed (it ends at byte {window.pos})"
                )
            raise _invalid(
                f"manifest {self._url} is not JSON: expected , or ] at byte {window.pos}"
            )

    def _array_entry(self) -> None:
        window = self._window
        first = window.peek()
        start = window.pos
        if first is None:
            raise _invalid(
                f"manifest {self._url}: the array is not closed (it ends at byte {start})"
            )
        if first != _OPEN_OBJECT[0]:
            what = "a trailing ," if first == _CLOSE_ARRAY[0] else "not a JSON object"
            raise _invalid(f"manifest {self._url}: {self._where(start)} is {what}")
        stop = self._object_end(start)
        self._add(window.take(start, stop), start)
        window.pos = stop

    def _object_end(self, start: int) -> int:
        """Offset just past the object starting at ``start``, by brackets and strings."""
        window = self._window
        depth = 0
        in_string = False
        cursor = start
        while True:
            pattern = _IN_STRING if in_string else _STRUCTURE
            match = pattern.search(window.buffer, cursor - window.base)
            if match is None:
                cursor = max(cursor, window.end)
                self._check_size(start, cursor)
                if not window.fill():
                    raise _invalid(
                        f"manifest {self._url}: the array is not closed "
                        f"({self._where(start)} is cut short at byte {window.end})"
                    )
                continue
            byte = window.buffer[match.start()]
            cursor = window.base + match.end()
            if in_string:
                if byte == ord("\\"):
                    cursor += 1  # the escaped byte, read or not yet
                else:
                    in_string = False
            elif byte == ord('"'):
                in_string = True
            elif byte in b"{[":
                depth += 1
            else:
                depth -= 1
                if depth == 0:
                    self._check_size(start, cursor)
                    return cursor
            self._check_size(start, cursor)

    # JSON Lines: positioned at a line's first byte that is not whitespace.

    def _lines(self) -> ManifestSlice:
        window = self._window
        while True:
            start = window.pos
            stop = self._line_end(start)
            self._add(window.take(start, stop), start)
            window.pos = stop
            following = window.peek()
            if following is None:
                return ManifestSlice(self._entries, window.pos, end=True)
            if following == _COMMA[0]:  # would read as an array's continuation
                raise _invalid(f"manifest {self._url}: {self._where(window.pos)} is not JSON")
            if len(self._entries) == self._limit:
                return ManifestSlice(self._entries, window.pos, end=False)

    def _line_end(self, start: int) -> int:
        """Offset of the newline ending the line at ``start`` (or of the object's end)."""
        window = self._window
        cursor = start
        while True:
            found = window.buffer.find(b"\n", cursor - window.base)
            if found >= 0:
                stop = window.base + found
                self._check_size(start, stop)
                return stop
            cursor = window.end
            self._check_size(start, cursor)
            if not window.fill():
                return cursor

    # Entries.

    def _add(self, raw: bytes, start: int) -> None:
        where = self._where(start)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _invalid(f"manifest {self._url}: {where} is not UTF-8 text") from exc
        try:
            entry = json.loads(text)
        except json.JSONDecodeError as exc:
            raise _invalid(f"manifest {self._url}: {where} is not JSON: {exc.msg}") from exc
        if not isinstance(entry, dict):
            raise _invalid(
                f"manifest {self._url}: {where} is not a JSON object ({type(entry).__name__})"
            )
        self._entries.append(entry)

    def _check_size(self, start: int, stop: int) -> None:
        if stop - start > self._max:
            raise _invalid(f"manifest {self._url}: {self._where(start)} exceeds {self._max} bytes")

    def _where(self, start: int) -> str:
        """The entry at object offset ``start``, with its index when this slice began at 0."""
        if self._start == 0:
            return f"entry {len(self._entries)} (byte {start})"
        return f"the entry at byte {start}"
