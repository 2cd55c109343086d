"""Shared setup of the codec tests.

The helper module ``strategies.py`` sits beside the tests; this puts its folder
on ``sys.path`` whatever pytest's import mode, so ``from strategies import ...``
works in ``prepend`` (the default) and ``importlib`` modes alike.
"""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
