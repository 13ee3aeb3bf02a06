"""Does cirrus's payload bucket expire the payloads the tracker forwards through it?

In cirrus mode a payload over one SQS message goes to cirrus as ``{"url": ...}``, an object
under ``{root}/tmp/deptrack-forwarded/`` in cirrus's payload bucket. The tracker never
deletes it: cirrus's lifecycle rule on ``{root}/tmp/`` does. FilmDrop's Terraform writes that
rule (``expire-tmp-objects``) only on a bucket it created itself, and only while
``payload_tmp_lifecycle_expiration_days`` is above 0. :func:`expiry_warning` reads the
bucket's rules and says what to do when none expires those objects.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dependency_tracker.cirrus.store import forwarded_prefix

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

# FilmDrop's default payload_tmp_lifecycle_expiration_days, for the rule suggested.
SUGGESTED_DAYS = 10
_PASCAL = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)


class _And(BaseModel):
    model_config = _PASCAL

    prefix: str = Field("", alias="Prefix")
    tags: list[Any] = Field(default_factory=list, alias="Tags")
    larger_than: int | None = Field(None, alias="ObjectSizeGreaterThan")
    smaller_than: int | None = Field(None, alias="ObjectSizeLessThan")


class _Filter(_And):
    tag: Any = Field(None, alias="Tag")
    both: _And | None = Field(None, alias="And")


class _Expiration(BaseModel):
    model_config = _PASCAL

    days: int | None = Field(None, alias="Days")
    date: datetime | None = Field(None, alias="Date")


class LifecycleRule(BaseModel):
    """One rule of ``GetBucketLifecycleConfiguration``, the fields that decide expiry."""

    model_config = _PASCAL

    status: str = Field(alias="Status")
    expiration: _Expiration | None = Field(None, alias="Expiration")
    scope: _Filter | None = Field(None, alias="Filter")
    legacy_prefix: str | None = Field(None, alias="Prefix")

    def expires_all_under(self, key_prefix: str) -> bool:
        """Whether the rule expires every object whose key starts with ``key_prefix``.

        Only a prefix condition can hold for all of them: the forwarded objects carry no
        tags, and their sizes vary, so a rule with a tag or size condition does not count.
        """
        expires = self.expiration is not None and (
            self.expiration.days is not None or self.expiration.date is not None
        )
        if self.status != "Enabled" or not expires:
            return False
        if self.scope is None:
            return key_prefix.startswith(self.legacy_prefix or "")
        conditions = self.scope.both or self.scope
        if self.scope.tag is not None or conditions.tags:
            return False
        if conditions.larger_than is not None or conditions.smaller_than is not None:
            return False
        return key_prefix.startswith(conditions.prefix)


def tmp_rule(root: str, days: int = SUGGESTED_DAYS) -> dict[str, Any]:
    """FilmDrop's own ``expire-tmp-objects`` rule on ``{root}/tmp/``, as S3's API takes it."""
    return {
        "ID": "expire-tmp-objects",
        "Status": "Enabled",
        # cirrus's scratch prefix in its bucket, not a local temporary directory
        "Filter": {"Prefix": f"{root.strip('/')}/tmp/"},  # noqa: S108
        "Expiration": {"Days": days},
    }


def expiry_warning(s3: S3Client, bucket: str, root: str) -> str | None:
    """Why the tracker's forwarded payloads in ``bucket`` would never expire, or None.

    Never raises for S3's answer: a bucket whose rules cannot be read (access denied,
    no such bucket) is a warning that the check was not made.
    """
    key_prefix = f"{forwarded_prefix(root)}/"
    try:
        raw = s3.get_bucket_lifecycle_configuration(Bucket=bucket).get("Rules", [])
    except ClientError as exc:
        code = str(exc.response.get("Error", {}).get("Code", "?"))
        if code != "NoSuchLifecycleConfiguration":
            why = (
                f"{code}: it needs s3:GetLifecycleConfiguration on the bucket"
                if code == "AccessDenied"
                else code
            )
            return (
                f"could not read the lifecycle rules of cirrus's payload bucket {bucket} "
                f"({why}): check by hand that an enabled rule expires {key_prefix}, or the "
                "payloads the tracker forwards there never expire"
            )
        raw = []
    except BotoCoreError as exc:
        return (
            f"could not read the lifecycle rules of cirrus's payload bucket {bucket} ({exc}): "
            f"check by hand that an enabled rule expires {key_prefix}"
        )
    try:
        rules = [LifecycleRule.model_validate(rule) for rule in raw]
    except ValidationError:
        rules = []
    if any(rule.expires_all_under(key_prefix) for rule in rules):
        return None
    rule = json.dumps(tmp_rule(root), separators=(",", ":"))
    if raw:
        how = (
            f"add the rule {rule} to the bucket's {len(raw)} rules "
            f"(aws s3api get-bucket-lifecycle-configuration --bucket {bucket}, then "
            "put-bucket-lifecycle-configuration with all of them: it replaces every rule)"
        )
    else:
        how = (
            f"aws s3api put-bucket-lifecycle-configuration --bucket {bucket} "
            f"--lifecycle-configuration '{{\"Rules\":[{rule}]}}'"
        )
    return (
        f"no enabled lifecycle rule of cirrus's payload bucket {bucket} expires {key_prefix}: "
        "the payloads the tracker forwards there (those over one SQS message) would never "
        "expire. FilmDrop writes that rule only on a payload bucket it created, with its "
        "cirrus module's payload_tmp_lifecycle_expiration_days above 0 (default 10): set it "
        "there; for a bucket passed in (cirrus_payload_bucket), " + how
    )
