"""The accept loop of brokerlite's and the proxy's listeners.

The loop of :func:`trio.serve_listeners`, except that a failed accept is logged
through a :class:`~trafka.common.lograte.RateLimitedLog` (once a minute, with the
count of the others) instead of with a traceback each time: ten lines a second
while file descriptors run out would bury everything else.
"""

from __future__ import annotations

import errno
from collections.abc import Callable
from typing import NoReturn

import trio

from .lograte import RateLimitedLog

__all__ = ["ACCEPT_RETRY_S", "accept_forever"]

# accept(2) failing says nothing about the listener: usually the process is out
# of file descriptors (EMFILE) or the machine of memory. The loop waits this
# long and tries again, as trio.serve_listeners does.
ACCEPT_RETRY_S = 0.1


async def accept_forever(
    listener: trio.SocketListener,
    start: Callable[[trio.SocketStream], object],
    quiet: RateLimitedLog,
) -> NoReturn:
    """Accept connections on ``listener`` and hand each to ``start`` (which must not
    block: it starts a task), closing the listener when cancelled.

    Unlike :func:`trio.serve_listeners`, which logs every failed accept with a
    traceback (ten lines a second while descriptors run out), a failed accept is
    logged through ``quiet``: once a minute, with the count of the others.
    """
    async with listener:
        while True:
            try:
                stream = await listener.accept()
            except OSError as exc:
                name = errno.errorcode.get(exc.errno or 0, "error")
                quiet.error(
                    ("accept", name),
                    "cannot accept connections: %s (%s); retrying every %g s",
                    name,
                    exc.strerror or exc,
                    ACCEPT_RETRY_S,
                )
                await trio.sleep(ACCEPT_RETRY_S)
                continue
            start(stream)
