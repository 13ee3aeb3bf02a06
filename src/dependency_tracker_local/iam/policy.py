"""An IAM policy evaluator, small and exact for what it covers.

Why our own: moto's ``IAMPolicyStatement`` reads an unmet condition of an Allow as an
explicit Deny, builds its patterns without escaping ``.``, has no ``?`` and matches
actions case-sensitively; ``policyuniverse`` and ``principalmapper`` are unmaintained or
analyse policies without evaluating a request.

The logic of AWS's "Policy evaluation logic" for one account: an explicit Deny in any
policy that applies wins; else an Allow of an identity-based policy allows; else the
request is implicitly denied. Actions match case-insensitively, resources
case-sensitively, both with ``*`` and ``?``; ``NotAction``/``NotResource`` match what
they do not name; conditions are :mod:`~dependency_tracker_local.iam.conditions`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from dependency_tracker_local.iam.conditions import Context, block_holds, wildcard

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping


class Decision(StrEnum):
    """The outcome of one authorization request."""

    ALLOW = "allow"
    EXPLICIT_DENY = "explicit deny"
    IMPLICIT_DENY = "implicit deny"


def _strings(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    return tuple(str(item) for item in (value if isinstance(value, list | tuple) else [value]))


@dataclass(frozen=True)
class Statement:
    """One IAM policy statement (intrinsic functions already resolved)."""

    sid: str
    effect: str
    actions: tuple[str, ...] = ()
    not_actions: tuple[str, ...] = ()
    resources: tuple[str, ...] = ()
    not_resources: tuple[str, ...] = ()
    # A resource-based policy's Principal ("*" for anyone); None in an identity-based one.
    principal: Any = None
    condition: dict[str, dict[str, Any]] = field(default_factory=dict, compare=False, hash=False)
    # The statement as written (in a template: before its intrinsic functions resolved).
    raw: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @classmethod
    def parse(cls, raw: Mapping[str, Any], *, sid: str | None = None) -> Statement:
        """A statement from its JSON shape."""
        effect = str(raw["Effect"])
        if effect not in {"Allow", "Deny"}:
            msg = f"statement {raw.get('Sid')!r}: Effect must be Allow or Deny, not {effect!r}"
            raise ValueError(msg)
        return cls(
            sid=str(sid if sid is not None else raw.get("Sid", "")),
            effect=effect,
            actions=_strings(raw.get("Action")),
            not_actions=_strings(raw.get("NotAction")),
            resources=_strings(raw.get("Resource")),
            not_resources=_strings(raw.get("NotResource")),
            principal=raw.get("Principal"),
            condition=dict(raw.get("Condition", {})),
            raw=dict(raw),
        )

    def matches_action(self, action: str) -> bool:
        """Whether the statement's Action (or NotAction) covers ``action``."""
        if self.not_actions:
            return not _any(self.not_actions, action, ignore_case=True)
        return _any(self.actions, action, ignore_case=True)

    def matches_resource(self, resource: str) -> bool:
        """Whether the statement's Resource (or NotResource) covers ``resource``."""
        if self.not_resources:
            return not _any(self.not_resources, resource)
        return _any(self.resources, resource)

    def applies(self, action: str, resource: str, context: Context) -> bool:
        """Whether action, resource and condition all match (whatever the effect)."""
        return (
            self.matches_action(action)
            and self.matches_resource(resource)
            and block_holds(self.condition, context)
        )

    def allows(self, action: str, resource: str, context: Context | None = None) -> bool:
        """Whether this is an Allow that applies to ``action`` on ``resource``."""
        return self.effect == "Allow" and self.applies(action, resource, context or {})

    def names_anyone(self) -> bool:
        """Whether a resource-based statement's Principal is everyone (``*``)."""
        principal = self.principal
        if isinstance(principal, dict):
            principal = principal.get("AWS")
        return "*" in _strings(principal)


def _any(patterns: tuple[str, ...], value: str, *, ignore_case: bool = False) -> bool:
    return any(wildcard(p, ignore_case=ignore_case).fullmatch(value) for p in patterns)


@dataclass(frozen=True)
class Request:
    """One authorization request: an action on a resource, with the request's condition keys."""

    action: str
    resource: str
    context: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @classmethod
    def of(
        cls, action: str, resource: str, keys: Mapping[str, str | tuple[str, ...]] | None = None
    ) -> Request:
        """A request with condition ``keys`` (names as AWS spells them, e.g. ``s3:prefix``)."""
        return cls(action, resource).with_keys(
            {name: (v,) if isinstance(v, str) else tuple(v) for name, v in (keys or {}).items()}
        )

    def with_keys(self, keys: Mapping[str, tuple[str, ...]]) -> Request:
        """The same request with more condition keys (names as AWS spells them)."""
        context = dict(self.context)
        context.update({name.lower(): values for name, values in keys.items()})
        return Request(self.action, self.resource, tuple(sorted(context.items())))

    @property
    def keys(self) -> dict[str, tuple[str, ...]]:
        """The condition keys, lower-cased."""
        return dict(self.context)


def evaluate(
    identity: Iterable[Statement],
    request: Request,
    resource_policy: Iterable[Statement] = (),
) -> Decision:
    """AWS's decision for ``request`` by a principal holding ``identity``, same account.

    ``resource_policy`` contributes its Deny statements that name everyone (such as a
    bucket's ``DenyInsecureTransport``); its Allows are not read (the template's name
    services, never the tracker's roles).
    """
    context = request.keys
    allowed = False
    for statement in identity:
        if statement.applies(request.action, request.resource, context):
            if statement.effect == "Deny":
                return Decision.EXPLICIT_DENY
            allowed = True
    for statement in resource_policy:
        if (
            statement.effect == "Deny"
            and statement.names_anyone()
            and statement.applies(request.action, request.resource, context)
        ):
            return Decision.EXPLICIT_DENY
    return Decision.ALLOW if allowed else Decision.IMPLICIT_DENY
