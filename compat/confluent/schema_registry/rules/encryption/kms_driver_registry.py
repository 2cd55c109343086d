"""confluent-kafka's ``kms_driver_registry``: the KMS drivers field-level
encryption finds by key URL prefix (``hcvault://``, ``local-kms://``...)."""

from __future__ import annotations

import abc
import threading
from typing import Any

from ...common.serde import RuleError

__all__ = ["KmsDriver", "get_kms_driver", "register_kms_driver", "reset_kms_drivers"]


class KmsDriver(metaclass=abc.ABCMeta):
    """Makes the KMS clients of one kind of key URL."""

    @abc.abstractmethod
    def get_key_url_prefix(self) -> str:
        """The key URLs this driver serves start with this."""

    @abc.abstractmethod
    def new_kms_client(self, conf: dict[str, Any], key_url: str | None) -> Any:
        """A KMS client (a ``tink.KmsClient``) bound to ``key_url``, with ``conf``'s credentials."""


_drivers: list[KmsDriver] = []
_lock = threading.Lock()


def register_kms_driver(driver: KmsDriver) -> None:
    """Add ``driver`` to the process-wide list."""
    with _lock:
        _drivers.append(driver)


def get_kms_driver(key_url: str) -> KmsDriver:
    """The first driver registered for ``key_url``'s prefix.

    Raises:
        RuleError: none is.
    """
    with _lock:
        for driver in _drivers:
            if key_url.startswith(driver.get_key_url_prefix()):
                return driver
    raise RuleError(f"no KMS driver found for key URL: {key_url}")


def reset_kms_drivers() -> None:
    """Forget every registered driver (for tests)."""
    with _lock:
        _drivers.clear()
