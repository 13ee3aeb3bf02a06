"""Cached boto3 client factory shared by handlers, the local stack and the CLI."""

from __future__ import annotations

from functools import cache
from typing import Any

import boto3
from botocore.config import Config

_CONFIG = Config(retries={"mode": "standard"})


@cache
def client(service: str, *, region: str | None = None, endpoint_url: str | None = None) -> Any:
    """Return a boto3 client, one per (service, region, endpoint) in this process.

    Endpoints otherwise come from boto3's standard ``AWS_ENDPOINT_URL`` variables.
    """
    return boto3.session.Session().client(
        service,  # type: ignore[call-overload]
        region_name=region,
        endpoint_url=endpoint_url,
        config=_CONFIG,
    )
