"""No import circle in sdk or codec, counting every import (#65).

A circle hidden behind a function-level or ``TYPE_CHECKING`` import still ties
its modules together: none can be read, moved or tested without the others. The
graph here is built from the AST and counts every ``import`` and ``from ... import``
wherever it stands. ``from .pkg import name`` is an edge to ``pkg.name`` when that
is a module, else to ``pkg`` (its ``__init__``).

The circles still open would be listed in KNOWN (#65 broke the last two: the
component configs and sdk.config, codec._compiler and codec.primitives); the
test fails when one of them closes (drop it from KNOWN) and when any other
circle appears.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PARTS = ("sdk", "codec", "proxy")

# #65, still to break: each frozenset is one strongly connected component. None
# is left; a circle added later is a new one, not one to list here.
KNOWN: frozenset[frozenset[str]] = frozenset()


def _module(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(sources: Mapping[str, tuple[str, bool]]) -> dict[str, set[str]]:
    """Module -> the modules of the same graph it imports, from ``sources``
    (module name -> (source text, whether it is a package's ``__init__``))."""
    graph: dict[str, set[str]] = {name: set() for name in sources}
    for name, (text, is_package) in sources.items():
        package = name if is_package else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(text, name)):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name.removeprefix("trafka.") for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    module = ".".join(base + ([node.module] if node.module else []))
                elif node.module and node.module.startswith("trafka."):
                    module = node.module.removeprefix("trafka.")
                else:
                    continue
                subs = [f"{module}.{a.name}" for a in node.names if f"{module}.{a.name}" in graph]
                targets = subs + ([module] if len(subs) < len(node.names) else [])
            graph[name] |= {t for t in targets if t in graph and t != name}
    return graph


def cycles(graph: Mapping[str, Iterable[str]]) -> set[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: set[frozenset[str]] = set()

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = {stack.pop()}
            while v not in component:
                component.add(stack.pop())
            if len(component) > 1:
                found.add(frozenset(component))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10_000))
    try:
        for v in sorted(graph):
            if v not in index:
                visit(v)
    finally:
        sys.setrecursionlimit(limit)
    return found


def part_cycles(part: str) -> set[frozenset[str]]:
    sources = {
        _module(path, REPO): (path.read_text(), path.name == "__init__.py")
        for path in sorted((REPO / part).rglob("*.py"))
    }
    return cycles(import_graph(sources))


def test_no_import_circle_but_the_known_ones() -> None:
    found = set().union(*(part_cycles(part) for part in PARTS))
    new = [sorted(c) for c in found - KNOWN]
    closed = [sorted(c) for c in KNOWN - found]
    assert new == [], f"import circles: {new}"
    assert closed == [], f"no longer circles (drop them from KNOWN): {closed}"


def test_a_planted_circle_is_found_whatever_hides_it() -> None:
    """A function-level import and a TYPE_CHECKING import close circles too."""
    sources = {
        "sdk": ("from .a import A\n", True),
        "sdk.a": ("def f():\n    from .b import B\n", False),
        "sdk.b": (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from trafka.sdk.a import A\n",
            False,
        ),
        "sdk.c": ("from . import a\nfrom .leaf import X\n", False),
        "sdk.leaf": ("import os\n", False),
    }
    assert cycles(import_graph(sources)) == {frozenset({"sdk.a", "sdk.b"})}
