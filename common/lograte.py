"""Log lines that a flood of one kind of event cannot multiply: one now and then, with a count.

A client that sends 200,000 malformed frames, a disk that refuses every write, or
an accept loop out of file descriptors must not write one line per event: the log
would grow by megabytes a minute and bury everything else. :class:`RateLimitedLog`
stands between such events and a logger.

Rules:

* Each kind of event has a key (any hashable: a string, or a tuple naming a
  partition). The first event of a key is logged at once, and opens a window of
  ``interval`` seconds in which the key's further events are only counted.
* The first event after the window is logged with the count of those held back,
  ``... (and 1234 more in the last 60 s)``, and opens the next window. A count
  still held when the events stop is told with the next one (nothing is logged
  from a timer).
* At most ``max_keys`` keys are remembered, the one used least recently is
  forgotten first, so keys made from input (a partition, a peer) cannot grow
  without bound; a forgotten key starts afresh.
* The clock is the caller's (``clock``, in seconds, :func:`time.monotonic` by
  default), so tests can move it.
* Not thread-safe: one thread (the broker's or the proxy's trio thread) uses an
  instance.

The accept loop that logs through it is :func:`trafka.common.accept.accept_forever`.
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Callable, Hashable

__all__ = ["RateLimitedLog"]


class RateLimitedLog:
    """A logger's front door for events that may come in floods.

    Args:
        logger: where the lines go.
        interval: seconds between two lines of one key (60 by default).
        clock: the time in seconds (default :func:`time.monotonic`).
        max_keys: how many keys are remembered at most.
    """

    __slots__ = ("_clock", "_keys", "interval", "logger", "max_keys")

    def __init__(
        self,
        logger: logging.Logger,
        *,
        interval: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        max_keys: int = 1024,
    ) -> None:
        self.logger = logger
        self.interval = interval
        self.max_keys = max_keys
        self._clock = clock
        # key -> [start of its window, events held back in it]
        self._keys: collections.OrderedDict[Hashable, list[float]] = collections.OrderedDict()

    def log(
        self,
        level: int,
        key: Hashable,
        msg: str,
        *args: object,
        exc_info: bool = False,
        stacklevel: int = 1,
    ) -> bool:
        """Log ``msg % args`` at ``level`` unless ``key`` logged within the interval.

        Returns:
            True when the line was written, False when it was only counted.
        """
        if not self.logger.isEnabledFor(level):
            return False
        now = self._clock()
        keys = self._keys
        state = keys.get(key)
        if state is not None:
            keys.move_to_end(key)
            if now - state[0] < self.interval:
                state[1] += 1
                return False
            held = int(state[1])
            if held:
                msg += " (and %d more in the last %d s)"
                args = (*args, held, round(now - state[0]))
            state[0], state[1] = now, 0
        else:
            keys[key] = [now, 0]
            if len(keys) > self.max_keys:
                keys.popitem(last=False)
        # The record names the caller's line, not this one.
        self.logger.log(level, msg, *args, exc_info=exc_info, stacklevel=stacklevel + 1)
        return True

    def warning(self, key: Hashable, msg: str, *args: object) -> bool:
        """:meth:`log` at WARNING."""
        return self.log(logging.WARNING, key, msg, *args, stacklevel=2)

    def error(self, key: Hashable, msg: str, *args: object) -> bool:
        """:meth:`log` at ERROR."""
        return self.log(logging.ERROR, key, msg, *args, stacklevel=2)
