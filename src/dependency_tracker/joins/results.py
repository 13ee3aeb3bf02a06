"""A decided join's results manifest: every member's outcome, one JSON line each, in S3.

Written when the join's parent is answered (joins/notify.py) and, once, again when
the last member still running then ends (:meth:`JoinResults.finish`, from
joins/counting.py). The writer streams: one chunk row's members at a time
(``member_pages``), their lines into a buffer of at most one part, each full
part an ``UploadPart`` of one S3 multipart upload; a manifest smaller than one
part is a single ``PutObject``. The key is the join's alone, so a redelivered
record rewrites the same object. :func:`read_results` reads one back line by line.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from botocore.exceptions import ClientError
from pydantic import BaseModel

from dependency_tracker.core.enums import DependencyError, PayloadState
from dependency_tracker.core.limits import KIB
from dependency_tracker.core.observability import logger

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from mypy_boto3_s3 import S3Client

    from dependency_tracker.joins.store import JoinStore
    from dependency_tracker.payloads.bucket import PayloadBucket
    from dependency_tracker.table.items import MembershipItem

# Beside the join's inline member list (joins/member_list.py): one folder per join.
RESULTS_KEY_PREFIX = "joins"
RESULTS_FILE = "results.jsonl"
# S3's multipart limits: every part but the last at least 5 MiB, at most 10,000 parts.
MIN_PART_BYTES = 5 * KIB * KIB
MAX_PARTS = 10_000
# 8 MiB parts: at 100,000 members of ~1 KiB lines, about a dozen parts; the buffer is
# the writer's memory, whatever n is.
DEFAULT_PART_BYTES = 8 * KIB * KIB


class MemberResult(BaseModel):
    """One line of a results manifest: a member and how it ended (``state`` None: pending)."""

    payload_id: str
    state: PayloadState | None = None
    execution_arn: str | None = None
    # The hrefs of the stored result's items (each output feature's self link); None
    # when the result is stored by reference (read ``output_url``) or was cut.
    items: list[str] | None = None
    output_url: str | None = None
    error: str | None = None
    cause: str | None = None

    @classmethod
    def of(cls, payload_id: str, row: MembershipItem | None) -> MemberResult:
        """The line of a member from its membership row (None, or not terminal: pending)."""
        if row is None or not row.workflow_state.is_terminal:
            return cls(payload_id=payload_id)
        items, output_url = stored_items(row.result_json)
        return cls(
            payload_id=row.payload_id,
            state=row.workflow_state,
            execution_arn=row.execution_arn,
            items=items,
            output_url=output_url,
            error=row.error,
            cause=row.cause,
        )


def stored_items(result_json: str | None) -> tuple[list[str] | None, str | None]:
    """``(items, output_url)`` of a stored result (payloads/results.py, cirrus/flow.py).

    By reference (``{"url", ...}``): no items, the url. Inline with the run's
    ``output`` a FeatureCollection-like document: per feature, its ``self`` link's
    href, else its assets' hrefs (in the order given). Inline without it (cirrus's
    ``{"items": [{"href"}], "output_url"}``): the items' hrefs. A list cut short
    (``truncated``) gives ``None``: ``items`` is complete or absent, never partial.
    """
    result = _parsed(result_json)
    if result is None:
        return None, None
    if isinstance(result.get("url"), str):
        return None, result["url"]
    output_url = result["output_url"] if isinstance(result.get("output_url"), str) else None
    if result.get("truncated"):
        return None, output_url
    output = result.get("output")
    if isinstance(output, dict) and isinstance(output.get("features"), list):
        return [href for feature in output["features"] for href in _hrefs(feature)], output_url
    listed = result.get("items")
    if not isinstance(listed, list):
        return None, output_url
    return [str(i["href"]) for i in listed if isinstance(i, dict) and i.get("href")], output_url


def _parsed(result_json: str | None) -> dict[str, Any] | None:
    """A stored result as an object, or None (none stored, or not a JSON object)."""
    try:
        result = json.loads(result_json) if result_json else None
    except json.JSONDecodeError:
        return None
    return result if isinstance(result, dict) else None


def _hrefs(feature: object) -> list[str]:
    """A feature's ``self`` href, else its assets' hrefs."""
    if not isinstance(feature, dict):
        return []
    for link in feature.get("links") or []:
        if isinstance(link, dict) and link.get("rel") == "self" and link.get("href"):
            return [str(link["href"])]
    assets = feature.get("assets")
    if not isinstance(assets, dict):
        return []
    return [str(a["href"]) for a in assets.values() if isinstance(a, dict) and a.get("href")]


def results_key(join_id: str) -> str:
    """Bucket key of a join's results manifest: the same for every write of the join."""
    digest = hashlib.sha256(join_id.encode("utf-8")).hexdigest()
    return f"{RESULTS_KEY_PREFIX}/{digest}/{RESULTS_FILE}"


class JoinResults:
    """Writes decided joins' results manifests to the payload bucket."""

    def __init__(
        self, *, bucket: PayloadBucket, joins: JoinStore, part_bytes: int = DEFAULT_PART_BYTES
    ) -> None:
        # Parts under 5 MiB are for tests (moto's minimum lowered): AWS refuses them.
        self._bucket = bucket
        self._joins = joins
        self.part_bytes = part_bytes

    @property
    def writable(self) -> bool:
        """False when the stack has no payload bucket: no manifest is written."""
        return self._bucket.writable

    def write(self, join_id: str) -> str | None:
        """Write the join's manifest from its rows as they are now; its ``s3://`` url."""
        if not self.writable:
            return None
        lines = (
            MemberResult.of(name, row).model_dump_json().encode("utf-8") + b"\n"
            for page in self._joins.member_pages(join_id)
            for name, row in page
        )
        return self._upload(results_key(join_id), lines)

    def write_decided(self, join_id: str) -> str | None:
        """Write a decided join's manifest as its parent is answered; its url.

        Written again when the final version was claimed meanwhile: this write may
        have read rows older than the final writer's, and must not be the last.
        """
        url = self.write(join_id)
        current = self._joins.get(join_id) if url is not None else None
        if current is not None and current.results_final_at is not None:
            self.write(join_id)
        return url

    def finish(self, join_id: str) -> str | None:
        """Rewrite a decided join's manifest once every member is counted: the final version.

        The join row's ``results_final_at`` is claimed first (conditional: one writer);
        a failed write gives the claim back and raises, so the record's retry writes it.
        A writer that dies between its claim and its write (a timeout) leaves the
        decision-time version: nothing here can tell it from a writer still at work.
        """
        if not self.writable:
            return None
        join, succeeded, failed = self._joins.read(join_id)
        if join is None or not join.workflow_state.is_terminal or join.results_final_at:
            return None
        if join.error == DependencyError.INVALID_JOIN.value:
            return None  # never had a manifest: its members are not the news
        total = join.known_total
        if total is None or succeeded + failed < total:
            return None
        if not self._joins.claim_results_final(join_id):
            return None
        try:
            url = self.write(join_id)
        except Exception:
            self._joins.claim_results_final(join_id, claim=False)
            raise
        logger.info("final results manifest written", extra={"url": url})
        return url

    def _upload(self, key: str, lines: Iterable[bytes]) -> str:
        """Stream ``lines`` to ``key``: one ``PutObject`` if they fit one part, else multipart."""
        s3, bucket = self._bucket.client, self._bucket.bucket_name
        assert bucket is not None  # noqa: S101  (writable checked by the callers)
        buffer = bytearray()
        upload: _Multipart | None = None
        try:
            for line in lines:
                buffer += line
                if len(buffer) >= self.part_bytes:
                    upload = upload or _Multipart(s3, bucket, key)
                    upload.add(bytes(buffer))
                    buffer.clear()
            if upload is None:
                s3.put_object(
                    Bucket=bucket, Key=key, Body=bytes(buffer), ContentType="application/x-ndjson"
                )
            else:
                if buffer:
                    upload.add(bytes(buffer))
                upload.complete()
        except Exception:
            if upload is not None:
                upload.abort()
            raise
        return self._bucket.url(key)


class _Multipart:
    """One S3 multipart upload: parts added in order, then completed or aborted."""

    def __init__(self, s3: S3Client, bucket: str, key: str) -> None:
        self._s3, self._bucket, self._key = s3, bucket, key
        created = s3.create_multipart_upload(
            Bucket=bucket, Key=key, ContentType="application/x-ndjson"
        )
        self._id = created["UploadId"]
        self._parts: list[dict[str, Any]] = []

    def add(self, body: bytes) -> None:
        number = len(self._parts) + 1
        if number > MAX_PARTS:
            msg = f"results manifest over {MAX_PARTS} parts: raise the part size"
            raise ValueError(msg)
        sent = self._s3.upload_part(
            Bucket=self._bucket, Key=self._key, UploadId=self._id, PartNumber=number, Body=body
        )
        self._parts.append({"PartNumber": number, "ETag": sent["ETag"]})

    def complete(self) -> None:
        self._s3.complete_multipart_upload(
            Bucket=self._bucket,
            Key=self._key,
            UploadId=self._id,
            MultipartUpload={"Parts": self._parts},  # type: ignore[typeddict-item]
        )

    def abort(self) -> None:
        """Give the parts back; the bucket's lifecycle rule aborts what this cannot."""
        try:
            self._s3.abort_multipart_upload(Bucket=self._bucket, Key=self._key, UploadId=self._id)
        except ClientError as exc:
            logger.warning("results manifest upload not aborted", extra={"error": str(exc)})


def read_results(url: str, *, s3: S3Client | None = None) -> Iterator[MemberResult]:
    """The members of a results manifest at ``url`` (a summary's ``results_url``), streamed."""
    parsed = urlparse(url)
    bucket, key = parsed.netloc, parsed.path.lstrip("/")
    if parsed.scheme != "s3" or not bucket or not key:
        msg = f"not an s3:// url: {url!r}"
        raise ValueError(msg)
    if s3 is None:
        import boto3  # noqa: PLC0415  (only a caller without a client needs it)

        s3 = boto3.client("s3")
    body = s3.get_object(Bucket=bucket, Key=key)["Body"]
    for line in body.iter_lines():
        if line:
            yield MemberResult.model_validate_json(line)
