"""Makes the helper modules at the top of ``tests/`` (shared by several folders)
importable by name, as each folder's own helpers already are."""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
