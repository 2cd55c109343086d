"""The registry's error answer and small request helpers."""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["ApiError", "bad_version", "flag"]


class ApiError(Exception):
    """An answer the registry documents: HTTP ``status``, ``error_code`` and message."""

    def __init__(self, status: int, code: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


def flag(query: Mapping[str, str], name: str) -> bool:
    """A boolean query parameter (``true`` in any case; clients send ``True`` too)."""
    return query.get(name, "").lower() == "true"


def bad_version(text: str) -> ApiError:
    return ApiError(
        422,
        42202,
        "The specified version '"
        + text
        + "' is not a valid version id. Allowed values are between [1, 2^31-1] and the string "
        '"latest"',
    )
