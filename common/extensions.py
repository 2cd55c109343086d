"""The optional C extensions above the codec (the SDK's per-record path, the
confluent-kafka drop-in's message view): each is used when it was built and
not turned off, its pure-Python reference otherwise.

Rules: :func:`load_extension` answers the module, or None when it was not
built (no compiler at install time) or ``TRAFKA_NO_SPEEDUPS`` is set to
anything but ``0`` (the tests compare both paths). The codec's own
accelerator is loaded the same way by ``trafka.codec._accel``, below this layer.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

__all__ = ["load_extension"]


def load_extension(name: str) -> Any:
    """The optional C extension ``name`` (a module's full name), or None."""
    if os.environ.get("TRAFKA_NO_SPEEDUPS", "0") not in ("", "0"):
        return None
    try:
        return importlib.import_module(name)
    except ImportError:
        return None
