"""The tables' key prefixes and reserved ids, each spelled once.

These strings are in every table the tracker ever wrote, and some are the public
contract (docs/contract.md: a join's row at ``payload_id = "join#<join_id>"``,
``waiter_id = "join"``; the prefixes a payload id may not take): a changed value
would orphan the rows written before it, so they never change. Every module that
builds or recognises such a key imports it from here.

Dependency table (``payload_id`` / ``waiter_id``):

* a parent's task token: ``<payload>`` / ``token#<hash>``;
* a join's membership in a member: ``<member>`` / ``join#<join_id>``;
* a join's own row: ``join#<join_id>`` / ``join``; its registration chunks:
  ``join#<join_id>`` / ``chunk#<index>``; its count shards:
  ``join#<join_id>#counts#<k>`` / ``counts``;
* a wait edge: ``waits#<waiter>`` / ``<via>><hash>``;
* a parent's link to a join that cancels with it: ``join#parent#<execution arn>`` /
  ``link#<join_id>`` (a join id has no ``#``, so no join's partition is one of these).

State table: an unusable process message is kept at
``invalid-message/<message id>`` with the workflow ``invalid-message``.
"""

from __future__ import annotations

WAITER_KEY_PREFIX = "token#"

JOIN_PARTITION_PREFIX = "join#"
# A member's membership row is sorted under the same prefix as the join's partition,
# so a reader tells a join's rows apart from a parent's token rows by one prefix.
MEMBERSHIP_KEY_PREFIX = JOIN_PARTITION_PREFIX
JOIN_ROW_KEY = "join"
CHUNK_KEY_PREFIX = "chunk#"
COUNT_SHARD_KEY = "counts"
# Between the join id and the shard number in a count shard's partition key.
COUNT_PARTITION_MARK = f"#{COUNT_SHARD_KEY}#"

EDGE_PARTITION_PREFIX = "waits#"

# Under the join prefix (already reserved): no payload id can take it, and no join id,
# which has no "#", makes a join partition of this shape.
PARENT_LINK_PARTITION_PREFIX = f"{JOIN_PARTITION_PREFIX}parent#"
PARENT_LINK_KEY_PREFIX = "link#"

INVALID_MESSAGE_WORKFLOW = "invalid-message"
INVALID_MESSAGE_PREFIX = f"{INVALID_MESSAGE_WORKFLOW}/"

# Partition keys the tracker uses for its own rows; a payload id cannot start with one.
# (Count shards live under JOIN_PARTITION_PREFIX too, so they need no entry of their own.)
RESERVED_ID_PREFIXES = (JOIN_PARTITION_PREFIX, EDGE_PARTITION_PREFIX, INVALID_MESSAGE_PREFIX)

__all__ = [
    "CHUNK_KEY_PREFIX",
    "COUNT_PARTITION_MARK",
    "COUNT_SHARD_KEY",
    "EDGE_PARTITION_PREFIX",
    "INVALID_MESSAGE_PREFIX",
    "INVALID_MESSAGE_WORKFLOW",
    "JOIN_PARTITION_PREFIX",
    "JOIN_ROW_KEY",
    "MEMBERSHIP_KEY_PREFIX",
    "PARENT_LINK_KEY_PREFIX",
    "PARENT_LINK_PARTITION_PREFIX",
    "RESERVED_ID_PREFIXES",
    "WAITER_KEY_PREFIX",
]
