"""Helpers shared by the drivers: exception-group unwrapping, waiting for a state
machine's deadline, and (de)serializers."""

from __future__ import annotations

import json
import logging
import math
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import anyio
import anyio.lowlevel
import anyio.to_thread
from anyio.abc import TaskGroup

from .errors import SerializationError

__all__ = [
    "collapse_group",
    "SchemaLoads",
    "get_deserializer",
    "get_serializer",
    "loop_clock",
    "owned_task_group",
    "serve_metrics_if_asked",
    "sleep_until",
]

log = logging.getLogger("trafka.sdk")

Serializer = Callable[[Any], bytes | None]
Deserializer = Callable[[bytes | None], Any]


def loop_clock() -> Callable[[], float]:
    """The running event loop's clock, what :func:`anyio.current_time` returns,
    as a function to call directly: anyio looks its backend up on every call,
    which costs about three times trio's own ``current_time``. Call it inside
    the loop whose clock it is."""
    trio = sys.modules.get("trio")
    if trio is not None:
        try:
            clock = trio.lowlevel.current_clock()
        except RuntimeError:
            pass
        else:
            # The run's clock is fixed for the run: its own method is one call,
            # where trio.current_time goes through the runner (three).
            return clock.current_time  # type: ignore[no-any-return]
    asyncio = sys.modules.get("asyncio")  # no loop of its own unless imported
    if asyncio is not None:
        try:
            return asyncio.get_running_loop().time  # type: ignore[no-any-return]
        except RuntimeError:
            pass
    return anyio.current_time


def collapse_group(
    group: BaseExceptionGroup[Any], prefer: BaseException | None = None
) -> BaseException:
    """The exception a public context manager should raise for a task-group error.

    A group whose leaves are one exception (ignoring cancellations when a real
    error is present) collapses to that exception; a group of cancellations
    collapses to the first one. A KeyboardInterrupt or SystemExit wins over
    everything else. ``prefer`` (the block's own error) wins over
    the other leaves when it is among them and not a cancellation: an error
    inside the block comes out as itself, whatever a task raised meanwhile.
    Only several distinct errors, none preferred, stay a group.
    """
    leaves: list[BaseException] = []

    def walk(exc: BaseException) -> None:
        if isinstance(exc, BaseExceptionGroup):
            for sub in exc.exceptions:
                walk(sub)
        else:
            leaves.append(exc)

    walk(group)
    cancelled = anyio.get_cancelled_exc_class()
    real = [e for e in leaves if not isinstance(e, cancelled)]
    for exc in real:
        # Ctrl-C lands in whichever task runs (trio raises it there); what the
        # block raised meanwhile is most likely its effect: the interrupt wins.
        if isinstance(exc, KeyboardInterrupt | SystemExit):
            return exc
    if len(real) == 1:
        return real[0]
    if not real and leaves:
        return leaves[0]
    if prefer is not None and any(e is prefer for e in real):
        for other in real:
            if other is not prefer:
                log.error("a task failed while the block raised %r", prefer, exc_info=other)
        return prefer
    return group


@asynccontextmanager
async def owned_task_group() -> AsyncIterator[TaskGroup]:
    """A task group for a public context manager: one real error comes out as
    itself (see :func:`collapse_group`), and so does the block's own error,
    never wrapped in an ExceptionGroup."""
    error: BaseException | None = None
    raised: BaseException | None = None
    try:
        async with anyio.create_task_group() as tg:
            try:
                yield tg
            except BaseException as exc:
                raised = exc
                raise
    except BaseExceptionGroup as group:
        error = collapse_group(group, raised)
        if error is group:
            raise
    if error is not None:
        raise error


async def sleep_until(deadline: float | None, wake: anyio.Event) -> None:
    """Sleep until ``deadline`` (the anyio clock; None: none) or until ``wake`` is set.

    What a driver's loop over a state machine does between two rounds of the
    machine's outputs. A deadline already past only yields to the event loop
    once, so that such a loop never starves the other tasks.
    """
    wait = math.inf if deadline is None else deadline - anyio.current_time()
    if wait > 0:
        with anyio.move_on_after(wait):
            await wake.wait()
    else:
        await anyio.lowlevel.checkpoint()


def _bytes_serializer(value: Any) -> bytes | None:
    if value is None or type(value) is bytes:
        return value
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    raise SerializationError(f"expected bytes (the default serializer), got {type(value).__name__}")


def _str_serializer(value: Any) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    raise SerializationError(f"expected str, got {type(value).__name__}")


def _json_serializer(value: Any) -> bytes | None:
    if value is None:
        return None
    try:
        return json.dumps(value, separators=(",", ":")).encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise SerializationError(f"cannot serialize to JSON: {exc}") from None


def get_serializer(spec: str | Serializer) -> Serializer:
    """A function turning a key or value into bytes (``None`` stays ``None``).

    Args:
        spec: ``bytes``, ``str`` (UTF-8), ``json`` or a callable returning bytes or None.
    """
    if spec == "bytes":
        return _bytes_serializer
    if spec == "str":
        return _str_serializer
    if spec == "json":
        return _json_serializer
    if not callable(spec):
        raise SerializationError(f"unknown serializer {spec!r}")
    fn = spec

    def custom(value: Any) -> bytes | None:
        try:
            out = fn(value)
        except SerializationError:
            raise
        except Exception as exc:
            raise SerializationError(
                f"serializer {getattr(fn, '__name__', fn)!r} failed: {exc!r}"
            ) from exc
        if out is None or type(out) is bytes:
            return out
        if isinstance(out, bytearray | memoryview):
            return bytes(out)
        raise SerializationError(f"serializer returned {type(out).__name__}, not bytes")

    return custom


def get_deserializer(spec: str | Deserializer) -> Deserializer | None:
    """A function turning bytes (or None) into the user's type; ``None`` for raw bytes."""
    if spec == "bytes":
        return None
    if spec == "str":
        return lambda b: None if b is None else b.decode("utf-8", errors="replace")
    if spec == "json":

        def from_json(b: bytes | None) -> Any:
            if b is None:
                return None
            try:
                return json.loads(b)
            except ValueError as exc:
                raise SerializationError(f"cannot deserialize JSON: {exc}") from None

        return from_json
    if not callable(spec):
        raise SerializationError(f"unknown deserializer {spec!r}")
    return spec


async def serve_metrics_if_asked(
    tg: anyio.abc.TaskGroup, client: Any, kind: str, listen: str | None
) -> None:
    """Start ``client``'s Prometheus listener in ``tg`` when ``metrics.listen``
    is set (the metrics module is loaded only then)."""
    if listen is None:
        return
    from .prometheus import serve_client_metrics

    await tg.start(serve_client_metrics, client, kind, listen)


class SchemaLoads:
    """The registry loads a consumer's schema deserializers (``needs_registry``
    and ``preload``, :mod:`trafka.sdk.schemas`) would make for a record, kept
    for the driver to run on a worker thread, off its event loop, before the
    record is deserialized.

    Attributes:
        wanted: the loads waiting (each a call with no arguments).
    """

    def __init__(self, key_deserializer: Any, value_deserializer: Any) -> None:
        self._needs = [
            (d.needs_registry, d.preload, is_key)
            for d, is_key in ((key_deserializer, True), (value_deserializer, False))
            if hasattr(d, "needs_registry") and hasattr(d, "preload")
        ]
        self.wanted: list[Callable[[], None]] = []

    def __bool__(self) -> bool:
        """Whether any deserializer may need the registry."""
        return bool(self._needs)

    def need(self, t: str, p: int, o: int, k: Any, v: Any, h: Any) -> bool:
        """Whether the record's key or value needs a schema not loaded yet (its
        loads are then added to :attr:`wanted`)."""
        found = False
        for needs, preload, is_key in self._needs:
            data = k if is_key else v
            if needs(data, h, is_key):
                self.wanted.append(partial(preload, data, t, p, o, h, is_key))
                found = True
        return found

    async def run(self) -> bool:
        """Run the loads waiting, each on a worker thread; whether there were any."""
        loads, self.wanted = self.wanted, []
        for load in loads:
            await anyio.to_thread.run_sync(load)
        return bool(loads)
