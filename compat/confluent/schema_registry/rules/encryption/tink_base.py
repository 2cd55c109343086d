"""What the KMS clients take from tink: its ``KmsClient`` base (a plain class
without tink, so a client can be made and configured; using it needs tink)."""

from __future__ import annotations

from typing import Any

__all__ = ["KmsClientBase", "tink_error"]

try:
    import tink

    KmsClientBase: Any = tink.KmsClient
except ImportError:  # the rules extra is not installed
    tink = None
    KmsClientBase = object


def tink_error(message: str) -> Exception:
    """tink's error (a ValueError without tink)."""
    return tink.TinkError(message) if tink is not None else ValueError(message)
