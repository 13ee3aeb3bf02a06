"""AWS service quotas the tracker meets, in one place, with how AWS measures them.

The handlers size their writes against these numbers, and the strict layer of
the embedded stack (:mod:`dependency_tracker_local.strict`) refuses what AWS
would refuse with them. Each constant names the page that documents it;
``docs/local.md`` lists them with whether moto enforces them.
"""

from __future__ import annotations

import base64
from decimal import Decimal
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

KIB = 1024

# Step Functions: "Quotas related to state throttling / payload size"
# (https://docs.aws.amazon.com/step-functions/latest/dg/service-quotas.html).
# Execution input, state data, and task outputs are all limited to 256 KiB of UTF-8.
SFN_MAX_PAYLOAD_BYTES = 256 * KIB  # 262,144
SFN_MAX_EXECUTION_NAME = 80
# SendTaskFailure (API reference): error 0..256 characters, cause 0..32,768 characters.
SFN_MAX_ERROR_CHARS = 256
SFN_MAX_CAUSE_CHARS = 32_768
# Standard workflows run for one year at most ("Maximum execution time", service quotas): the
# longest a parent can wait.
SFN_MAX_EXECUTION_SECONDS = 365 * 24 * 3600
# Standard workflows: 25,000 events in one execution history.
SFN_MAX_HISTORY_EVENTS = 25_000

# DynamoDB quotas, per the developer guide's pages on service quotas and on item
# sizes (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/ServiceQuotas.html).
DDB_MAX_ITEM_BYTES = 400 * KIB  # 409,600, attribute names included
DDB_MAX_PARTITION_KEY_BYTES = 2048
DDB_MAX_SORT_KEY_BYTES = 1024
DDB_MAX_BATCH_WRITE_ITEMS = 25
DDB_MAX_BATCH_GET_KEYS = 100

# SQS: "Amazon SQS message quotas": a queue's MaximumMessageSize, 1 KiB to 1 MiB
# (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/
# quotas-messages.html). The tracker's queues (template and embedded stack) set 256 KiB.
SQS_DEFAULT_MAX_MESSAGE_BYTES = 256 * KIB
SQS_MAX_BATCH_ENTRIES = 10  # SendMessageBatch, DeleteMessageBatch


def utf8_size(text: str) -> int:
    """Bytes of ``text`` in UTF-8: how Step Functions, DynamoDB and SQS count strings."""
    return len(text.encode("utf-8"))


def number_size(text: str) -> int:
    """Bytes DynamoDB counts for a number: about one per two significant digits, plus one.

    "Numbers are variable length, with up to 38 significant digits. Leading and
    trailing zeroes are trimmed. The size of a number is approximately (number
    of UTF-8-encoded bytes of attribute name) + (1 byte per two significant
    digits) + (1 byte)."
    """
    digits = Decimal(text).normalize().as_tuple().digits
    significant = len(digits) if any(digits) else 1
    return (significant + 1) // 2 + 1


def attribute_value_size(value: dict[str, Any]) -> int:
    """Bytes of one attribute value in DynamoDB's low-level JSON form (``{"S": ...}``).

    Strings and binaries count their bytes; numbers as :func:`number_size`;
    null and booleans one byte; lists and maps 3 bytes of overhead plus one
    byte per element, plus their elements (map keys counted like attribute
    names); sets the sum of their elements.
    """
    ((kind, inner),) = value.items()
    try:
        measure = _MEASURES[kind]
    except KeyError:
        msg = f"not a DynamoDB attribute value: {kind!r}"
        raise ValueError(msg) from None
    return measure(inner)


def _list_size(members: list[dict[str, Any]]) -> int:
    return 3 + sum(1 + attribute_value_size(member) for member in members)


def _map_size(members: dict[str, dict[str, Any]]) -> int:
    return 3 + sum(
        1 + utf8_size(name) + attribute_value_size(member) for name, member in members.items()
    )


_MEASURES: dict[str, Callable[[Any], int]] = {
    "S": utf8_size,
    "N": number_size,
    "B": lambda inner: len(_binary(inner)),
    "BOOL": lambda _: 1,
    "NULL": lambda _: 1,
    "SS": lambda inner: sum(utf8_size(member) for member in inner),
    "NS": lambda inner: sum(number_size(member) for member in inner),
    "BS": lambda inner: sum(len(_binary(member)) for member in inner),
    "L": _list_size,
    "M": _map_size,
}


def item_size(item: dict[str, Any]) -> int:
    """Bytes DynamoDB counts for an item: each attribute's name plus its value."""
    return sum(utf8_size(name) + attribute_value_size(value) for name, value in item.items())


def _binary(value: str | bytes) -> bytes:
    # The wire form is base64 text; boto3 hands over raw bytes.
    return value if isinstance(value, bytes) else base64.b64decode(value)
