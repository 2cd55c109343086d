"""The package's source files, read and parsed once per test process.

The structural tests (``test_layers``, ``test_sizes``, ``test_api_keys``) each
walk every module of the package; parsing is most of their time. They share
these caches so a worker that runs several of them, or one that walks the
tree twice, parses each file once. The trees are shared: callers only read
them, never change a node.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path


@functools.cache
def python_files(folder: Path) -> tuple[Path, ...]:
    """Every ``*.py`` under ``folder``, sorted."""
    return tuple(sorted(folder.rglob("*.py")))


@functools.cache
def source(path: Path) -> str:
    return path.read_text()


@functools.cache
def tree(path: Path) -> ast.Module:
    return ast.parse(source(path), str(path))
