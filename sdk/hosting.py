"""Clients started and stopped by hand, for frameworks whose hooks open a client
in one callback and close it in another (a FastAPI lifespan split in two,
aiohttp's ``on_startup``/``on_cleanup``, Django's ``AppConfig.ready``).

::

    producer = await start_producer(bootstrap_servers="localhost:9092")
    ...
    await producer.stop()  # or aclose(): flushes, then closes

Rules:

* The client still belongs to a task, as with ``open_*``: a host task (on
  asyncio a task of the running loop, on trio a system task, trio's task of the
  run itself) enters the client's ``open_*`` block and waits in it until
  :meth:`stop` is called. Nothing about the client differs from one opened with
  ``async with``.
* ``start_*`` returns once the client is open, or raises what opening raised.
* ``await client.stop()`` (``aclose()`` is the same) leaves the block: a producer
  flushes, a consumer commits (with auto-commit) and leaves its group, and the
  call returns once the client is closed, raising what closing raised. Stopping
  again returns at once. ``stop()`` on a client opened with ``async with`` is a
  usage error: its block closes it.
* A client never stopped is closed when its event loop ends (trio cancels its
  system tasks, asyncio cancels the loop's tasks), without flushing.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, TypeVar, overload

import anyio
import sniffio

from .errors import UsageError
from .lifecycle import Host, Hostable

if TYPE_CHECKING:
    from .admin import Admin
    from .consumer import Consumer
    from .consumer_types import K, V
    from .producer import Producer
    from .share_consumer import ShareConsumer

__all__ = ["Hostable", "start_admin", "start_consumer", "start_producer", "start_share_consumer"]

_C = TypeVar("_C")
_tasks: set[Any] = set()  # asyncio keeps only weak references to its tasks


async def _start(opening: Callable[[], AbstractAsyncContextManager[_C]]) -> _C:
    host = Host()
    ready = anyio.Event()
    box: dict[str, Any] = {}

    async def run() -> None:
        try:
            async with opening() as client:
                box["client"] = client
                client.hosted_by = host  # type: ignore[attr-defined]
                ready.set()
                await host.stop.wait()
        except BaseException as exc:
            if "client" in box:
                host.error = exc
            else:
                box["error"] = exc
        finally:
            ready.set()
            host.done.set()

    library = sniffio.current_async_library()
    if library == "trio":
        import trio

        trio.lowlevel.spawn_system_task(run, name="trafka client host")
    elif library == "asyncio":
        import asyncio

        task = asyncio.get_running_loop().create_task(run(), name="trafka client host")
        _tasks.add(task)
        task.add_done_callback(_tasks.discard)
    else:  # pragma: no cover - anyio supports no other loop
        raise UsageError(f"start_* needs trio or asyncio, not {library}")
    await ready.wait()
    if "error" in box:
        raise box["error"]
    client: _C = box["client"]
    return client


async def start_producer(config: Any = None, **kwargs: Any) -> Producer:
    """Open a producer to be closed by ``await producer.stop()`` (see the module).

    Args: as :func:`~trafka.sdk.open_producer`.

    Returns:
        The open :class:`~trafka.sdk.producer.Producer`.

    Raises:
        ConfigError: invalid configuration.
    """
    from .producer import open_producer

    return await _start(lambda: open_producer(config, **kwargs))


@overload
async def start_consumer(
    *topics: str,
    config: Any = None,
    key_deserializer: Callable[[bytes | None], K],
    value_deserializer: Callable[[bytes | None], V],
    **kwargs: Any,
) -> Consumer[K, V]: ...


@overload
async def start_consumer(
    *topics: str,
    config: Any = None,
    value_deserializer: Callable[[bytes | None], V],
    key_deserializer: str = "bytes",
    **kwargs: Any,
) -> Consumer[Any, V]: ...


@overload
async def start_consumer(
    *topics: str,
    config: Any = None,
    key_deserializer: Callable[[bytes | None], K],
    value_deserializer: str = "bytes",
    **kwargs: Any,
) -> Consumer[K, Any]: ...


@overload
async def start_consumer(
    *topics: str,
    config: Any = None,
    key_deserializer: str = "bytes",
    value_deserializer: str = "bytes",
    **kwargs: Any,
) -> Consumer[Any, Any]: ...


async def start_consumer(*topics: str, config: Any = None, **kwargs: Any) -> Consumer[Any, Any]:
    """Open a consumer to be closed by ``await consumer.stop()`` (see the module).

    Args: as :func:`~trafka.sdk.open_consumer`.

    Returns:
        The open :class:`~trafka.sdk.consumer.Consumer`.
    """
    from .consumer import open_consumer

    return await _start(lambda: open_consumer(*topics, config=config, **kwargs))


async def start_share_consumer(*topics: str, config: Any = None, **kwargs: Any) -> ShareConsumer:
    """Open a share consumer to be closed by ``await consumer.stop()`` (see the module)."""
    from .share_consumer import open_share_consumer

    return await _start(lambda: open_share_consumer(*topics, config=config, **kwargs))


async def start_admin(config: Any = None, **kwargs: Any) -> Admin:
    """Open an admin client to be closed by ``await admin.stop()`` (see the module)."""
    from .admin import open_admin

    return await _start(lambda: open_admin(config, **kwargs))
