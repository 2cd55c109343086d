"""No part imports another part's private names (#47): what one part offers another
is public, so a refactoring inside a part cannot break its neighbours unseen.

The layers themselves (which part may import which) are import-linter's contract
in pyproject.toml, checked by ``make lint``; import-linter has no rule for
private names, so this test is that rule: an import, absolute or relative, from
another part of trafka of a module or a name that starts with ``_``.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import source_trees

REPO = Path(__file__).resolve().parents[1]
PACKAGE_DIR: dict[str, str] = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"][
    "setuptools"
]["package-dir"]
# The parts: the top-level folders that are packages (trafka.<part>).
PARTS = sorted({folder.split("/")[0] for folder in PACKAGE_DIR.values()})


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _imported_module(path: Path, node: ast.ImportFrom) -> list[str]:
    """The module ``node`` imports from, as a path below ``trafka``."""
    if node.level == 0:
        module = node.module or ""
        return module.split(".")[1:] if module.startswith("trafka.") else []
    package = list(path.relative_to(REPO).parent.parts)
    base = package[: len(package) - (node.level - 1)]
    return base + (node.module.split(".") if node.module else [])


def private_imports_across_parts() -> list[str]:
    found = []
    for part in PARTS:
        for path in source_trees.python_files(REPO / part):
            for node in ast.walk(source_trees.tree(path)):
                if not isinstance(node, ast.ImportFrom):
                    continue
                module = _imported_module(path, node)
                if not module or module[0] == part or module[0] not in PARTS:
                    continue
                names = [a.name for a in node.names]
                if any(map(_private, module[1:])) or any(map(_private, names)):
                    where = path.relative_to(REPO)
                    found.append(f"{where}:{node.lineno}: {'.'.join(module)} {names}")
    return found


def test_the_parts_are_the_packages() -> None:
    assert {"codec", "common", "sdk", "brokerlite", "proxy", "spark", "tools"} <= set(PARTS)


def test_no_part_imports_another_parts_private_names() -> None:
    assert private_imports_across_parts() == []


def test_the_check_sees_relative_and_absolute_imports() -> None:
    spark_file = REPO / "spark" / "x.py"
    relative = ast.parse("from ..sdk._wire import thing").body[0]
    absolute = ast.parse("from trafka.sdk.fetcher import _hidden").body[0]
    assert isinstance(relative, ast.ImportFrom) and isinstance(absolute, ast.ImportFrom)
    assert _imported_module(spark_file, relative) == ["sdk", "_wire"]
    assert _imported_module(spark_file, absolute) == ["sdk", "fetcher"]


# -- objects reaching into each other's private attributes (#47) ---------------------------------
#
# ``thing._name`` where ``thing`` is not ``self``, ``cls`` or ``super()``: one object
# using another's private state or steps, which the other cannot then change unseen.
# What an object offers another is a public method or attribute (the SDK's cores
# and drivers, #47 step 3); where a protocol fixes an underscore name it is not
# trafka's privacy, and it is not counted: enum's ``_sunder_`` names,
# namedtuple's ``_replace``/``_asdict``/``_fields``/``_make``/``_field_defaults``
# and the standard library's documented ``os._exit``.
#
# A ratchet: the parts listed in REACH_CEILINGS have not been cleaned yet, and may
# hold at most that many; every other part holds none. A count below its ceiling
# fails too, so that the ceiling is lowered in the same change and never rises
# again. ``python tests/test_layers.py`` prints every use, file:line.

NAMEDTUPLE_API = frozenset({"_replace", "_asdict", "_fields", "_make", "_field_defaults"})
REACH_CEILINGS: dict[str, int] = {
    "codec": 4,  # construct's subclassing protocol, named once in codec/_construct_calls.py
}


def _reaches_in(node: ast.AST) -> bool:
    if not isinstance(node, ast.Attribute):
        return False
    name = node.attr
    if not _private(name) or name in NAMEDTUPLE_API:
        return False
    if len(name) > 2 and name.endswith("_") and not name.endswith("__"):
        return False  # an enum's _sunder_ name (_value_, _missing_...)
    owner = node.value
    if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
        return False
    if isinstance(owner, ast.Name) and (owner.id, name) == ("os", "_exit"):
        return False  # public, whatever its name says (exit now, without cleanup)
    return not (
        isinstance(owner, ast.Call)
        and isinstance(owner.func, ast.Name)
        and owner.func.id == "super"
    )


def private_reaches() -> dict[str, list[str]]:
    """Per part, every ``x._name`` where ``x`` is not self, cls or super(): file:line."""
    found: dict[str, list[str]] = {part: [] for part in PARTS}
    for part in PARTS:
        for path in source_trees.python_files(REPO / part):
            where = path.relative_to(REPO)
            for node in ast.walk(source_trees.tree(path)):
                if _reaches_in(node):
                    assert isinstance(node, ast.Attribute)
                    found[part].append(f"{where}:{node.lineno}: {ast.unparse(node)}")
    return {part: sorted(uses) for part, uses in found.items()}


def test_no_object_reaches_into_anothers_private_attributes() -> None:
    over = []
    for part, uses in private_reaches().items():
        ceiling = REACH_CEILINGS.get(part, 0)
        if len(uses) > ceiling:
            shown = "\n  ".join(uses)
            over.append(f"{part}: {len(uses)} over its ceiling of {ceiling}:\n  {shown}")
        elif len(uses) < ceiling:
            over.append(f"{part}: {len(uses)}, below its ceiling; lower REACH_CEILINGS to it")
    assert not over, "\n".join(over)


def test_the_reach_check_sees_what_it_should() -> None:
    def uses(source: str) -> list[str]:
        return [ast.unparse(n) for n in ast.walk(ast.parse(source)) if _reaches_in(n)]

    assert uses("producer._append_hot(x)\nself._own\ncls._own\nsuper()._apply()") == [
        "producer._append_hot"
    ]
    assert uses("self.consumer._fetcher.take()\nobj._value_\nrow._replace(a=1)") == [
        "self.consumer._fetcher"
    ]
    assert uses("x.__class__\nmod._private_helper()") == ["mod._private_helper"]
    assert uses("os._exit(1)\nos._private") == ["os._private"]


if __name__ == "__main__":
    for part, part_uses in private_reaches().items():
        for use in part_uses:
            print(use)
        if part_uses:
            print(f"-- {part}: {len(part_uses)} (ceiling {REACH_CEILINGS.get(part, 0)})")
