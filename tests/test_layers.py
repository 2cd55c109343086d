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
        for path in sorted((REPO / part).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
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
