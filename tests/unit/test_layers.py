"""The runtime's imports point down, and no module imports itself back (docs/architecture.md).

Read from the source text, as a reviewer would: every ``import`` and ``from ... import``
of the three packages, type-checking blocks included (an upward type import is still a
dependency a reader has to follow).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
RUNTIME = "dependency_tracker"
# Lowest first: a folder may import only from folders before it (and from itself).
LAYERS = [
    "core",
    "table",
    "payloads",
    "cycles",
    "answers",
    "joins",  # waits and joins are peers: neither imports the other (below)
    "waits",
    "callbacks",
    "cirrus",
    "intake",
    "sweeper",
    "app",
    "handlers",
]
# Above the features: the public addresses of moved names (docs/versioning.md), and the
# parents' builders, which read only the core.
OUTSIDE_THE_LAYERS = {"models", "local", "asl", "__init__"}


def modules() -> dict[str, Path]:
    found = {}
    for path in SRC.rglob("*.py"):
        dotted = ".".join(path.relative_to(SRC).with_suffix("").parts)
        found[dotted.removesuffix(".__init__")] = path
    return found


def imports(path: Path, known: set[str]) -> set[str]:
    """The project modules ``path`` imports (a name imported from a package counts as it)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                target = f"{node.module}.{alias.name}"
                found.add(target if target in known else node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name in known}


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(path, set(known)) - {name} for name, path in known.items()}


def folder(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != RUNTIME:
        return None
    return parts[1] if len(parts) > 1 else "__init__"


def test_the_runtime_imports_point_down() -> None:
    upward = []
    for module, targets in graph().items():
        mine = folder(module)
        if mine is None or mine in OUTSIDE_THE_LAYERS:
            continue
        for target in targets:
            theirs = folder(target)
            if theirs is None:
                upward.append(f"{module} -> {target} (the runtime imports tooling)")
            elif theirs in OUTSIDE_THE_LAYERS:
                upward.append(f"{module} -> {target} (a compatibility address)")
            elif LAYERS.index(theirs) > LAYERS.index(mine):
                upward.append(f"{module} -> {target}")
    assert upward == []


# The waits and the joins stand on their own: what both need (answering a token, cycles,
# starting a payload) is below them, and what hands work to both (the callback flow) above.
PEERS = {"waits", "joins"}


def test_the_waits_and_the_joins_import_nothing_of_each_other() -> None:
    crossing: list[str] = []
    for module, targets in graph().items():
        mine = folder(module)
        if mine not in PEERS:
            continue
        crossing.extend(
            f"{module} -> {target}" for target in targets if folder(target) in PEERS - {mine}
        )
    assert crossing == []


def test_no_module_imports_itself_back() -> None:
    edges = graph()
    assert cycles(edges) == []


def test_every_runtime_folder_has_a_layer() -> None:
    folders = {
        path.name
        for path in (SRC / RUNTIME).iterdir()
        if path.is_dir() and (path / "__init__.py").is_file()
    }
    files = {path.stem for path in (SRC / RUNTIME).glob("*.py")}
    assert (folders | files) - set(LAYERS) - OUTSIDE_THE_LAYERS == set()


@pytest.mark.parametrize(
    ("edges", "expected"),
    [
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, [("a", "b"), ("b", "c"), ("c", "a")]),
        ({"a": {"b"}, "b": set()}, []),
    ],
)
def test_the_cycle_finder_finds_a_cycle(
    edges: dict[str, set[str]], expected: list[tuple[str, str]]
) -> None:
    assert cycles(edges) == expected


def cycles(edges: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Every import ``a -> b`` from which ``a`` is reached again."""
    return sorted((a, b) for a, targets in edges.items() for b in targets if reaches(edges, b, a))


def reaches(edges: dict[str, set[str]], start: str, goal: str) -> bool:
    seen, todo = {start}, [start]
    while todo:
        for target in edges.get(todo.pop(), set()):
            if target == goal:
                return True
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return False
