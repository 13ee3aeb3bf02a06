"""Patches of moto installed once per process and switched on only inside a block.

Installed for good rather than undone on exit: other layers (the strict layer,
the Express model) wrap the same methods after us, and undoing ours would drop
theirs. Outside every block each patched name calls moto's original.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

# (owner, attribute, factory): the factory gets moto's original and returns its replacement.
Patch = tuple[Any, str, "Callable[[Callable[..., Any]], Callable[..., Any]]"]


class Switched:
    """A set of patches, live while at least one :meth:`active` block is open."""

    def __init__(
        self, patches: Callable[[], list[Patch]], *, on_last_exit: Callable[[], None] | None = None
    ) -> None:
        self._patches = patches
        self._on_last_exit = on_last_exit
        self._lock = threading.Lock()
        self._depth = 0
        self._installed = False

    @property
    def on(self) -> bool:
        """Whether a block is open (the patches act)."""
        return self._depth > 0

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        """Within the block the patches act. Re-entrant."""
        with self._lock:
            if not self._installed:
                for owner, name, factory in self._patches():
                    self._install(owner, name, factory)
                self._installed = True
            self._depth += 1
        try:
            yield
        finally:
            with self._lock:
                self._depth -= 1
                if self._depth == 0 and self._on_last_exit is not None:
                    self._on_last_exit()

    def _install(
        self, owner: Any, name: str, factory: Callable[[Callable[..., Any]], Callable[..., Any]]
    ) -> None:
        raw = vars(owner)[name]
        kind = type(raw) if isinstance(raw, staticmethod | classmethod) else None
        original = raw.__func__ if kind is not None else raw
        replacement = factory(original)

        @functools.wraps(original)
        def switch(*args: Any, **kwargs: Any) -> Any:
            return (replacement if self._depth else original)(*args, **kwargs)

        setattr(owner, name, kind(switch) if kind is not None else switch)
