"""Which producers a restarted worker may sync at once: the supervisor's
record of the workers' lives and of the producers born through them
(``trafka proxy --workers N``).

A proxy asks no leader about a producer it did not see born until its
restart's grace has passed (:mod:`.sync_grace`): a dead instance's write may
still be in the network, and landing after the ask it takes the numbers given
to the next batch. With workers, a client's InitProducerId often goes through
another worker than its Produce requests (its bootstrap connection reaches
any), so a worker just started would hold such a producer's first write for
the rest of its grace. The supervisor knows better: it starts every worker
and sees every one end.

The rule: a worker may sync a producer it did not see born without waiting
for its restart's grace when another worker passed the producer's
InitProducerId answer at ``t`` (its clock: ``time.monotonic``, one clock for
every process of the machine), every worker process that ended was seen
ended before ``t``, and every worker process is alive when the supervisor
answers.

Why it is safe: a write for the producer's id and epoch is made only for a
client's Produce, sent once the client read the InitProducerId answer, so
after ``t`` (an epoch is handed out once: a new producer id, or an epoch
bumped by its coordinator; should the same be passed again, to a retried
InitProducerId, the earliest birth counts). An instance that wrote for it was alive after
``t``. If it is dead when the worker asks, the supervisor saw it end after
``t`` (it is seen ended no sooner than it died), or finds it dead now (every
worker's process is checked at the answer, so one that died unseen counts
too): either way the answer is no, and the worker waits out its grace as
before. So a yes means no dead instance wrote for the producer: no write of
one can be in the network. Living workers are not the grace's concern (a
client that left a living worker is not ordered against it, see
:mod:`.journal_peers`). The instances of a former supervisor are taken to
have died before this one started, as a single proxy takes its former
instance to have died before its start.

Rules:

* A worker process installs its link (:func:`this_worker`), which its key
  routing takes when given none.
* A worker tells the supervisor every InitProducerId answer it passes
  (:meth:`SupervisorLink.born`, stamped before the client can read it), and
  asks only while its grace runs, for a producer it did not see born
  (:meth:`SupervisorLink.born_alive`); the question is bounded by the grace's
  end (or the request's deadline) and no answer by then is a no: the worker
  waits as long as it did before, never longer.
* Whatever the supervisor does not know (a birth not yet read, or not sent
  because its pipe was full, one forgotten beyond :data:`MAX_BIRTHS`, one
  older than the last end) is a no. A worker never waits to tell it.
* The births recorded before the last end are kept (the newest
  :data:`MAX_BIRTHS`), though none is answered yes again: the same producer
  id and epoch passed anew (a retried InitProducerId) keeps its first birth.
"""

from __future__ import annotations

import itertools
import logging
import select
import time
from collections import OrderedDict
from multiprocessing.connection import Connection
from typing import Protocol

import trio

__all__ = ["MAX_BIRTHS", "Births", "Siblings", "SupervisorLink", "this_worker"]

log = logging.getLogger("trafka.proxy")

MAX_BIRTHS = 100_000


class Siblings(Protocol):
    """What a worker's proxy knows of its sibling workers (see the module)."""

    def born(self, producer_id: int, epoch: int) -> None:
        """This worker passes the producer's InitProducerId answer now."""

    async def born_alive(self, producer_id: int, epoch: int, until: float) -> bool:
        """Whether a sibling saw the producer born with no worker process
        ended since (False when not known by ``until``, trio's clock)."""


def this_worker() -> Siblings | None:
    """The link to the supervisor of the worker this process is
    (:meth:`SupervisorLink.install`); None in any other process. A worker is
    a process of its own, so its link is the process's."""
    return _installed[0] if _installed else None


_installed: list[Siblings] = []


class Births:
    """The supervisor's record: when each producer was born, when a worker
    process was last seen ended (times on ``time.monotonic``)."""

    def __init__(self, started: float) -> None:
        # Nothing of a former supervisor's instances is known: they ended before it started.
        self.last_end = started
        self._born: OrderedDict[tuple[int, int], float] = OrderedDict()

    def born(self, producer_id: int, epoch: int, at: float) -> None:
        # The earliest birth counts: a client that read the answer may write
        # from then on (a coordinator answers a retried InitProducerId again).
        key = (producer_id, epoch)
        self._born[key] = min(at, self._born.get(key, at))
        self._born.move_to_end(key)
        while len(self._born) > MAX_BIRTHS:
            self._born.popitem(last=False)

    def ended(self, at: float) -> None:
        """A worker process was seen ended at ``at``."""
        self.last_end = max(self.last_end, at)

    def answer(self, producer_id: int, epoch: int, all_alive: bool, now: float) -> bool:
        """Whether the producer may be synced at once (see the module's rule);
        ``all_alive``: every worker process is alive now."""
        if not all_alive:
            self.ended(now)
            return False
        at = self._born.get((producer_id, epoch))
        return at is not None and at > self.last_end


class SupervisorLink:
    """A worker's end of its pipe to the supervisor: births told, questions
    asked and their answers read (:meth:`read`, run in the worker's loop)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self._ids = itertools.count()
        self._waiting: dict[int, tuple[trio.Event, list[bool]]] = {}

    def install(self) -> None:
        """Make it this process's link (:func:`this_worker`)."""
        _installed[:] = [self]

    def born(self, producer_id: int, epoch: int) -> None:
        self._send(("born", (producer_id, epoch, time.monotonic())))

    async def born_alive(self, producer_id: int, epoch: int, until: float) -> bool:
        qid = next(self._ids)
        event, answer = self._waiting[qid] = (trio.Event(), [])
        try:
            if not self._send(("born_alive", (qid, producer_id, epoch))):
                return False
            with trio.move_on_at(until):
                await event.wait()
            return answer == [True]
        finally:
            del self._waiting[qid]

    def _send(self, message: tuple[str, object]) -> bool:
        """Send unless the pipe is full (a supervisor that does not read is
        not waited for: what it is not told it answers no)."""
        try:
            if not select.select([], [self.conn.fileno()], [], 0)[1]:
                return False
            self.conn.send(message)
        except OSError as exc:  # the supervisor is gone: read() stops the worker
            log.debug("cannot tell the supervisor: %s", exc)
            return False
        return True

    async def read(self, gone: trio.CancelScope) -> None:
        """Read the supervisor's answers until its pipe ends, then cancel ``gone``."""
        while True:
            await trio.lowlevel.wait_readable(self.conn.fileno())
            try:
                kind, value = self.conn.recv()
            except (EOFError, OSError):
                break
            if kind == "born_alive":
                qid, yes = value
                waiting = self._waiting.get(qid)
                if waiting is not None:
                    waiting[1].append(bool(yes))
                    waiting[0].set()
        log.warning("the supervisor is gone: stopping")
        gone.cancel()
