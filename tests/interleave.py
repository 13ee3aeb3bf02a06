"""A deterministic scheduler that interleaves flows at the granularity of AWS calls.

Each flow runs in its own thread with its own boto3 clients. A botocore
``before-call`` hook parks the thread before every AWS call; the scheduler
waits until every live thread is parked or finished, then lets exactly one
proceed to its next call. A *schedule* is the sequence of labels that were
allowed to proceed, so every run is reproducible, and :func:`explore` visits
every distinct interleaving by depth-first search over the choice points.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import random

Flow = Callable[[], object]


@dataclass
class Run:
    """What one scheduled run did."""

    trace: list[str] = field(default_factory=list)  # label of each AWS call, in order
    calls: list[str] = field(default_factory=list)  # "label:Operation" of each call
    choices: list[int] = field(default_factory=list)  # steps where more than one could go
    results: dict[str, object] = field(default_factory=dict)
    errors: dict[str, BaseException] = field(default_factory=dict)


class Scheduler:
    """Runs labelled flows, one AWS call at a time, following a schedule prefix."""

    def __init__(self, prefix: Sequence[str] = (), chooser: random.Random | None = None) -> None:
        self._prefix = list(prefix)
        self._chooser = chooser
        self._cond = threading.Condition()
        self._parked: dict[str, str] = {}  # label -> operation it waits to call
        self._live: set[str] = set()
        self._allowed: str | None = None
        self.run = Run()

    def hook(self, label: str) -> Callable[..., None]:
        """A ``before-call`` handler that parks the calling flow until it is chosen."""

        def before_call(model: Any, **_: Any) -> None:
            with self._cond:
                self._parked[label] = model.name
                self._cond.notify_all()
                self._cond.wait_for(lambda: self._allowed == label)
                self._allowed = None
                del self._parked[label]

        return before_call

    def execute(self, flows: dict[str, Flow], timeout: float = 30.0) -> Run:
        """Run every flow to the end under this schedule."""
        threads = []
        with self._cond:
            self._live = set(flows)
        for label, flow in flows.items():
            thread = threading.Thread(target=self._body, args=(label, flow), daemon=True)
            threads.append(thread)
            thread.start()
        step = 0
        with self._cond:
            while self._live:
                settled = self._cond.wait_for(
                    lambda: self._allowed is None and set(self._parked) == self._live,
                    timeout=timeout,
                )
                if not settled:
                    msg = f"flows did not settle: parked={self._parked} live={self._live}"
                    raise TimeoutError(msg)
                if not self._live:
                    break
                ready = sorted(self._parked)
                label = self._pick(step, ready)
                if len(ready) > 1:
                    self.run.choices.append(step)
                self.run.trace.append(label)
                self.run.calls.append(f"{label}:{self._parked[label]}")
                self._allowed = label
                self._cond.notify_all()
                step += 1
        for thread in threads:
            thread.join(timeout)
        return self.run

    def _pick(self, step: int, ready: list[str]) -> str:
        if step < len(self._prefix) and self._prefix[step] in ready:
            return self._prefix[step]
        if self._chooser is not None:
            return self._chooser.choice(ready)
        return ready[0]

    def _body(self, label: str, flow: Flow) -> None:
        try:
            self.run.results[label] = flow()
        except BaseException as exc:  # noqa: BLE001  (reported to the test, not swallowed)
            self.run.errors[label] = exc
        finally:
            with self._cond:
                self._live.discard(label)
                self._cond.notify_all()


def explore(run_one: Callable[[Sequence[str]], Run], limit: int = 2000) -> Iterator[Run]:
    """Every distinct interleaving, by depth-first search over choice points."""
    stack: list[list[str]] = [[]]
    seen: set[tuple[str, ...]] = set()
    while stack:
        prefix = stack.pop()
        run = run_one(prefix)
        key = tuple(run.trace)
        if key in seen:
            continue
        seen.add(key)
        if len(seen) > limit:
            msg = f"more than {limit} interleavings"
            raise RuntimeError(msg)
        yield run
        labels = sorted(set(run.trace))
        for step in run.choices:
            if step < len(prefix):
                continue
            for other in labels:
                if other != run.trace[step]:
                    stack.append([*run.trace[:step], other])
