"""The blocking Schema Registry client: the async one on a loop in a thread of
its own (:mod:`trafka.sdk._loop_thread`), callable from any other thread."""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any

from .._loop_thread import Forwarding, Portal
from .registry import open_schema_registry
from .registry_config import RegistryConfig

__all__ = ["SchemaRegistryClient"]


class SchemaRegistryClient(Forwarding):
    """Every method of :class:`~.registry.AsyncSchemaRegistryClient`, blocking
    (``register_schema``, ``get_schema``, ``get_latest_version``,
    ``lookup_schema``, ``get_subjects``, ``get_versions``,
    ``test_compatibility``, ``get_config``...), with the same caches.

    Args:
        conf: Confluent's settings (``url``, ``basic.auth.user.info``...).
    """

    def __init__(self, conf: Mapping[str, Any] | RegistryConfig, **kwargs: Any) -> None:
        config = conf if isinstance(conf, RegistryConfig) else RegistryConfig.from_dict(conf)
        self.config = config
        self._loop = Portal(partial(open_schema_registry, config, **kwargs))

    @property
    def requests(self) -> int:
        """The HTTP requests sent so far (each attempt counts)."""
        return int(self._loop.client.requests)

    def close(self) -> None:
        """Close the connections and stop the thread."""
        self._loop.close()

    def __enter__(self) -> SchemaRegistryClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
