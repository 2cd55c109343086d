"""Sizes a newcomer can read (#47 step 4): no hand-written module over 1,000
lines, no class over 600 and no function over 100.

The generated codec (``codec/messages``, ``codec/_error_codes.py``) is not
hand-written and is not counted; tests and benchmarks are not parts of the
package. What is still over a limit is listed in :data:`OVER` with its size
today, a ratchet: a listed item may shrink (then its entry must be lowered or
removed, or the test fails), never grow, and nothing new may join it.
``python tests/test_sizes.py`` prints the sizes found.
"""

from __future__ import annotations

import ast
import functools
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE_DIR: dict[str, str] = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"][
    "setuptools"
]["package-dir"]
PARTS = sorted({folder.split("/")[0] for folder in PACKAGE_DIR.values()})
GENERATED = ("codec/messages/", "codec/_error_codes.py")
LIMITS = {"module": 1000, "class": 600, "function": 100}

#: What is over its limit today: "kind path[:qualified name]" -> lines.
OVER: dict[str, int] = {
    "function codec/records.py:_decode_records_v2": 146,
    "module codec/primitives.py": 1202,
    "module codec/records.py": 2123,
}


@functools.cache
def measure() -> dict[str, int]:
    """Every module, class and function over its limit, with its lines (read
    once per run: the tests below only compare)."""
    found: dict[str, int] = {}
    for part in PARTS:
        for path in sorted((REPO / part).rglob("*.py")):
            where = path.relative_to(REPO).as_posix()
            if where.startswith(GENERATED):
                continue
            source = path.read_text()
            lines = source.count("\n") + (not source.endswith("\n") and bool(source))
            if lines > LIMITS["module"]:
                found[f"module {where}"] = lines
            _walk(ast.parse(source, where), where, "", found)
    return found


def _walk(node: ast.AST, where: str, prefix: str, found: dict[str, int]) -> None:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            kind = "class" if isinstance(child, ast.ClassDef) else "function"
            name = f"{prefix}{child.name}"
            assert child.end_lineno is not None
            size = child.end_lineno - child.lineno + 1
            if size > LIMITS[kind]:
                found[f"{kind} {where}:{name}"] = size
            _walk(child, where, f"{name}.", found)
        else:
            _walk(child, where, prefix, found)


def test_nothing_new_is_over_its_limit() -> None:
    new = {k: v for k, v in measure().items() if k not in OVER}
    assert new == {}, f"over the limits {LIMITS}: split them along a real seam"


def test_what_is_listed_has_not_grown() -> None:
    found = measure()
    grown = {k: (OVER[k], v) for k, v in found.items() if k in OVER and v > OVER[k]}
    assert grown == {}, "(listed, now): these grew; split them rather than raise the list"


def test_the_list_follows_what_shrank() -> None:
    found = measure()
    stale = {k: (v, found.get(k)) for k, v in OVER.items() if found.get(k) != v}
    assert stale == {}, "(listed, now): lower or remove these entries of OVER"


def test_the_walk_sees_nested_classes_and_functions() -> None:
    body = "class A:\n" + "    def f(self):\n" + "        x = 1\n" * 120
    found: dict[str, int] = {}
    _walk(ast.parse(body), "m.py", "", found)
    assert found == {"function m.py:A.f": 121}


if __name__ == "__main__":
    for key, size in sorted(measure().items()):
        print(f"    {key!r}: {size},")
