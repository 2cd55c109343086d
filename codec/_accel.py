"""The switch to the optional C accelerator (``trafka.codec._speedups``).

Rules: :data:`speedups` is the accelerator module, or None when it was not built
or ``TRAFKA_NO_SPEEDUPS`` is set to anything but ``0``. Code that may use it reads
``_accel.speedups`` at each call (never a copy taken at import), so that tests
can switch every path at once by patching this one attribute. The C code only
ever refuses input: every error is still raised, and explained, by the Python
code that runs instead.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

__all__ = ["accelerated", "load_speedups", "speedups"]


def load_speedups() -> Any:
    """The C fast paths (``trafka.codec._speedups``), or None.

    None when the extension was not built (no compiler at install time) or when
    ``TRAFKA_NO_SPEEDUPS`` is set to anything but ``0`` (the tests compare both).
    """
    if os.environ.get("TRAFKA_NO_SPEEDUPS", "0") not in ("", "0"):
        return None
    try:
        return importlib.import_module("._speedups", __package__)
    except ImportError:
        return None


# Read at each call, so tests can switch paths by patching this attribute.
speedups: Any = load_speedups()


def accelerated(name: str) -> Any | None:
    """The C accelerator's function ``name`` (``murmur2``, ``encode_batch``...),
    or None when the accelerator is not built or is turned off
    (``TRAFKA_NO_SPEEDUPS``): for packages that keep a Python fallback."""
    return getattr(speedups, name, None)
