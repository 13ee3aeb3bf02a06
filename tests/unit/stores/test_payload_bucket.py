"""Payloads behind s3:// urls."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from dependency_tracker.core.errors import InvalidMessageError

if TYPE_CHECKING:
    from tests.conftest import Aws


def test_reads_object_text(aws: Aws) -> None:
    aws.s3.create_bucket(Bucket="bkt")
    aws.s3.put_object(Bucket="bkt", Key="dir/p.json", Body=b'{"a": 1}')
    assert aws.bucket.read_url("s3://bkt/dir/p.json") == '{"a": 1}'


@pytest.mark.parametrize("url", ["s3://", "s3://bucket", "s3:///key", "http://b/k"])
def test_malformed_urls_are_not_retryable(aws: Aws, url: str) -> None:
    with pytest.raises(InvalidMessageError, match="malformed") as caught:
        aws.bucket.read_url(url)
    assert caught.value.retryable is False


def test_a_missing_object_is_retryable(aws: Aws) -> None:
    aws.s3.create_bucket(Bucket="bkt")
    with pytest.raises(
        InvalidMessageError, match="cannot read s3://bkt/missing-key: NoSuchKey"
    ) as caught:
        aws.bucket.read_url("s3://bkt/missing-key")
    assert caught.value.retryable is True


def test_a_missing_bucket_is_not_retryable(aws: Aws) -> None:
    # No retry makes a bucket appear: the sender hears the url and the code at once.
    with pytest.raises(
        InvalidMessageError, match="cannot read s3://missing-bucket/k: NoSuchBucket"
    ) as caught:
        aws.bucket.read_url("s3://missing-bucket/k")
    assert caught.value.retryable is False


def test_binary_object_is_invalid(aws: Aws) -> None:
    aws.s3.create_bucket(Bucket="bkt")
    aws.s3.put_object(Bucket="bkt", Key="bin", Body=b"\xff\xfe\x00")
    with pytest.raises(InvalidMessageError, match="UTF-8"):
        aws.bucket.read_url("s3://bkt/bin")
