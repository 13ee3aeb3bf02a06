"""Table keys for ids of any length.

DynamoDB refuses a string partition key over 2,048 bytes and a sort key over
1,024 bytes (UTF-8). A payload id has no such bound: the cirrus rule joins every
item id, and a mosaic of ~35-40 Sentinel-2 items already passes 2,048 bytes. So
every key the tracker writes or reads goes through :func:`partition_key` or
:func:`sort_key`:

* a key text within the limit is the key itself, byte for byte, so every table
  written before this module existed reads the same, and the public contract
  (a join's row at ``payload_id = "join#<join_id>"``, ``waiter_id = "join"``)
  holds unchanged;
* a longer text becomes ``{readable prefix}#sha256:{hex digest of the whole text}``,
  the prefix cut on a UTF-8 character boundary so that the key is at most the
  limit. The items keep the whole text in an attribute of their own
  (:data:`FULL_ATTRIBUTES`), so readers always see the real id.

The bound is the limit itself: anything that worked before keeps its key. The
price is that a derived key is also a legal short key: an id written to equal
``prefix#sha256:<digest>`` of another, longer id would share its row. No real
id has that shape by accident (it would have to end in the SHA-256 of a longer
id that starts with it); :func:`is_derived` tells such keys apart for tools.
"""

from __future__ import annotations

import hashlib
import re
from typing import TYPE_CHECKING

from dependency_tracker.core.limits import DDB_MAX_PARTITION_KEY_BYTES, DDB_MAX_SORT_KEY_BYTES

if TYPE_CHECKING:
    from collections.abc import Iterable

HASH_MARK = "#sha256:"
_DIGEST_CHARS = 64  # hex of SHA-256
_DERIVED = re.compile(rf"{re.escape(HASH_MARK)}[0-9a-f]{{{_DIGEST_CHARS}}}\Z")


def table_key(text: str, limit: int) -> str:
    """The key for ``text`` under a key limit of ``limit`` UTF-8 bytes.

    Args:
        text: The whole key text (an id, or an id with its kind's prefix).
        limit: The largest key DynamoDB takes, in bytes.

    Returns:
        ``text`` itself when it fits in ``limit`` bytes; otherwise its first
        bytes (cut on a character boundary), :data:`HASH_MARK` and the SHA-256
        of all of ``text``, at most ``limit`` bytes in all.

    Raises:
        ValueError: ``limit`` leaves no room for the digest.
    """
    # A lone surrogate (JSON allows "\ud800") has no UTF-8 form: count and hash it
    # as Python would pass it on, instead of failing the whole message here.
    encoded = text.encode("utf-8", errors="surrogatepass")
    if len(encoded) <= limit:
        return text
    room = limit - len(HASH_MARK) - _DIGEST_CHARS
    if room < 0:
        msg = f"a key limit of {limit} bytes has no room for a digest"
        raise ValueError(msg)
    # Dropping the bytes of a character cut in half keeps the prefix valid UTF-8.
    prefix = encoded[:room].decode("utf-8", errors="ignore")
    return f"{prefix}{HASH_MARK}{hashlib.sha256(encoded).hexdigest()}"


def partition_key(text: str) -> str:
    """The partition key for ``text``: itself up to 2,048 bytes, else prefix + hash."""
    return table_key(text, DDB_MAX_PARTITION_KEY_BYTES)


def sort_key(text: str) -> str:
    """The sort key for ``text``: itself up to 1,024 bytes, else prefix + hash."""
    return table_key(text, DDB_MAX_SORT_KEY_BYTES)


def is_derived(key: str) -> bool:
    """True when ``key`` has the shape of a derived key (prefix, mark, 64 hex digits)."""
    return _DERIVED.search(key) is not None


# Key attribute -> the attribute that holds its whole text when the key is derived.
# The attribute is written only when the two differ, so short ids cost nothing.
FULL_ATTRIBUTES = {"payload_id": "full_payload_id", "waiter_id": "full_waiter_id"}


def recorded_ids(ids: Iterable[str], budget: int) -> list[str]:
    """``ids`` as an item records them: whole while they fit in ``budget`` bytes, else keys.

    For a list kept on one item (a cycle, a chunk's member names): each id
    stays whole while the ids kept so far, whole or not, add up to at most
    ``budget`` UTF-8 bytes; an id past that is kept in its partition key form
    (at most 2,048 bytes), which :func:`whole_ids` turns back into the id when
    a reader knows it. Ids within the key limit are always whole.
    """
    recorded: list[str] = []
    used = 0
    for text in ids:
        size = len(text.encode("utf-8", errors="surrogatepass"))
        kept = text if used + size <= budget else partition_key(text)
        used += size if kept is text else len(kept.encode("utf-8", errors="surrogatepass"))
        recorded.append(kept)
    return recorded


def whole_ids(keys: Iterable[str], known: Iterable[str | None]) -> list[str]:
    """``keys`` with each partition key form replaced by the whole id it stands for.

    ``known`` are whole ids the reader has at hand (a join's members, its
    waiting payload, an edge's ends); a key form none of them derives to is
    left as it is (its whole id is not recorded where the reader looks).
    """
    by_key = {
        key: text for text in known if text is not None and (key := partition_key(text)) != text
    }
    return [by_key.get(key, key) for key in keys]
