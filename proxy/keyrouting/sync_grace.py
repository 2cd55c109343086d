"""When a routed producer's sequences may be asked of the partitions' leaders.

A proxy learns a producer's next sequence at a partition from its leader
(DescribeProducers, :meth:`.sequences.Sequences.synced`) unless it saw the
producer born. The answer is only good if no other writer of the producer's
sequences is still to be heard from: a write of a former proxy instance
processed by the broker after the ask takes the numbers this proxy gives to
other records next, and the broker answers their batch as that write's
duplicate (Kafka's rule: a batch whose first and last sequence equal one of
the producer's last five is a retry, answered with its offset, nothing
written), so the client would be told written records that are in no log.

Rules (trio's clock throughout, so tests drive it with a ``MockClock``):

* **A restart's grace.** For ``restart_grace`` seconds from the proxy's start
  no leader is asked about a producer this proxy did not see born: a former
  instance of the proxy (killed, restarted) may have left writes in the
  network, and they land meanwhile. A producer born here since the start has
  no such writes at its epoch. With ``--workers``, neither has one born
  through a sibling worker since every worker process that ended was seen
  ended, all of them alive at the question: the supervisor answers that
  (:mod:`.worker_lives`, where the argument is), and a yes syncs it at once
  (a no, or no answer before the grace's end or the request's deadline,
  waits as before). The failover's grace below still applies.
* **A failover's grace** (with a directory journal; a shared journal's claims
  do this, below). A producer this proxy did not see
  born whose placements at its epoch the journal holds (journaled by a
  former instance, or by another worker, :mod:`.journal_peers`, whose clients
  moved here) was routed by another proxy, whose writes may still be in the
  network: it is synced only ``restart_grace`` after this proxy first synced
  it. Decided once per producer id and epoch (the newest
  :data:`MAX_PRODUCERS` kept), at its first sync: a producer without
  placements then is never held later, when it has some; decided again when
  it comes back from a sibling worker that wrote for it (:meth:`SyncGrace.moved`,
  :mod:`.journal_peers`).
* **A takeover's grace** (a shared journal, :mod:`.journal_topic`). Before
  routing a producer the proxy claims it, once per producer and epoch; the
  journal says how long to wait from the claim (the former owner's last
  writes land meanwhile), and the producer's sequences are learnt afresh once
  it has passed.
* A request whose deadline comes first is refused (:class:`GraceOutlasts`)
  at once, not at its deadline: holding it would only delay the answers owed
  after it on the client's connection (and a client whose own request timeout
  is shorter than the deadline, which adds the connection timeout, would give
  the connection up first). The driver answers it REQUEST_TIMED_OUT with
  nothing numbered, and the client retries it after its backoff.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

import trio

from .journal import JournalError, PlacementJournal
from .worker_lives import Siblings

__all__ = ["MAX_PRODUCERS", "GraceOutlasts", "SyncGrace"]

MAX_PRODUCERS = 100_000


class GraceOutlasts(Exception):
    """The request's deadline comes before its producer may be synced (or the
    claim failed); the message says why."""


class SyncGrace:
    """The restart grace and the claims of one proxy's producers.

    Args:
        restart_grace: seconds from now (trio's clock: constructed in a trio
            run when not 0) before which no producer not seen born is synced.
        siblings: a worker's sibling workers, asked within that time whether
            the producer was born through one of them (see the module's rules).
    """

    def __init__(self, restart_grace: float = 0.0, siblings: Siblings | None = None) -> None:
        self.grace = restart_grace
        self.siblings = siblings
        self.sync_from = trio.current_time() + restart_grace if restart_grace > 0 else 0.0
        # Per producer id and epoch synced: when it may be (a failover's grace).
        self._first_sync: OrderedDict[tuple[int, int], float] = OrderedDict()
        # Per producer id claimed: its epoch and the moment it may be synced.
        self._claims: dict[int, tuple[int, float]] = {}

    async def before_sync(self, pid: int, epoch: int, journaled: bool, deadline: float) -> None:
        """Return once a producer not seen born may be synced: the restart
        grace has passed and, when its first sync found placements of it in
        the journal (``journaled``), the failover's grace from then.

        Raises:
            GraceOutlasts: ``deadline`` comes first.
        """
        key = (pid, epoch)
        ready = self._first_sync.get(key)
        if ready is None:
            ready = trio.current_time() + self.grace if journaled else 0.0
            self._first_sync[key] = ready
            while len(self._first_sync) > MAX_PRODUCERS:
                self._first_sync.popitem(last=False)
        restart = self.sync_from
        if (
            self.siblings is not None
            and trio.current_time() < restart
            and await self.siblings.born_alive(pid, epoch, min(restart, deadline))
        ):
            restart = 0.0  # no dead instance wrote for it (see worker_lives)
        await _wait_until(
            max(restart, ready),
            deadline,
            f"producer {pid}: the proxy started just now, or another proxy routed it "
            "before, and that proxy's writes may still be on their way",
        )

    def moved(self, pid: int, epoch: int) -> None:
        """The producer was routed by a sibling worker since this proxy last
        synced it: its failover's grace is decided again at its next sync."""
        self._first_sync.pop((pid, epoch), None)

    async def claim(
        self,
        journal: PlacementJournal,
        pid: int,
        epoch: int,
        deadline: float,
        taken_over: Callable[[int], None],
    ) -> None:
        """Own the producer's sequences (claimed once per producer and epoch)
        and wait for a takeover's grace; ``taken_over(pid)`` at once when the
        claim took the producer from another instance (its session is to be
        learnt afresh after the grace).

        Raises:
            GraceOutlasts: the claim failed, or the grace outlasts ``deadline``.
        """
        claimed = self._claims.get(pid)
        if claimed is None or claimed[0] != epoch:
            try:
                grace = await journal.claim(pid, epoch, deadline)
            except JournalError as exc:
                raise GraceOutlasts(str(exc)) from None
            claimed = self._claims[pid] = (epoch, trio.current_time() + grace)
            if grace:
                taken_over(pid)
        await _wait_until(
            claimed[1], deadline, f"producer {pid} was taken over from another proxy just now"
        )

    def unclaim(self, pid: int) -> None:
        """Claim the producer again before routing it next (another instance
        may own it now)."""
        self._claims.pop(pid, None)


async def _wait_until(ready_at: float, deadline: float, why: str) -> None:
    if trio.current_time() >= ready_at:
        return
    if ready_at > deadline:
        raise GraceOutlasts(why)  # waiting cannot help: at once (the module's rules)
    await trio.sleep_until(ready_at)
