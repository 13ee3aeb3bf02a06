"""boto3 client factory: the composition root's (handlers) and the CLI's.

In Lambda, every call is bounded well inside the invocation: botocore's defaults
(60 s to connect, 60 s per read, the process function's whole timeout) would let
one hung call time the batch out and bump every message's receive count. A
call, its retries and their backoff included, takes at most
:func:`worst_call_seconds`, no more than the time the handlers keep back before
their deadline (:data:`~dependency_tracker.handlers.deadline.DEADLINE_RESERVE_SECONDS`),
so a call started before the deadline ends before Lambda stops the invocation.
Elsewhere (the CLI, the local stack) botocore's defaults stay: a laptop far from
its region may need them.
"""

from __future__ import annotations

import os
from functools import cache
from typing import TYPE_CHECKING, Any, Literal, overload

import boto3
import botocore.loaders
import botocore.session
from botocore.config import Config

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodbstreams import DynamoDBStreamsClient
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_stepfunctions import SFNClient

# In Lambda: the service answers in milliseconds in-region; a connection that takes a
# second, or a response three, is a fault better retried than waited on.
CONNECT_TIMEOUT_SECONDS = 1
READ_TIMEOUT_SECONDS = 3
# botocore's standard mode: the first attempt and two retries, with jittered backoff.
MAX_ATTEMPTS = 3
# Standard mode's backoff before retry n (1-based): up to min(2 ** (n - 1), 20) s.
_MAX_BACKOFF_SECONDS = 20
# Set by the Lambda runtime in every function's environment.
LAMBDA_ENV = "AWS_LAMBDA_FUNCTION_NAME"


def worst_call_seconds() -> float:
    """The longest one call may take in Lambda: every attempt timing out, full backoff."""
    attempts = MAX_ATTEMPTS * (CONNECT_TIMEOUT_SECONDS + READ_TIMEOUT_SECONDS)
    backoff = sum(min(2**n, _MAX_BACKOFF_SECONDS) for n in range(MAX_ATTEMPTS - 1))
    return float(attempts + backoff)


def config(*, in_lambda: bool | None = None) -> Config:
    """The clients' botocore config: bounded timeouts in Lambda (default: from the environment)."""
    if in_lambda is None:
        in_lambda = bool(os.environ.get(LAMBDA_ENV))
    if not in_lambda:
        return Config(retries={"mode": "standard"})
    return Config(
        connect_timeout=CONNECT_TIMEOUT_SECONDS,
        read_timeout=READ_TIMEOUT_SECONDS,
        retries={"mode": "standard", "total_max_attempts": MAX_ATTEMPTS},
    )


@overload
def new_client(
    service: Literal["dynamodb"], *, region: str | None = None, endpoint_url: str | None = None
) -> DynamoDBClient: ...
@overload
def new_client(
    service: Literal["dynamodbstreams"],
    *,
    region: str | None = None,
    endpoint_url: str | None = None,
) -> DynamoDBStreamsClient: ...
@overload
def new_client(
    service: Literal["s3"], *, region: str | None = None, endpoint_url: str | None = None
) -> S3Client: ...
@overload
def new_client(
    service: Literal["sqs"], *, region: str | None = None, endpoint_url: str | None = None
) -> SQSClient: ...
@overload
def new_client(
    service: Literal["stepfunctions"], *, region: str | None = None, endpoint_url: str | None = None
) -> SFNClient: ...
@overload
def new_client(
    service: str, *, region: str | None = None, endpoint_url: str | None = None
) -> Any: ...
def new_client(service: str, *, region: str | None = None, endpoint_url: str | None = None) -> Any:
    """A new boto3 client with the tracker's config (:func:`config`).

    Endpoints otherwise come from boto3's standard ``AWS_ENDPOINT_URL`` variables.
    """
    return session().client(
        service,  # type: ignore[call-overload]
        region_name=region,
        endpoint_url=endpoint_url,
        config=config(),
    )


@cache
def _shared_loader() -> botocore.loaders.Loader:
    return botocore.loaders.create_loader()


def session() -> boto3.session.Session:
    """A new boto3 session whose service models come from this process's one loader.

    Each session otherwise reads botocore's JSON files again (the endpoint rules and each
    service model): about 0.1 s a client on a cold Lambda, and most of a local stack's start,
    which makes a dozen clients. The loader only reads and caches those files; credentials,
    region and events stay the session's own.
    """
    botocore_session = botocore.session.Session()
    botocore_session.register_component("data_loader", _shared_loader())
    return boto3.session.Session(botocore_session=botocore_session)


@cache
def client(service: str, *, region: str | None = None, endpoint_url: str | None = None) -> Any:
    """A client per (service, region, endpoint) for this process (the CLI's).

    The handlers' clients belong to their composition root (:mod:`dependency_tracker.app`).
    """
    return new_client(service, region=region, endpoint_url=endpoint_url)
