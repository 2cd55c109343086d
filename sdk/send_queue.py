"""The records a blocking producer's sending threads hand to its loop
(:mod:`.blocking_producer`): those its fast path does not take.

Rules:

* A sending thread puts a record already checked and serialized, with its
  future and the time it was sent (the loop's clock). At most ``max_queued``
  wait; beyond that :meth:`SendQueue.put` blocks until the loop catches up or
  the producer closes.
* On the loop, the drainer task (:meth:`SendQueue.drainer`, asked by
  :meth:`SendQueue.drain_soon`) takes the queue in order, one hand-over at a
  time (:meth:`SendQueue.hand_over`, under one lock, so that two never
  interleave their records): each record goes to the async producer, unless its
  topic's metadata is not known yet; then it is parked
  (:mod:`.producer_parking`) and records of other topics go on.
* :attr:`SendQueue.draining` (read by the blocking producer's C send too, as
  ``_draining``) is true while records are queued or parked: the fast path
  stays off meanwhile, so that no record passes one of its topic sent before
  it. Only the drainer clears it once the queue is empty (a hand-over may
  still be under way when the queue looks empty), or the parking once no
  record is parked and no drain runs.
* Records still queued or parked when the loop has stopped are failed by
  :meth:`SendQueue.fail_all`.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
import trio

from .errors import ClientClosedError
from .producer_parking import ParkedRecords

if TYPE_CHECKING:
    from .producer import Producer as AsyncProducer
    from .producer_core import PreparedRecord

__all__ = ["QueuedSend", "SendQueue"]

#: A queued record: what the producer core's ``prepare`` made of a send's
#: arguments, the caller's future, and when it was sent (the loop's clock).
QueuedSend = tuple["PreparedRecord", Any, float]


class SendQueue:
    """One blocking producer's queue of records for its loop (see the module's rules).

    Args:
        max_queued: records that may wait before :meth:`put` blocks.
        closing: whether the producer is closing (then nothing is queued).
    """

    def __init__(self, max_queued: int, closing: Callable[[], bool]) -> None:
        #: Guards the queue; the producer's futures share it (cancel, callbacks).
        self.lock = threading.Lock()
        self._room = threading.Condition(self.lock)
        self._items: collections.deque[QueuedSend] = collections.deque()
        self._max = max_queued
        self._closing = closing
        self._waiting = 0  # senders blocked on a full queue
        self._draining = False  # (its name is the C send's)
        self._running = False  # a drain is scheduled or running
        self._wanted = trio.Event()
        self._tasks: anyio.abc.TaskGroup  # the drainer's, for the parked topics' tasks
        #: One hand-over at a time (made on the loop, by :meth:`attach`).
        self.hand_lock: anyio.Lock
        self._producer: AsyncProducer
        #: The records waiting for their topic's metadata.
        self.parked: ParkedRecords

    def __len__(self) -> int:
        """The records queued (not those parked)."""
        return len(self._items)

    @property
    def draining(self) -> bool:
        """Whether records are queued or parked (the fast path must not pass them)."""
        return self._draining

    def attach(self, producer: AsyncProducer, bound: str) -> None:
        """On the loop, once the drainer runs: the async producer to hand
        records to, and their bound while parked (``metadata_wait``)."""
        self._producer = producer
        self.hand_lock = anyio.Lock()
        self.parked = ParkedRecords(
            producer.cluster,
            producer.config,
            bound,
            self.hand_lock,
            self.give,
            self._parking_emptied,
        )
        self.parked.start(self._tasks)

    # -- the sending threads ------------------------------------------------------------

    def put(self, item: QueuedSend) -> bool:
        """Queue a record (waiting for room); whether the caller must have the
        loop drain (:meth:`drain_soon`).

        Raises:
            ClientClosedError: the producer is closing.
        """
        with self.lock:
            while len(self._items) >= self._max and not self._closing():
                self._waiting += 1
                try:
                    self._room.wait()
                finally:
                    self._waiting -= 1
            if self._closing():
                raise ClientClosedError("the producer is closed")
            self._items.append(item)
            self._draining = True
            if self._running:
                return False
            self._running = True
            return True

    def fail_all(self, error: BaseException) -> None:
        """Fail the records queued and parked (once the loop has stopped)."""
        with self.lock:
            items, self._items = list(self._items), collections.deque()
            self._draining = self._running = False
            self._room.notify_all()
        for _, future, _ in items:
            if not future.cancelled():
                future.set_exception(error)
        parked = getattr(self, "parked", None)  # (none if the loop never ran)
        if parked is not None:
            parked.fail_all(error, on_loop=False)

    # -- the loop -----------------------------------------------------------------------

    def drain_soon(self) -> None:
        """On the loop: have the drainer hand the queue over."""
        self._wanted.set()

    async def drainer(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """On the loop while the producer is open: hands the queue over when asked."""
        async with anyio.create_task_group() as tasks:
            self._tasks = tasks
            task_status.started()
            while True:
                await self._wanted.wait()
                self._wanted = trio.Event()
                while True:
                    await self.hand_over()
                    with self.lock:
                        # Records queued after the hand-over saw an empty queue: go on.
                        if not self._items:
                            self._running = False
                            self._draining = self.parked.holding
                            break

    async def hand_over(self) -> None:
        """Give every queued record to the async producer, in order, or park it."""
        async with self.hand_lock:
            queue = self._items
            parked = self.parked
            low = self._max // 2
            while True:
                try:
                    record, future, sent_at = queue.popleft()
                except IndexError:
                    break
                if self._waiting and len(queue) <= low:
                    with self.lock:
                        self._room.notify_all()
                if future.cancelled():
                    continue
                if parked.takes(record[0]):  # its topic's metadata is not known yet
                    parked.park(record, future, sent_at)
                    continue
                await self.give(record, future)
            if self._waiting:
                with self.lock:
                    self._room.notify_all()

    async def give(self, record: PreparedRecord, future: Any) -> None:
        """Hand one record to the async producer (under the hand-over's lock)."""
        try:
            handle = await self._producer.send_prepared(record, hot=True)
        except Exception as exc:
            future.set_exception(exc)
            return
        except BaseException:
            future.set_exception(ClientClosedError("the producer is closed"))
            raise
        future.taken(handle)

    async def settle(self) -> None:
        """Hand the queue over, then wait until no record is parked."""
        await self.hand_over()
        await self.parked.settled()

    async def wait_taken(self, future: Any) -> None:
        """Hand the queue over, then wait while ``future``'s record is parked."""
        await self.hand_over()
        while future.batch is None and not future.done():
            await self.parked.wait_change()

    def _parking_emptied(self) -> None:
        """No record is parked any more: the fast path may go on, unless records
        are queued (the drainer then decides)."""
        with self.lock:
            if not self._items and not self._running:
                self._draining = False
