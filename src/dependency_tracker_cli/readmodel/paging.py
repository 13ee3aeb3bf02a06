"""A listing as a paged ``Scan``: filter expressions, pages and ``--next-token``.

Nothing here knows payloads: ``list --waiters`` pages the dependency table the
same way the readers page the state tables.
"""

import base64
import binascii
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, Self, TypeVar

T = TypeVar("T")


class InvalidNextTokenError(ValueError):
    """A ``--next-token`` this command did not print."""


def encode_token(key: dict[str, Any]) -> str:
    """A ``LastEvaluatedKey`` (or an item's key) as a ``--next-token``: base64url JSON."""
    text = json.dumps(key, sort_keys=True, separators=(",", ":"))
    return base64.urlsafe_b64encode(text.encode("utf-8")).decode("ascii").rstrip("=")


def decode_token(token: str, key_names: tuple[str, ...]) -> dict[str, Any]:
    """The ``ExclusiveStartKey`` of a ``--next-token``.

    A token only says where a Scan of the table goes on, so one printed under
    other filters of the same listing is a key like any other and is accepted.
    The message leaves the token out: the operator has it, and a long one would
    wrap the one line the error takes. A key of another command's table, or one
    this table cannot hold, is refused here rather than by DynamoDB.

    Raises:
        InvalidNextTokenError: Not a token of this table's listing.
    """
    try:
        padded = token + "=" * (-len(token) % 4)
        key = json.loads(base64.urlsafe_b64decode(padded.encode("ascii")))
    except (ValueError, binascii.Error, UnicodeError) as exc:
        msg = "not a next token: garbled or cut short"
        raise InvalidNextTokenError(msg) from exc
    if not isinstance(key, dict) or sorted(key) != sorted(key_names):
        msg = "not a next token of this listing"
        raise InvalidNextTokenError(msg)
    # Every key attribute of these tables is a non-empty string; anything else would
    # fail in botocore or DynamoDB with an error that does not name the option.
    if not all(_string_value(value) for value in key.values()):
        msg = "not a next token of this listing"
        raise InvalidNextTokenError(msg)
    return key


def _string_value(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and list(value) == ["S"]
        and isinstance(value["S"], str)
        and bool(value["S"])
    )


@dataclass(frozen=True)
class PageRequest:
    """How much one listing reads: ``limit`` rows, at most ``max_pages`` Scan pages."""

    limit: int = 50
    next_token: str | None = None
    max_pages: int = 20


@dataclass
class ScanResult(Generic[T]):
    """One page of a listing, and where the next one starts (None: nothing remains)."""

    rows: list[T] = field(default_factory=list)
    next_token: str | None = None
    pages: int = 0
    max_pages_reached: bool = False


@dataclass(frozen=True)
class Expression:
    """A Scan ``FilterExpression`` with its names and values (``text`` None: no filter)."""

    text: str | None = None
    names: dict[str, str] = field(default_factory=dict)
    values: dict[str, Any] = field(default_factory=dict)

    def scan_arguments(self) -> dict[str, Any]:
        """``FilterExpression`` and what it names, as ``Scan`` takes them (nothing: no filter)."""
        if self.text is None:
            return {}
        arguments: dict[str, Any] = {"FilterExpression": self.text}
        if self.names:
            arguments["ExpressionAttributeNames"] = self.names
        if self.values:
            arguments["ExpressionAttributeValues"] = self.values
        return arguments

    @classmethod
    def all_of(cls, parts: list[tuple[str, dict[str, str], dict[str, Any]]]) -> Self:
        """Every part must hold."""
        if not parts:
            return cls()
        names: dict[str, str] = {}
        values: dict[str, Any] = {}
        for _, part_names, part_values in parts:
            names.update(part_names)
            values.update(part_values)
        return cls(" AND ".join(f"({text})" for text, _, _ in parts), names, values)


def scan_page(
    client: Any,
    table: str,
    key_names: tuple[str, ...],
    expression: Expression,
    *,
    parse: Callable[[dict[str, Any]], T | None],
    keep: Callable[[T], bool],
    page: PageRequest,
) -> ScanResult[T]:
    """Up to ``page.limit`` rows that ``expression`` and ``keep`` let through.

    A paginated ``Scan``: DynamoDB applies the filter expression after reading a
    page, so every page costs its whole size whatever the filter keeps. The next
    token is the key of the last row returned when the limit cut a page short
    (a Scan resumes after any key it returned), else DynamoDB's own
    ``LastEvaluatedKey``. Past ``page.max_pages`` pages the listing stops with
    ``max_pages_reached`` and a token to go on from.
    """
    request: dict[str, Any] = {"TableName": table, **expression.scan_arguments()}
    if page.next_token is not None:
        request["ExclusiveStartKey"] = decode_token(page.next_token, key_names)
    result: ScanResult[T] = ScanResult()
    while True:
        response = client.scan(**request)
        result.pages += 1
        items: list[dict[str, Any]] = response.get("Items", [])
        last = response.get("LastEvaluatedKey")
        for index, item in enumerate(items):
            row = parse(item)
            if row is None or not keep(row):
                continue
            result.rows.append(row)
            if len(result.rows) >= page.limit:
                if index + 1 < len(items) or last:
                    result.next_token = encode_token({name: item[name] for name in key_names})
                return result
        if not last:
            return result
        request["ExclusiveStartKey"] = last
        if result.pages >= page.max_pages:
            result.next_token = encode_token(last)
            result.max_pages_reached = True
            return result
