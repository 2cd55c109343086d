"""brokerlite's modules import each other without circles (#47).

A circle (the core importing its handlers, which import the core) makes every
module of it depend on every other: none can be read, tested or moved alone.
import-linter's contracts in pyproject.toml keep the layers; this test keeps the
module graph acyclic, counting every import: at module level, inside functions
and under ``TYPE_CHECKING`` (a type-only import is still a dependency a reader
must follow). What a module needs of its owner it declares as a Protocol, a port
(``handlers._base.BrokerPort``, ``metrics.MetricsSource``...).
"""

from __future__ import annotations

import ast
from pathlib import Path

BROKERLITE = Path(__file__).resolve().parents[2] / "brokerlite"


def _module(path: Path, root: Path) -> tuple[str, ...]:
    parts = path.relative_to(root).with_suffix("").parts
    return parts[:-1] if parts[-1] == "__init__" else parts


def import_graph(root: Path = BROKERLITE) -> dict[tuple[str, ...], set[tuple[str, ...]]]:
    """Every module of brokerlite (a path below the package) and those it imports."""
    files = {_module(p, root): p for p in sorted(root.rglob("*.py"))}
    graph: dict[tuple[str, ...], set[tuple[str, ...]]] = {}
    for module, path in files.items():
        package = module if path.name == "__init__.py" else module[:-1]
        found: set[tuple[str, ...]] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package[: len(package) - (node.level - 1)]
                elif (node.module or "").startswith("trafka.brokerlite"):
                    base = ()
                else:
                    continue
                target = base + tuple((node.module or "").split(".")[2 if not node.level else 0 :])
                target = tuple(p for p in target if p)
                for alias in node.names:
                    name = (*target, alias.name)
                    found.add(name if name in files else target)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("trafka.brokerlite."):
                        found.add(tuple(alias.name.split(".")[2:]))
        graph[module] = {m for m in found if m in files and m != module}
    return graph


def circles(graph: dict[tuple[str, ...], set[tuple[str, ...]]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's)."""
    index: dict[tuple[str, ...], int] = {}
    low: dict[tuple[str, ...], int] = {}
    stack: list[tuple[str, ...]] = []
    on_stack: set[tuple[str, ...]] = set()
    found: list[list[str]] = []

    def visit(v: tuple[str, ...]) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(".".join(w))
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_brokerlite_has_no_import_circles() -> None:
    graph = import_graph()
    assert ("broker",) in graph and ("handlers", "_base") in graph
    assert circles(graph) == []


def test_the_check_finds_a_circle_and_reads_every_import_form(tmp_path: Path) -> None:
    (tmp_path / "core").mkdir()
    (tmp_path / "core" / "__init__.py").write_text("")
    (tmp_path / "core" / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..b import B\n"
    )
    (tmp_path / "b.py").write_text("def f():\n    from trafka.brokerlite.c import C\n")
    (tmp_path / "c.py").write_text("from .core import a\n")
    graph = import_graph(tmp_path)
    assert graph[("core", "a")] == {("b",)}
    assert graph[("b",)] == {("c",)}
    assert graph[("c",)] == {("core", "a")}
    assert circles(graph) == [["b", "c", "core.a"]]
