"""Evaluate the template's ``Rules`` for given parameter values, as CloudFormation does.

CloudFormation checks every rule before it creates or updates a stack: a rule whose
``RuleCondition`` is true (or that has none) must have every ``Assert`` true, else the
operation fails with that assertion's ``AssertDescription``. Rule functions see each
parameter as the string it was given and compare strings only.

Only the rule functions the template uses are understood (``Fn::And``, ``Fn::Or``,
``Fn::Not``, ``Fn::Equals``, ``Fn::Contains`` and ``Ref`` to a parameter); any other
raises, so a new rule cannot pass its tests unevaluated.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tests.unit.template_contract.cfn import Stack

if TYPE_CHECKING:
    from collections.abc import Callable


@dataclass(frozen=True)
class Refusal:
    """One assertion that failed: CloudFormation would refuse the stack operation."""

    rule: str
    description: str


def refusals(template: dict[str, Any], parameters: dict[str, str]) -> list[Refusal]:
    """The assertions that fail for ``parameters`` (defaults for the others), in order."""
    stack = Stack(template, parameters)  # raises for a name the template does not declare
    found = []
    for name, rule in template.get("Rules", {}).items():
        condition = rule.get("RuleCondition")
        if condition is not None and not _truth(evaluate(condition, stack)):
            continue
        for assertion in rule["Assertions"]:
            if not _truth(evaluate(assertion["Assert"], stack)):
                found.append(Refusal(name, str(assertion.get("AssertDescription", ""))))
    return found


def refused_rules(template: dict[str, Any], parameters: dict[str, str]) -> set[str]:
    """Names of the rules that refuse ``parameters``."""
    return {refusal.rule for refusal in refusals(template, parameters)}


def evaluate(expression: Any, stack: Stack) -> Any:
    """The value of a rule expression: a bool, a string or a list of strings."""
    if isinstance(expression, str):
        return expression
    if isinstance(expression, list):
        return [evaluate(item, stack) for item in expression]
    if isinstance(expression, dict) and len(expression) == 1:
        ((name, argument),) = expression.items()
        function = _FUNCTIONS.get(name)
        if function is not None:
            return function(argument, stack)
    msg = f"teach template_contract.rules the rule expression {expression!r}"
    raise AssertionError(msg)


def _ref(name: Any, stack: Stack) -> Any:
    if name not in stack.template.get("Parameters", {}):
        msg = f"a rule may Ref only a parameter, not {name!r}"
        raise AssertionError(msg)
    value = stack.parameter(name)
    return value if isinstance(value, list) else str(value)


def _equals(argument: Any, stack: Stack) -> bool:
    left, right = (evaluate(item, stack) for item in argument)
    return bool(left == right)


def _contains(argument: Any, stack: Stack) -> bool:
    options, value = argument
    return evaluate(value, stack) in evaluate(options, stack)


def _not(argument: Any, stack: Stack) -> bool:
    (inner,) = argument
    return not _truth(evaluate(inner, stack))


def _all_or_any(combine: Callable[[list[bool]], bool]) -> Callable[[Any, Stack], bool]:
    def apply(argument: Any, stack: Stack) -> bool:
        if not 2 <= len(argument) <= 10:
            msg = f"Fn::And / Fn::Or take 2 to 10 conditions, got {len(argument)}"
            raise AssertionError(msg)
        return combine([_truth(evaluate(item, stack)) for item in argument])

    return apply


def _truth(value: Any) -> bool:
    if not isinstance(value, bool):
        msg = f"a rule condition must be true or false, got {value!r}"
        raise AssertionError(msg)
    return value


_FUNCTIONS: dict[str, Callable[[Any, Stack], Any]] = {
    "Ref": _ref,
    "Fn::Equals": _equals,
    "Fn::Contains": _contains,
    "Fn::Not": _not,
    "Fn::And": _all_or_any(all),
    "Fn::Or": _all_or_any(any),
}
