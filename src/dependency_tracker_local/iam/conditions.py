"""IAM condition operators, as AWS's policy reference describes them.

A statement's ``Condition`` block holds operators; every operator must hold, and within
one every key must hold (AND); the values a policy lists for one key are alternatives
(OR; NOR for a negated operator). A key absent from the request fails a positive
operator and satisfies a negated one, unless the operator ends in ``IfExists`` (then an
absent key satisfies it) or is ``Null``. ``ForAnyValue:``/``ForAllValues:`` compare a
multivalued key member by member; ``ForAllValues`` holds for an absent or empty key.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from functools import cache
from typing import Any

# A request's condition keys, lower-cased, each with its values (one for a single-valued key).
Context = Mapping[str, tuple[str, ...]]


class UnknownOperatorError(ValueError):
    """A condition operator the model does not evaluate: never read as "does not apply"."""

    def __init__(self, operator: str) -> None:
        super().__init__(f"IAM condition operator {operator!r} is not modelled")


@cache
def wildcard(pattern: str, *, ignore_case: bool = False) -> re.Pattern[str]:
    """``pattern`` with IAM's wildcards: ``*`` any run of characters, ``?`` one character."""
    parts = (".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.compile("".join(parts), re.DOTALL | (re.IGNORECASE if ignore_case else 0))


def _like(value: str, pattern: str) -> bool:
    return wildcard(pattern).fullmatch(value) is not None


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _numeric(compare: Callable[[float, float], bool]) -> Callable[[str, str], bool]:
    def test(value: str, wanted: str) -> bool:
        left, right = _number(value), _number(wanted)
        return left is not None and right is not None and compare(left, right)

    return test


def _arn_like(value: str, pattern: str) -> bool:
    # ARNs compare field by field (six, the last keeps its colons); each field as StringLike.
    fields, wanted = value.split(":", 5), pattern.split(":", 5)
    return len(fields) == len(wanted) == 6 and all(map(_like, fields, wanted))


# Positive operator → how one request value matches one policy value.
_MATCHES: dict[str, Callable[[str, str], bool]] = {
    "stringequals": lambda v, p: v == p,
    "stringequalsignorecase": lambda v, p: v.lower() == p.lower(),
    "stringlike": _like,
    "numericequals": _numeric(lambda a, b: a == b),
    "numericlessthan": _numeric(lambda a, b: a < b),
    "numericlessthanequals": _numeric(lambda a, b: a <= b),
    "numericgreaterthan": _numeric(lambda a, b: a > b),
    "numericgreaterthanequals": _numeric(lambda a, b: a >= b),
    "bool": lambda v, p: v.lower() == p.lower(),
    "arnequals": _arn_like,  # ArnEquals behaves as ArnLike (AWS's reference)
    "arnlike": _arn_like,
}
# Negated operator → the positive one it negates.
_NEGATED = {
    "stringnotequals": "stringequals",
    "stringnotequalsignorecase": "stringequalsignorecase",
    "stringnotlike": "stringlike",
    "numericnotequals": "numericequals",
    "arnnotequals": "arnequals",
    "arnnotlike": "arnlike",
}


def _strings(value: Any) -> tuple[str, ...]:
    items: Sequence[Any] = value if isinstance(value, list | tuple) else [value]
    return tuple(str(item).lower() if isinstance(item, bool) else str(item) for item in items)


def block_holds(condition: Mapping[str, Mapping[str, Any]], context: Context) -> bool:
    """Whether a statement's whole ``Condition`` block holds for ``context``."""
    return all(
        operator_holds(operator, key, _strings(wanted), context)
        for operator, keys in condition.items()
        for key, wanted in keys.items()
    )


def operator_holds(operator: str, key: str, wanted: tuple[str, ...], context: Context) -> bool:
    """Whether ``operator`` holds for condition key ``key`` against the policy's ``wanted``."""
    name = operator.lower()
    qualifier, _, name = name.rpartition(":")
    values = context.get(key.lower())
    if name == "null":
        absent = not values
        return all((w.lower() == "true") == absent for w in wanted)
    if_exists = name.endswith("ifexists")
    name = name.removesuffix("ifexists")
    negated = name in _NEGATED
    match = _MATCHES.get(_NEGATED.get(name, name))
    if match is None or qualifier not in {"", "foranyvalue", "forallvalues"}:
        raise UnknownOperatorError(operator)

    def one(value: str) -> bool:
        found = any(match(value, w) for w in wanted)
        return not found if negated else found

    if qualifier == "forallvalues":
        return not values or all(one(value) for value in values)
    if not values:
        return if_exists or (negated and qualifier == "")
    if qualifier == "foranyvalue":
        return any(one(value) for value in values)
    # A single-valued key (a multivalued one without a qualifier: any value counts).
    return any(one(value) for value in values) if not negated else all(map(one, values))
