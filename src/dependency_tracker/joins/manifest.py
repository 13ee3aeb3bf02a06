"""Join manifests: S3 objects listing payloads, read in bounded slices.

A manifest is a JSON array or JSON Lines; each entry is a payload object or a
``{"url": "s3://..."}`` reference (not validated here). :meth:`ManifestReader.read`
returns at most ``limit`` entries starting at a byte offset, reading the object
with ``Range: bytes=<offset>-`` and only as far as those entries and one peek;
joins/manifest_parser.py parses the streamed bytes and tells the format apart
from the offset alone.

A join reads one version of its manifest: the first slice records the object's
ETag (and version id, in a versioned bucket) and every later slice is read
with ``IfMatch`` (and that ``VersionId``), so a manifest overwritten while a
join registers is refused instead of read as a mix of two lists.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict
from urllib.parse import urlparse

from botocore.exceptions import ClientError

from dependency_tracker.joins.manifest_parser import ByteWindow, SliceParser, invalid_manifest
from dependency_tracker.payloads.bucket import MAX_PAYLOAD_BYTES

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from mypy_boto3_s3 import S3Client
    from mypy_boto3_s3.type_defs import GetObjectOutputTypeDef

    from dependency_tracker.core.errors import InvalidMessageError

# The manifest cannot be read, and retrying will not change that.
_UNREADABLE_CODES = frozenset({"NoSuchKey", "NoSuchBucket", "AccessDenied", "404", "403"})
# S3 refuses a range starting at or past the object's size (and any range of an empty object).
_INVALID_RANGE = "InvalidRange"
# IfMatch no longer holds: the object was overwritten. NoSuchVersion: the version read is gone.
_CHANGED_CODES = frozenset({"PreconditionFailed", "412", "NoSuchVersion"})

BLOCK_BYTES = 64 * 1024

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
                raise invalid_manifest(f"manifest {url} has no entry") from exc
            if pinned:
                # Past the end of *some* version: make sure it is still the one read.
                self._check_unchanged(bucket, key, url, version, pinned)
            return ManifestSlice([], offset, end=True, version=version or ObjectVersion())
        body = response["Body"]
        try:
            parser = SliceParser(
                ByteWindow(body, offset, self._block_bytes),
                url=url,
                start=offset,
                limit=limit,
                max_entry_bytes=self._max_entry_bytes,
            )
            read = ObjectVersion(response.get("ETag"), response.get("VersionId"))
            parsed = parser.parse()
            return ManifestSlice(parsed.entries, parsed.next_offset, parsed.end, version=read)
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
            window = ByteWindow(body, offset, self._block_bytes)
            while True:
                piece = SliceParser(
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
                raise invalid_manifest(f"manifest {url} cannot be read: {code}") from exc
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
    return invalid_manifest(
        changed_cause(url, version.etag if version else None, f"S3 answered {code}")
    )


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
        raise invalid_manifest(f"malformed manifest url {url!r} (expected s3://bucket/key)")
    return bucket, key
