"""Parsing a manifest slice from a byte window of the streamed object.

Offsets are byte offsets into the object. The format is told apart from the
offset alone, with no second request: at 0 by the first non-whitespace byte
(``[`` is an array, anything else JSON Lines); past 0 by the byte a slice of
each format ends on. An array slice that stops before the end returns the
offset of the ``,`` that follows its last entry; a JSON Lines slice returns the
offset of the next entry's first byte, which is never ``,`` (an entry that
starts with it is refused when the slice before it peeks). So a slice at an
offset past 0 whose first non-whitespace byte is ``,`` continues an array.
When ``end`` is True, ``next_offset`` is the object's size.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dependency_tracker.core.enums import DependencyError
from dependency_tracker.core.errors import InvalidMessageError

if TYPE_CHECKING:
    from botocore.response import StreamingBody

_WHITESPACE = b" \t\r\n"
_BOM = b"\xef\xbb\xbf"
_COMMA, _OPEN_ARRAY, _CLOSE_ARRAY, _OPEN_OBJECT = b",", b"[", b"]", b"{"
# UTF-8 continuation bytes are all >= 0x80, so these ASCII bytes can be searched for in raw bytes.
_STRUCTURE = re.compile(rb'["{}\[\]]')
_IN_STRING = re.compile(rb'["\\]')


@dataclass(frozen=True)
class ParsedSlice:
    """Entries parsed from one offset on, and where the next slice starts."""

    entries: list[dict[str, Any]]  # raw JSON objects, in manifest order (not validated)
    next_offset: int  # byte offset in the object where the next slice starts
    end: bool  # True when no entry follows these entries


def invalid_manifest(reason: str) -> InvalidMessageError:
    """The manifest is unusable: the join fails ``InvalidJoin`` (not retryable)."""
    return InvalidMessageError(reason, error_name=DependencyError.INVALID_JOIN)


class ByteWindow:
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


class SliceParser:
    """Parses one slice; the format comes from the offset (see the module docstring)."""

    def __init__(
        self, window: ByteWindow, *, url: str, start: int, limit: int, max_entry_bytes: int
    ) -> None:
        self._window = window
        self._url = url
        self._start = start
        self._limit = limit
        self._max = max_entry_bytes
        self._entries: list[dict[str, Any]] = []

    def parse(self) -> ParsedSlice:
        """The slice's entries, up to ``limit``, and where the next one starts."""
        window = self._window
        if self._start == 0 and window.starts_with(_BOM):
            window.pos += len(_BOM)
        first = window.peek()
        if first is None:
            if self._start == 0:
                raise invalid_manifest(f"manifest {self._url} has no entry")
            return ParsedSlice([], window.pos, end=True)
        if self._start == 0 and first == _OPEN_ARRAY[0]:
            window.pos += 1
            if window.peek() == _CLOSE_ARRAY[0]:
                raise invalid_manifest(f"manifest {self._url} has no entry (an empty array)")
            return self._array()
        if self._start > 0 and first == _COMMA[0]:
            window.pos += 1
            return self._array()
        return self._lines()

    # JSON array: positioned after ``[`` or ``,``, an entry is expected.

    def _array(self) -> ParsedSlice:
        window = self._window
        while True:
            self._array_entry()
            separator = window.peek()
            if separator == _COMMA[0]:
                if len(self._entries) == self._limit:
                    return ParsedSlice(self._entries, window.pos, end=False)
                window.pos += 1
                continue
            if separator == _CLOSE_ARRAY[0]:
                window.pos += 1
                if window.peek() is not None:
                    raise invalid_manifest(
                        f"manifest {self._url}: unexpected content after the array's "
                        f"closing ] at byte {window.pos}"
                    )
                return ParsedSlice(self._entries, window.pos, end=True)
            if separator is None:
                raise invalid_manifest(
                    f"manifest {self._url}: the array is not closed (it ends at byte {window.pos})"
                )
            raise invalid_manifest(
                f"manifest {self._url} is not JSON: expected , or ] at byte {window.pos}"
            )

    def _array_entry(self) -> None:
        window = self._window
        first = window.peek()
        start = window.pos
        if first is None:
            raise invalid_manifest(
                f"manifest {self._url}: the array is not closed (it ends at byte {start})"
            )
        if first != _OPEN_OBJECT[0]:
            what = "a trailing ," if first == _CLOSE_ARRAY[0] else "not a JSON object"
            raise invalid_manifest(f"manifest {self._url}: {self._where(start)} is {what}")
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
                    raise invalid_manifest(
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

    def _lines(self) -> ParsedSlice:
        window = self._window
        while True:
            start = window.pos
            stop = self._line_end(start)
            self._add(window.take(start, stop), start)
            window.pos = stop
            following = window.peek()
            if following is None:
                return ParsedSlice(self._entries, window.pos, end=True)
            if following == _COMMA[0]:  # would read as an array's continuation
                raise invalid_manifest(
                    f"manifest {self._url}: {self._where(window.pos)} is not JSON"
                )
            if len(self._entries) == self._limit:
                return ParsedSlice(self._entries, window.pos, end=False)

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
            raise invalid_manifest(f"manifest {self._url}: {where} is not UTF-8 text") from exc
        try:
            entry = json.loads(text)
        except json.JSONDecodeError as exc:
            raise invalid_manifest(f"manifest {self._url}: {where} is not JSON: {exc.msg}") from exc
        if not isinstance(entry, dict):
            raise invalid_manifest(
                f"manifest {self._url}: {where} is not a JSON object ({type(entry).__name__})"
            )
        self._entries.append(entry)

    def _check_size(self, start: int, stop: int) -> None:
        if stop - start > self._max:
            raise invalid_manifest(
                f"manifest {self._url}: {self._where(start)} exceeds {self._max} bytes"
            )

    def _where(self, start: int) -> str:
        """The entry at object offset ``start``, with its index when this slice began at 0."""
        if self._start == 0:
            return f"entry {len(self._entries)} (byte {start})"
        return f"the entry at byte {start}"
