"""The blocking Schema Registry client: the async one on a loop in a thread of
its own (:mod:`trafka.sdk._loop_thread`), callable from any other thread."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any, TypeVar

from .._loop_thread import Forwarding, Portal
from .registry import open_schema_registry
from .registry_config import RegistryConfig

__all__ = ["SchemaRegistryClient"]

T = TypeVar("T")


def _off_loop(fn: Callable[[], T]) -> T:
    """``fn()``, on a thread of its own when this one runs an event loop: anyio's
    blocking portal cannot be started or stopped from a loop's thread (a serde
    made, or closed, inside an async application)."""
    try:
        import sniffio

        sniffio.current_async_library()
    except Exception:
        return fn()
    out: list[Any] = []

    def run() -> None:
        try:
            out.append((True, fn()))
        except BaseException as exc:
            out.append((False, exc))

    thread = threading.Thread(target=run, name="trafka-registry-start", daemon=True)
    thread.start()
    thread.join()
    ok, value = out[0]
    if not ok:
        raise value
    return value  # type: ignore[no-any-return]


class SchemaRegistryClient(Forwarding):
    """Every method of :class:`~.registry.AsyncSchemaRegistryClient`, blocking
    (``register_schema``, ``get_schema``, ``get_latest_version``,
    ``lookup_schema``, ``get_subjects``, ``get_versions``,
    ``test_compatibility``, ``get_config``...), with the same caches. Callable
    from any thread, an event loop's too: a call there holds that loop for the
    request (the serdes' caches make it once per schema).

    Args:
        conf: Confluent's settings (``url``, ``basic.auth.user.info``...).
    """

    def __init__(self, conf: Mapping[str, Any] | RegistryConfig, **kwargs: Any) -> None:
        config = conf if isinstance(conf, RegistryConfig) else RegistryConfig.from_dict(conf)
        self.config = config
        self._loop = _off_loop(lambda: Portal(partial(open_schema_registry, config, **kwargs)))

    @property
    def requests(self) -> int:
        """The HTTP requests sent so far (each attempt counts)."""
        return int(self._loop.client.requests)

    def close(self) -> None:
        """Close the connections and stop the thread."""
        _off_loop(self._loop.close)

    def __enter__(self) -> SchemaRegistryClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
