"""The memory budget of requests held, across every connection of a server.

Kafka's ``queued.max.request.bytes``: a server with many connections, each
sending part of a large request, must not hold every one of those requests in
memory at once. brokerlite's and the proxy's drivers ask this budget before they
read the body of a request that did not arrive whole, and stop reading the
connection (backpressure) until the budget grants it. :class:`RequestBudget` is
the I/O-free bookkeeping; :func:`reserve` and :func:`release` are its trio side
(a reader waits on a :class:`trio.Event` ticket).

Rules and invariants:

* A connection reserves the whole announced size of its incomplete frame, once
  the frame's size prefix is in, and reads the rest of the frame only with the
  reservation. Reserving is only accounting: memory still follows the bytes that
  arrive, never a length that has not (the frame reader's rule). A connection
  holds at most one reservation and never waits while holding one, so two
  half-received frames never wait for each other: every granted frame can
  complete.
* A reservation is granted when it fits in what is left of the limit, or when
  nothing at all is reserved (a frame larger than the whole budget goes alone).
* Grants are first come, first served: while one connection waits, those that
  ask after it wait behind it, even for less (a large frame is not starved by a
  stream of small ones).
* ``used`` never exceeds ``limit``, except by the one frame larger than it.
* Tickets are the caller's: any hashable object naming the waiter, handed back
  when it is granted.
"""

from __future__ import annotations

import collections
from collections.abc import Hashable, Iterable

import trio

__all__ = ["RequestBudget", "release", "reserve"]


class RequestBudget:
    """Bytes reserved by incomplete requests, at most ``limit``.

    Args:
        limit: the most bytes reserved at once; None for no limit (Kafka's
            ``queued.max.request.bytes=-1``).
    """

    __slots__ = ("_queue", "limit", "used", "waited")

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.used = 0
        self.waited = 0  # reservations that had to wait for room, ever
        self._queue: collections.deque[tuple[Hashable, int]] = collections.deque()

    @property
    def waiting(self) -> int:
        """How many reservations wait for room."""
        return len(self._queue)

    def reserve(self, ticket: Hashable, size: int) -> bool:
        """Reserve ``size`` bytes now (True), or queue ``ticket`` for them (False):
        a later :meth:`release` or :meth:`cancel` then returns it, granted."""
        if not self._queue and self._fits(size):
            self.used += size
            return True
        self._queue.append((ticket, size))
        self.waited += 1
        return False

    def release(self, size: int) -> list[Hashable]:
        """Give back ``size`` reserved bytes; returns the tickets this grants."""
        self.used -= size
        assert self.used >= 0, "released more than was reserved"
        return self._grant()

    def cancel(self, ticket: Hashable) -> list[Hashable]:
        """Withdraw a queued ticket (its connection went away); returns the tickets
        granted because it no longer stands in front of them."""
        for i, (queued, _) in enumerate(self._queue):
            if queued == ticket:
                del self._queue[i]
                break
        return self._grant()

    def _fits(self, size: int) -> bool:
        return self.limit is None or self.used == 0 or self.used + size <= self.limit

    def _grant(self) -> list[Hashable]:
        granted = []
        queue = self._queue
        while queue and self._fits(queue[0][1]):
            ticket, size = queue.popleft()
            self.used += size
            granted.append(ticket)
        return granted


async def reserve(budget: RequestBudget, size: int) -> None:
    """Reserve ``size`` bytes of ``budget``, waiting (first come, first served)
    until they fit. Cancelled while waiting, it holds nothing and stands in no
    one's way."""
    ticket = trio.Event()
    if budget.reserve(ticket, size):
        return
    try:
        await ticket.wait()
    except BaseException:
        if ticket.is_set():  # granted as it was cancelled
            release(budget, size)
        else:
            _wake(budget.cancel(ticket))
        raise


def release(budget: RequestBudget, size: int) -> None:
    """Give back ``size`` bytes :func:`reserve` granted, waking the readers that
    now fit."""
    _wake(budget.release(size))


def _wake(tickets: Iterable[Hashable]) -> None:
    for ticket in tickets:
        assert isinstance(ticket, trio.Event)
        ticket.set()
