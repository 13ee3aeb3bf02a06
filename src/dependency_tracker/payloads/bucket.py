"""Payloads stored in S3 and referenced by ``{"url": "s3://bucket/key"}`` messages."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from botocore.exceptions import ClientError

from dependency_tracker.core.errors import InvalidMessageError
from dependency_tracker.core.limits import KIB, SQS_DEFAULT_MAX_MESSAGE_BYTES, utf8_size

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

# A missing object may appear (eventual writers, late deploys, a grant still
# propagating): retrying can help, so these fail the record instead of dropping it.
_RETRYABLE_CODES = frozenset({"NoSuchKey", "AccessDenied", "404", "403"})
# A bucket that does not exist is a wrong url, not a late writer: the sender hears it at once
# rather than after every retry and its whole callback timeout.
_MISSING_BUCKET = "NoSuchBucket"

# If-None-Match: * refused: the object exists (412), or a write of it is in flight (409).
_ALREADY_WRITTEN_CODES = frozenset({"PreconditionFailed", "412", "ConditionalRequestConflict"})

# A process payload larger than this is not a payload but an accident.
MAX_PAYLOAD_BYTES = 10 * 1024 * 1024

# What the tracker itself sends to its process queue (a chained next step, an operator's
# rerun) goes inline up to the queue's maximum message size (256 KiB, set on the template's
# queue and the embedded stack's) less 16 KiB: SQS counts message attributes in the size,
# and a body that is SNS-wrapped on its way back grows by its escaping. Past it the body
# goes by reference ({"url": "s3://..."}), which the process queue accepts like any message.
MAX_INLINE_MESSAGE_BYTES = SQS_DEFAULT_MAX_MESSAGE_BYTES - 16 * KIB


def goes_by_reference(message: str) -> bool:
    """True when ``message`` is too large to send inline on the process queue."""
    return utf8_size(message) > MAX_INLINE_MESSAGE_BYTES


def reference_body(url: str) -> str:
    """The process-queue body that names a message stored at ``url`` (``s3://...``)."""
    return json.dumps({"url": url})


class PayloadBucket:
    """Reads payload documents from S3, and writes large results to the stack's bucket."""

    def __init__(self, client: S3Client, bucket_name: str | None = None) -> None:
        self._client = client
        self.bucket_name = bucket_name

    @property
    def client(self) -> S3Client:
        """The low-level client (readers of other objects share it)."""
        return self._client

    @property
    def writable(self) -> bool:
        """True when the stack's bucket is configured."""
        return self.bucket_name is not None

    def write(self, key: str, text: str) -> str:
        """Store ``text`` under ``key`` in the stack's bucket; returns its ``s3://`` url."""
        if self.bucket_name is None:
            msg = "no payload bucket is configured"
            raise RuntimeError(msg)
        self._client.put_object(
            Bucket=self.bucket_name,
            Key=key,
            Body=text.encode("utf-8"),
            ContentType="application/json",
        )
        return self.url(key)

    def url(self, key: str) -> str:
        """The ``s3://`` url of ``key`` in the stack's bucket (nothing is read or written)."""
        if self.bucket_name is None:
            msg = "no payload bucket is configured"
            raise RuntimeError(msg)
        return f"s3://{self.bucket_name}/{key}"

    def reference(self, key: str, message: str) -> str:
        """Store ``message`` under ``key``; returns the process-queue body that names it.

        ``key`` is derived from what the message is, so a retried send writes the
        same object and sends the same ``{"url": ...}``.
        """
        return reference_body(self.write(key, message))

    def write_once(self, key: str, text: str) -> tuple[str, str]:
        """Store ``text`` under ``key`` unless an object is there; returns its url and ETag.

        A redelivery finds its own object (``If-None-Match: *`` refuses the
        overwrite) and reads its ETag back: an ETag handed out before stays valid,
        which a rewrite would not guarantee (with SSE-KMS the ETag is no digest).
        """
        if self.bucket_name is None:
            msg = "no payload bucket is configured"
            raise RuntimeError(msg)
        try:
            written = self._client.put_object(
                Bucket=self.bucket_name,
                Key=key,
                Body=text.encode("utf-8"),
                ContentType="application/json",
                IfNoneMatch="*",
            )
            etag = written["ETag"]
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") not in _ALREADY_WRITTEN_CODES:
                raise
            etag = self._client.head_object(Bucket=self.bucket_name, Key=key)["ETag"]
        return f"s3://{self.bucket_name}/{key}", etag

    def read_url(self, url: str) -> str:
        """Text of the object at ``s3://bucket/key``.

        Raises:
            InvalidMessageError: The url is malformed or its bucket does not exist
                (not retryable), or the object cannot be read yet (retryable).
        """
        parsed = urlparse(url)
        bucket, key = parsed.netloc, parsed.path.lstrip("/")
        if parsed.scheme != "s3" or not bucket or not key:
            raise InvalidMessageError(f"malformed payload url {url!r}")
        try:
            response = self._client.get_object(Bucket=bucket, Key=key)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code in _RETRYABLE_CODES:
                raise InvalidMessageError(f"cannot read {url}: {code}", retryable=True) from exc
            if code == _MISSING_BUCKET:
                raise InvalidMessageError(
                    f"cannot read {url}: {code} (bucket {bucket!r} does not exist)"
                ) from exc
            raise
        if response.get("ContentLength", 0) > MAX_PAYLOAD_BYTES:
            raise InvalidMessageError(f"payload at {url} exceeds {MAX_PAYLOAD_BYTES} bytes")
        body: bytes = response["Body"].read()
        try:
            return body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidMessageError(f"payload at {url} is not UTF-8 text") from exc
