"""Stored results: what a succeeded payload produced, small enough to replay.

The result kept on the state item (and copied to every waiter row and into
the callback output) is bounded: small results are inline, larger ones are
written to the payload bucket and replaced by a pointer. Nothing near the
400 KB item limit or the 256 KiB Step Functions limit is ever written inline.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dependency_tracker.payloads.bucket import PayloadBucket

# Per waiter row and per callback output; 1,000 waiters x 4 KiB stays cheap.
INLINE_RESULT_BYTES = 4096
RESULTS_PREFIX = "results"


def result_items(output: Any) -> list[dict[str, str]]:
    """Ids, collections and self hrefs of the STAC items in a payload-shaped output."""
    if not isinstance(output, dict) or not isinstance(output.get("features"), list):
        return []
    items = []
    for feature in output["features"]:
        if not isinstance(feature, dict) or not isinstance(feature.get("id"), str):
            continue
        item = {"id": feature["id"]}
        if isinstance(feature.get("collection"), str):
            item["collection"] = feature["collection"]
        for link in feature.get("links") or []:
            if isinstance(link, dict) and link.get("rel") == "self" and "href" in link:
                item["href"] = str(link["href"])
                break
        items.append(item)
    return items


def build_result(
    payload_id: str, attempt: int | None, output_text: str | None, bucket: PayloadBucket | None
) -> str:
    """The result JSON to store for a succeeded run of ``payload_id``.

    ``{"items": [...], "output": ...}`` when it fits in :data:`INLINE_RESULT_BYTES`;
    otherwise the full result goes to the payload bucket and the stored JSON is
    ``{"url": "s3://...", "bytes": n, "item_count": k}``. An output that is itself
    a pointer (``{"url": "s3://..."}``, for outputs over the execution limit) is
    kept as that pointer.
    """
    try:
        output = json.loads(output_text) if output_text else None
    except json.JSONDecodeError:
        output = output_text
    if isinstance(output, dict) and set(output) == {"url"} and isinstance(output["url"], str):
        return json.dumps({"url": output["url"]})
    full = json.dumps({"items": result_items(output), "output": output}, sort_keys=True)
    size = len(full.encode("utf-8"))
    if size <= INLINE_RESULT_BYTES:
        return full
    summary: dict[str, Any] = {"bytes": size, "item_count": len(result_items(output))}
    if bucket is None or not bucket.writable:
        return json.dumps({**summary, "truncated": True})
    digest = hashlib.sha256(payload_id.encode("utf-8")).hexdigest()
    key = f"{RESULTS_PREFIX}/{digest}/{attempt or 0}.json"
    return json.dumps({**summary, "url": bucket.write(key, full)})
