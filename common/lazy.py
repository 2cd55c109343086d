"""Names a module exports but loads on first use (PEP 562).

A program that imports ``trafka.sdk`` to produce and consume should not pay for
the admin client, the share consumer or zeroconf (issue #48). The modules that
export such names give them to :func:`lazy_exports` with the module each comes
from; the names stay importable from the same path, and ``dir()`` lists them.

Rules:

* A name is looked up in its module the first time it is read, then stored in
  the exporting module's globals, so later reads are plain attribute reads.
* A name that is neither defined nor listed is an ``AttributeError`` naming the
  module, as for any module.
* Type checkers and the API reference see the names through imports under
  ``if TYPE_CHECKING:`` in the exporting module: this is only what runs.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    module_name: str, names: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of module ``module_name`` for ``names``.

    Args:
        module_name: the exporting module's ``__name__``.
        names: each exported name, with the module that defines it (relative to
            the exporting module's package, as ``".admin"``, or absolute).

    Returns:
        ``(__getattr__, __dir__)``, to be bound to those names at module level.
    """
    module = sys.modules[module_name]

    def __getattr__(name: str) -> Any:
        where = names.get(name)
        if where is None:
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(where, module.__package__), name)
        setattr(module, name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(module), *names})

    return __getattr__, __dir__
