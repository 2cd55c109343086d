"""The client lifecycle every client class inherits: ``stop()``/``aclose()`` for a
client a ``start_*`` function runs (see :mod:`trafka.sdk.hosting`).

A leaf: it imports no client, so the clients import it and :mod:`.hosting`
imports the clients, without a circle.
"""

from __future__ import annotations

import anyio

from .errors import UsageError

__all__ = ["Host", "Hostable"]


class Host:
    """What a ``start_*`` function and its client share: the client's host task
    waits for ``stop``; ``done`` is set once the client is closed, ``error`` is
    what closing raised."""

    def __init__(self) -> None:
        self.stop = anyio.Event()
        self.done = anyio.Event()
        self.error: BaseException | None = None


class Hostable:
    """``stop()`` and ``aclose()`` for a client started with a ``start_*`` function.

    Attributes:
        hosted_by: set by the ``start_*`` function that runs the client (None
            for a client opened with ``async with``).
        metrics_address: the ``(host, port)`` its Prometheus metrics are served
            on (``metrics.listen``), once bound; None without.
    """

    hosted_by: Host | None = None
    metrics_address: tuple[str, int] | None = None

    async def stop(self) -> None:
        """Close a client opened by ``start_*`` (see :mod:`trafka.sdk.hosting`).

        Raises:
            UsageError: the client was opened with ``async with``.
            Exception: what closing raised (a producer's failed flush...).
        """
        host = self.hosted_by
        if host is None:
            raise UsageError(
                f"{type(self).__name__}.stop() is for clients opened by start_*; "
                "this one closes when its async with block ends"
            )
        host.stop.set()
        await host.done.wait()
        error, host.error = host.error, None
        if error is not None and not isinstance(error, anyio.get_cancelled_exc_class()):
            raise error

    async def aclose(self) -> None:
        """The same as :meth:`stop`."""
        await self.stop()
